"""The scale-out run: one relay process of 4 tasks under 1 vs 2 ``--join`` coordinators.

``python -m perf --runs scale-out`` (or ``python -m perf.scale_out [--bootstrap-servers
HOST:PORT] [--messages N]``). For each coordinator count (1, then 2), on fresh topics:

1. a backlog of ``messages`` records (100 B values) is written to a 4-partition input;
2. that many ``parsley-coordinator run --join`` coordinators are started on one
   machine (separate state dirs and control sockets) over a relay process that
   starts at the earliest offset, so the 4 tasks are shared among them
   (docs/operations.md, "Several coordinators");
3. an independent ``read_committed`` reader counts the output (``LogAppendTime``) until
   every record is relayed; the throughput is the backlog over the time from the
   first output record's append to the last one's;
4. ``stop --all`` stops the coordinators.

The report gives both throughputs and their ratio (2 coordinators over 1). On one
machine the two coordinators share its cores with the same 4 workers, so the ratio
measures the overhead of the coordinators' group (expected near 1), not a speed-up:
that needs the coordinators on separate machines. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Final

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from perf.runs import OUTPUT_CONFIG, create_topics, delete_topics

__all__ = ["TASKS", "scale_out_benchmark", "scale_out_run"]

TASKS: Final = 4
"""The relay's task count (input partitions)."""
APP: Final = '''
import os
from parsley import EARLIEST, Channel, Effects, Process
from parsley.serdes import BYTES

OUT = Channel(os.environ["SCALE_OUT"], BYTES, BYTES)


def handle(delivery, state):
    return Effects.builder().send(OUT, delivery.key, delivery.value).build()


processes = [Process("relay").receives(
    Channel(os.environ["SCALE_IN"], BYTES, BYTES).starting_at(EARLIEST), handle).sends(OUT)]
'''
"""The relay application each coordinator imports (``scaleapp:processes``)."""


def _say(msg: str) -> None:
    print(f"[perf scale-out {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _produce(bootstrap: str, topic: str, messages: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "enable.idempotence": True, "log_level": 0})
    value = b"x" * size
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, key=b"%d" % i, value=value, partition=i % TASKS)
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(120) != 0:
        raise RuntimeError(f"the backlog of {topic} was not acknowledged within 120 s")


def _read_until(bootstrap: str, topic: str, messages: int, timeout_s: float
                ) -> tuple[int, float | None, float | None]:
    """Count ``topic``'s committed records until ``messages`` (bounded): ``(count, first
    append ms, last append ms)``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "perf-scale-unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "log_level": 0})
    first: float | None = None
    last: float | None = None
    count = 0
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(TASKS)])
        deadline = time.monotonic() + timeout_s
        while count < messages and time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        _say(f"reader: {err}")
                    continue
                count += 1
                ts = float(msg.timestamp()[1])
                first = ts if first is None else min(first, ts)
                last = ts if last is None else max(last, ts)
    finally:
        consumer.close()
    return count, first, last


def scale_out_run(bootstrap: str, admin: AdminClient, coordinators: int, messages: int,
                  workdir: str, timeout_s: float = 300.0) -> dict[str, Any]:
    """One run of the relay under ``coordinators`` coordinators (module docstring).

    Returns:
        ``{"coordinators", "messages", "relayed", "msgs_per_s", "seconds"}``
        (``msgs_per_s`` ``None`` when not everything was relayed).
    """
    tag = f"perf-scale-{uuid.uuid4().hex[:6]}-{coordinators}"
    src, out = f"{tag}-in", f"{tag}-out"
    root = Path(tempfile.mkdtemp(prefix="psc-", dir="/tmp"))  # short ipc paths
    (root / "scaleapp.py").write_text(APP)
    create_topics(admin, [(src, TASKS, {}), (out, TASKS, OUTPUT_CONFIG)])
    procs: list[subprocess.Popen[bytes]] = []
    try:
        _produce(bootstrap, src, messages)
        env = dict(os.environ, SCALE_IN=src, SCALE_OUT=out, PYTHONPATH=os.pathsep.join(
            filter(None, [str(root), str(Path(__file__).resolve().parents[1]),
                          os.environ.get("PYTHONPATH")])))
        _say(f"{coordinators} coordinator(s): relaying a backlog of {messages} records "
             f"over {TASKS} tasks")
        for i in range(coordinators):
            with open(root / f"c{i}.log", "ab") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "coordinator.cli", "run", "scaleapp:processes",
                     "--join", "--bootstrap-servers", bootstrap, "--prefix", tag,
                     "--state-dir", str(root / f"state{i}"), "--listen",
                     f"ipc://{root / f'c{i}.ipc'}", "--log-status-every", "0"],
                    cwd=root, env=env, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, start_new_session=True))
        t0 = time.monotonic()
        relayed, first, last = _read_until(bootstrap, out, messages, timeout_s)
        seconds = time.monotonic() - t0
        rate = None
        if relayed >= messages and first is not None and last is not None and last > first:
            rate = messages / ((last - first) / 1000.0)
        _say(f"{coordinators} coordinator(s): {relayed} relayed, "
             f"{'-' if rate is None else f'{rate:.0f}'} msgs/s")
        return {"coordinators": coordinators, "messages": messages, "relayed": relayed,
                "msgs_per_s": rate, "seconds": round(seconds, 1)}
    finally:
        if procs:
            subprocess.run([sys.executable, "-m", "coordinator.cli", "stop", "--all",
                            "--endpoint", f"ipc://{root / 'c0.ipc'}"], cwd=root, env=dict(
                                os.environ), capture_output=True, timeout=120, check=False)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)
        from coordinator.runtime.coordinators_group import coordinators_group

        delete_topics(admin, [src, out, coordinators_group(tag, "relay")], prefix=tag)
        shutil.rmtree(root, ignore_errors=True)


def scale_out_benchmark(bootstrap: str, admin: AdminClient, messages: int, workdir: str
                        ) -> dict[str, Any]:
    """Runs 1 then 2 coordinators over the 4-task relay.

    Returns:
        ``{"tasks", "one", "two", "ratio", "note"}``: the runs (:func:`scale_out_run`) and
        the throughput ratio two over one (``None`` when a run did not finish).
    """
    one = scale_out_run(bootstrap, admin, 1, messages, workdir)
    two = scale_out_run(bootstrap, admin, 2, messages, workdir)
    ratio = None
    if one["msgs_per_s"] and two["msgs_per_s"]:
        ratio = round(two["msgs_per_s"] / one["msgs_per_s"], 3)
    return {"tasks": TASKS, "one": one, "two": two, "ratio": ratio,
            "note": "both coordinators share one machine's cores: the ratio measures the "
                    "overhead of sharing tasks through the coordinators' group, not a "
                    "speed-up (that needs a machine per coordinator)"}


def main(argv: list[str] | None = None) -> int:
    """``python -m perf.scale_out``: print the benchmark's JSON; 1 when a run did not finish."""
    ap = argparse.ArgumentParser(prog="python -m perf.scale_out", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap-servers", help="use this broker instead of a private one")
    ap.add_argument("--messages", type=int, default=20_000, help="backlog records per run")
    a = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="parsley-perf-")
    private: Path | None = None
    bootstrap = a.bootstrap_servers
    try:
        if bootstrap is None:
            from devtools import devbroker

            private = Path(workdir) / "broker"
            state, _ = devbroker.up(private, say=_say)
            bootstrap = state.bootstrap
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        result = scale_out_benchmark(bootstrap, admin, a.messages, workdir)
        del admin
    finally:
        if private is not None:
            from devtools import devbroker

            devbroker.down(private)
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps({"scale_out": result}, indent=2))
    return 0 if result["ratio"] is not None else 1


if __name__ == "__main__":
    sys.exit(main())
