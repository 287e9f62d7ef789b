"""The README's quickstart (``examples/quickstart.py``) runs as the README says.

``parsley-coordinator run`` over the two processes on the real broker: every
order produced yields exactly one ``paid <order>`` line on the ledger topic and
never a ``VIOLATION`` (a payment handled before its order), then ``stop`` is clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "coordinator.cli"]
ORDERS = 40
PARTITIONS = 2


@pytest.mark.slow
def test_quickstart_pays_every_order_after_it(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    topics = f"qs{uuid.uuid4().hex[:8]}"
    for suffix in ("orders", "payments", "ledger"):
        create_topic(f"{topics}.{suffix}", partitions=PARTITIONS)
    (tmp_path / "qsapp.py").write_text(
        f"from examples.quickstart import build\nPROCESSES = build({topics!r})\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    where = ["--prefix", f"qs-{uuid.uuid4().hex[:8]}", "--state-dir", str(tmp_path / "state")]

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    for i in range(ORDERS):
        order = {"id": f"o{i}", "amount": i * 10}
        producer.produce(f"{topics}.orders", key=f"customer-{i % 7}", value=orjson.dumps(order))
    assert producer.flush(30) == 0

    run = subprocess.Popen(
        [*CLI, "run", "qsapp:PROCESSES", "--bootstrap-servers", kafka_bootstrap, *where],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        while time.monotonic() < deadline and len(lines) < ORDERS:
            assert run.poll() is None, f"run exited early: {run.communicate()[1]}"
            records = read_committed(kafka_bootstrap, f"{topics}.ledger", range(PARTITIONS))
            lines = [r.value.decode() for r in records]
            time.sleep(0.5)
        assert sorted(lines) == sorted(f"paid o{i}" for i in range(ORDERS)), lines
        stop = subprocess.run([*CLI, "stop", *where, "--deadline", "15"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert stop.returncode == ExitCode.CLEAN, stop.stdout + stop.stderr
        _out, err = run.communicate(timeout=60)
        assert run.returncode == ExitCode.CLEAN, err
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.communicate(timeout=60)


ROUNDS = 20
"""Rounds of unkeyed orders (one to each partition, 1 s apart) after the keyed ones.
``checkout`` sends each payment under the order's key; with no key, librdkafka's
``murmur2_random`` sends a batch to a partition picked at random (sticky partitioning),
so a round's payments miss their orders' partitions with probability at least 1/2;
rounds stop at the refusal, and twenty make one certain but for 2^-20."""


def _status(where: list[str], cwd: Path, env: dict[str, str]) -> dict[str, Any] | None:
    res = subprocess.run([*CLI, "status", "--json", *where, "--timeout", "2"], cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=60)
    # 3 and 4: a process stands stopped by a refusal or a failure (docs/operations.md,
    # "Commands"); the document is printed all the same.
    return orjson.loads(res.stdout) if res.returncode in (0, 3, 4) else None


@pytest.mark.slow
def test_quickstart_refuses_an_unkeyed_order_rather_than_print_violation(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    """Unkeyed input breaks co-partitioning: ``ledger`` refuses CROSS_PARTITION_CAUSE
    naming both partitions, the key and the remedy; the independent read_committed
    verdict on the ledger topic: every keyed order paid once, no ``VIOLATION`` line."""
    topics = f"qs{uuid.uuid4().hex[:8]}"
    for suffix in ("orders", "payments", "ledger"):
        create_topic(f"{topics}.{suffix}", partitions=PARTITIONS)
    (tmp_path / "qsapp.py").write_text(
        f"from examples.quickstart import build\nPROCESSES = build({topics!r})\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    where = ["--prefix", f"qs-{uuid.uuid4().hex[:8]}", "--state-dir", str(tmp_path / "state")]
    keyed = 10
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    for i in range(keyed):
        producer.produce(f"{topics}.orders", key=f"customer-{i % 7}",
                         value=orjson.dumps({"id": f"o{i}", "amount": i}))
    assert producer.flush(30) == 0

    run = subprocess.Popen(
        [*CLI, "run", "qsapp:PROCESSES", "--bootstrap-servers", kafka_bootstrap, *where],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        while time.monotonic() < deadline and len(lines) < keyed:
            assert run.poll() is None, f"run exited early: {run.communicate()[1]}"
            records = read_committed(kafka_bootstrap, f"{topics}.ledger", range(PARTITIONS))
            lines = [r.value.decode() for r in records]
            time.sleep(0.5)
        assert sorted(lines) == sorted(f"paid o{i}" for i in range(keyed)), lines

        ledger: dict[str, Any] = {}
        deadline = time.monotonic() + 120  # liveness bound, not a speed assertion
        i = keyed
        while time.monotonic() < deadline:
            if i < keyed + 2 * ROUNDS:  # kafka-console-producer's default: no key
                for p in range(PARTITIONS):
                    producer.produce(f"{topics}.orders", partition=p,
                                     value=orjson.dumps({"id": f"o{i}", "amount": i}))
                    i += 1
                assert producer.flush(30) == 0
            doc = _status(where, tmp_path, env)
            ledger = (doc or {}).get("processes", {}).get("ledger", {})
            if ledger.get("refusal_reason"):
                break
            time.sleep(1)
        assert ledger.get("refusal_reason") == "CROSS_PARTITION_CAUSE", ledger
        detail = ledger["failure_detail"]
        assert f"topic '{topics}.payments' partition " in detail, detail
        assert f"names a cause at topic '{topics}.orders' partition " in detail, detail
        assert "(no key (null))" in detail and "murmur2_random" in detail, detail
        assert "(docs/runbooks.md, CROSS_PARTITION_CAUSE)" in detail, detail

        records = read_committed(kafka_bootstrap, f"{topics}.ledger", range(PARTITIONS))
        lines = [r.value.decode() for r in records]
        assert not [line for line in lines if line.startswith("VIOLATION")], lines
        assert len(lines) == len(set(lines)), f"a duplicated ledger line: {lines}"
        assert {f"paid o{i}" for i in range(keyed)} <= set(lines), lines
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.communicate(timeout=60)
