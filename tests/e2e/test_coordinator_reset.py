"""``parsley-coordinator reset`` on the real broker, every mode, through the CLI as an operator
runs it (docs/runbooks.md, "Resetting a process").

A relay process with a store runs under ``parsley-coordinator run``; between runs the reset
moves the process to a new boundary, and the next run must deliver exactly the records from
that boundary on, in order, once each (an independent ``read_committed`` consumer is the
verdict), with no refusal. While the coordinator or a member of the group is alive the reset
refuses and changes nothing; ``--dry-run`` changes nothing and prints Kafka commands that run.
A two-process pipeline checks the boundary's meaning: positions before it are settled causes,
so records whose causes lie before it are delivered, not held.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition

from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley.declarations import ordering_changelog
from tests.cli_support import CLI
from workers.admin import describe_topic

DEVBROKER_TOOL = [sys.executable, "-c", "from devtools.devbroker_cli import main; main()", "tool"]
APP = '''
import os
from parsley import Channel, Effects, Process, Store
from parsley.serdes import BYTES

OUT = Channel(os.environ["RS_OUT"], BYTES, BYTES)
INVENTORY = Store("inventory", BYTES, BYTES)


def handle(delivery, state):
    return (Effects.builder().put(INVENTORY, delivery.key, delivery.value)
            .send(OUT, delivery.key, delivery.value).build())


processes = [Process("shipper").receives(Channel(os.environ["RS_SRC"], BYTES, BYTES), handle)
             .sends(OUT).stores(INVENTORY)]
'''
T0_MS = (int(time.time()) - 3600) * 1000
"""Record time of the first source record, an hour ago; record i is stamped T0_MS + i s.
Recent on purpose: records older than the topic's retention.ms are deleted by the broker
(with the segment they are in), which would move the log start under the test."""


@dataclass
class Op:
    """One operator's view: the app's directory, environment, prefix and state dir."""

    bootstrap: str
    cwd: Path
    env: dict[str, str]
    prefix: str
    state_dir: Path
    run: subprocess.Popen[str] | None = None

    def cli(self, *args: str, state_dir: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args, "--prefix", self.prefix, "--state-dir",
                               str(state_dir or self.state_dir)], cwd=self.cwd, env=self.env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=180)

    def reset(self, *args: str, state_dir: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
        return self.cli("reset", "rsapp:processes", "--bootstrap-servers", self.bootstrap,
                        *args, state_dir=state_dir)

    def start(self) -> None:
        assert self.run is None
        self.run = subprocess.Popen([*CLI, "run", "rsapp:processes", "--bootstrap-servers",
                                     self.bootstrap, "--prefix", self.prefix, "--state-dir",
                                     str(self.state_dir)], cwd=self.cwd, env=self.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        states: dict[str, str] = {}
        while True:
            res = self.cli("status", "--json", "--timeout", "2")
            if res.returncode == 0:
                states = {n: p["state"] for n, p in orjson.loads(res.stdout)["processes"].items()}
                if states and all(s == "RUNNING" for s in states.values()):
                    return
            assert self.run.poll() is None, f"run exited: {self.run.communicate()[1]}"
            if time.monotonic() > deadline:
                self.run.terminate()
                err = self.run.communicate(timeout=60)[1]
                raise AssertionError(f"not RUNNING within 120 s: {states}\n{err[-4000:]}")
            time.sleep(0.5)

    def stop(self) -> str:
        assert self.run is not None
        res = self.cli("stop")
        assert res.returncode == 0, res.stderr
        _out, err = self.run.communicate(timeout=60)
        code, self.run = self.run.returncode, None
        assert code == 0, f"run exited {code} (a refusal or failure):\n{err[-3000:]}"
        return err

    def kill(self) -> None:
        if self.run is not None and self.run.poll() is None:
            self.run.terminate()
            self.run.communicate(timeout=60)
        self.run = None


def _operator(bootstrap: str, tmp_path: Path, app: str, **env: str) -> Op:
    (tmp_path / "rsapp.py").write_text(app)
    return Op(bootstrap, tmp_path, dict(
        os.environ, **env,
        PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])),
        f"rs-{uuid.uuid4().hex[:8]}", tmp_path / "state")


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    for i in range(first, first + count):
        producer.produce(topic, key=b"k", value=f"v{i}".encode(), partition=0,
                         timestamp=T0_MS + i * 1000)
    assert producer.flush(30) == 0


def _values(bootstrap: str, topic: str) -> list[str]:
    return [(r.value or b"").decode() for r in read_committed(bootstrap, topic)]


def _await_values(bootstrap: str, topic: str, expected: list[str], timeout_s: float = 90) -> None:
    """Wait until ``topic`` holds exactly ``expected``; fail at once on more or other."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = _values(bootstrap, topic)
        assert got == expected[:len(got)], f"delivered {got}, expected {expected}"
        if got == expected:
            return
        assert time.monotonic() < deadline, f"delivered {got} after {timeout_s} s, " \
                                            f"expected {expected}"
        time.sleep(0.5)


def _committed(admin: Any, group: str, topic: str) -> tuple[int, str]:
    res = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])])[group].result(30)
    [tp] = res.topic_partitions
    return tp.offset, tp.metadata or ""


def _record(stdout: str) -> dict[str, Any]:
    """The boundary record the reset printed after 'boundary recorded in <path>'."""
    path = re.search(r"boundary recorded in (\S+)", stdout)
    assert path is not None, stdout
    record: dict[str, Any] = orjson.loads(Path(path.group(1)).read_bytes())
    return record


@pytest.mark.slow
def test_reset_refuses_while_alive_dry_run_changes_nothing_and_corrupt_state_resets(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path
) -> None:
    src, out = create_topic(partitions=1), create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, 0, 5)
    op = _operator(kafka_bootstrap, tmp_path, APP, RS_SRC=src.name, RS_OUT=out.name)
    group = f"{op.prefix}-shipper"
    try:
        op.start()
        _await_values(kafka_bootstrap, out.name, [f"v{i}" for i in range(5)])

        # The coordinator answers on its control endpoint: refused, nothing changed.
        began = time.monotonic()
        res = op.reset("--to-earliest", "--yes", "--wait", "2")
        assert res.returncode == 3, res.stderr
        assert "coordinator serving ['shipper'] answers at" in res.stderr
        assert "parsley-coordinator stop" in res.stderr
        refused_coordinator_s = time.monotonic() - began

        # Seen from another state dir the coordinator is invisible, its workers are not.
        began = time.monotonic()
        res = op.reset("--to-earliest", "--yes", "--wait", "2", state_dir=tmp_path / "other")
        assert res.returncode == 3, res.stderr
        assert f"group '{group}' still has 1 live member(s)" in res.stderr
        assert "client id '" in res.stderr and "on host /" in res.stderr
        assert f"group.instance.id {group}-task-000" in res.stderr
        refused_members_s = time.monotonic() - began

        # Not on a terminal: --yes or --dry-run is required.
        res = op.reset("--to-earliest")
        assert res.returncode == 2 and "pass --yes" in res.stderr, res.stderr

        assert describe_topic(kafka_admin, ordering_changelog(op.prefix, "shipper")) is not None
        assert _committed(kafka_admin, group, src.name) == (5, "parsley.task")
        op.stop()

        # On a terminal it asks; "n" changes nothing.
        master, slave = os.openpty()
        asked = subprocess.Popen(
            [*CLI, "reset", "rsapp:processes", "--bootstrap-servers", kafka_bootstrap,
             "--to-earliest", "--prefix", op.prefix, "--state-dir", str(op.state_dir)],
            cwd=op.cwd, env=op.env, stdin=slave, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        os.close(slave)
        os.write(master, b"n\n")
        out_text, err_text = asked.communicate(timeout=180)
        os.close(master)
        assert asked.returncode == 3, err_text
        assert "causal past is discarded" in out_text and "not confirmed: nothing changed" \
            in err_text, (out_text, err_text)

        res = op.reset("--to-offset", "2", "--dry-run")
        assert res.returncode == 0, res.stderr
        assert "dry run: nothing changed" in res.stdout
        assert f"{src.name}[0] 5 -> 2" in res.stdout
        commands = [line.strip() for line in res.stdout.splitlines()
                    if line.strip().startswith(("kafka-", "rm -rf"))]
        assert commands[:2] == [
            f"kafka-topics --bootstrap-server {kafka_bootstrap} --delete --if-exists --topic "
            f"{ordering_changelog(op.prefix, 'shipper')}",
            f"kafka-topics --bootstrap-server {kafka_bootstrap} --delete --if-exists --topic "
            f"{group}-inventory-changelog"]
        assert commands[2] == f"kafka-consumer-groups --bootstrap-server {kafka_bootstrap} " \
                              f"--delete --group {group}"
        assert commands[4] == f"rm -rf {op.state_dir / group}"
        # The positions' command is Kafka's own preview, and it agrees on the offset.
        preview = subprocess.run([*DEVBROKER_TOOL, *shlex.split(commands[3])], env=op.env,
                                 capture_output=True, text=True, timeout=120)
        assert preview.returncode == 0, preview.stderr
        assert re.search(rf"{re.escape(group)}\s+{re.escape(src.name)}\s+0\s+2\b",
                         preview.stdout), preview.stdout
        assert describe_topic(kafka_admin, ordering_changelog(op.prefix, "shipper")) is not None
        assert describe_topic(kafka_admin, f"{group}-inventory-changelog") is not None
        assert _committed(kafka_admin, group, src.name) == (5, "parsley.task")
        assert (op.state_dir / group).exists()

        # A refusal that asks for a reset must not stop the reset: corrupt ordering state
        # (UNKNOWN_ORDERING_STATE_FORMAT) is recorded as unreadable, and reset.
        producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
        producer.produce(ordering_changelog(op.prefix, "shipper"), key=b"\xff-not-a-key",
                         value=b"\x00garbage", partition=0)
        assert producer.flush(30) == 0
        res = op.reset("--to-earliest", "--yes")
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
        record = _record(res.stdout)
        assert record["ordering_state"].startswith("unreadable: "), record
        assert "UNKNOWN_ORDERING_STATE_FORMAT" in record["ordering_state"], record
        op.start()
        _await_values(kafka_bootstrap, out.name, [f"v{i}" for i in range(5)] * 2)
        op.stop()
    finally:
        op.kill()
    print(f"refused with a coordinator in {refused_coordinator_s:.1f} s, "
          f"with a member in {refused_members_s:.1f} s")


@pytest.mark.slow
def test_reset_in_each_mode_then_the_run_delivers_from_the_boundary(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path
) -> None:
    src, out = create_topic(partitions=1), create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, 0, 5)
    op = _operator(kafka_bootstrap, tmp_path, APP, RS_SRC=src.name, RS_OUT=out.name)
    group = f"{op.prefix}-shipper"
    delivered: list[str] = []

    def cycle(reset_args: list[str], chosen: int, then: list[str]) -> dict[str, Any]:
        began = time.monotonic()
        res = op.reset(*reset_args, "--yes")
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
        took = time.monotonic() - began
        record = _record(res.stdout)
        [part] = record["partitions"]
        assert part["chosen"] == chosen, record
        assert _committed(kafka_admin, group, src.name) == (chosen, "parsley.bootstrap")
        assert describe_topic(kafka_admin, ordering_changelog(op.prefix, "shipper")) is None
        assert describe_topic(kafka_admin, f"{group}-inventory-changelog") is None
        assert not (op.state_dir / group).exists()
        op.start()
        delivered.extend(then)
        _await_values(kafka_bootstrap, out.name, delivered)
        err = op.stop()
        assert "committed initial positions for" not in err, "the start re-chose positions"
        print(f"reset {reset_args} in {took:.1f} s; delivered {then}")
        return record

    try:
        op.start()
        delivered += [f"v{i}" for i in range(5)]
        _await_values(kafka_bootstrap, out.name, delivered)
        op.stop()

        record = cycle(["--to-offset", "3"], 3, ["v3", "v4"])
        assert record["last_status"]["exit"] == "CLEAN", record  # the report run kept
        assert record["last_status"]["state"] == "STOPPED", record
        assert record["partitions"][0]["committed"] == 5
        assert record["partitions"][0]["covered"] == 4
        assert record["partitions"][0]["log_start"] == 0
        assert record["partitions"][0]["log_end"] == 5
        assert record["changelogs_deleted"] == [ordering_changelog(op.prefix, "shipper"),
                                                f"{group}-inventory-changelog"]

        # The first record at or after T0 + 1.5 s is v2.
        at = dt.datetime.fromtimestamp((T0_MS + 1500) / 1000, tz=dt.UTC)
        cycle(["--to-datetime", at.isoformat().replace("+00:00", "Z")], 2, ["v2", "v3", "v4"])

        # Latest: what is retained is skipped; what comes after is delivered.
        res = op.reset("--to-latest", "--yes")
        assert res.returncode == 0, res.stderr
        assert _record(res.stdout)["partitions"][0]["chosen"] == 5
        _produce(kafka_bootstrap, src.name, 5, 1)
        op.start()
        delivered.append("v5")
        _await_values(kafka_bootstrap, out.name, delivered)
        op.stop()

        cycle(["--to-earliest"], 0, [f"v{i}" for i in range(6)])

        # An offset beyond the log end is refused before anything changes.
        res = op.reset("--to-offset", "7", "--yes")
        assert res.returncode == 3, res.stderr
        assert "offset 7 (log start 0, end 6)" in res.stderr
        assert describe_topic(kafka_admin, ordering_changelog(op.prefix, "shipper")) is not None
    finally:
        op.kill()


PIPELINE = '''
import os
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

SRC = Channel(os.environ["RS_SRC"], BYTES, BYTES)
MID = Channel(os.environ["RS_MID"], BYTES, BYTES)
OUT = Channel(os.environ["RS_OUT"], BYTES, BYTES)


def relay(delivery, state):
    return Effects.builder().send(MID, delivery.key, b"m" + delivery.value).build()


def join(delivery, state):
    return Effects.builder().send(OUT, delivery.key, delivery.value).build()


processes = [Process("relay").receives(SRC, relay).sends(MID),
             Process("join").receives(SRC, join).receives(MID, join).sends(OUT)]
'''


@pytest.mark.slow
def test_positions_before_the_boundary_are_settled_causes(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    """``join`` receives ``src`` and ``mid``; every ``mid`` record names its ``src`` record
    as a cause. Reset ``join`` to src:0=5 (its end) and mid:0=0: the ``mid`` records, whose
    causes all lie before the boundary (src 0..4), must be delivered, not held for causes
    that are never fed again."""
    src, mid, out = (create_topic(partitions=1) for _ in range(3))
    _produce(kafka_bootstrap, src.name, 0, 5)
    op = _operator(kafka_bootstrap, tmp_path, PIPELINE, RS_SRC=src.name, RS_MID=mid.name,
                   RS_OUT=out.name)
    try:
        op.start()
        _await_values(kafka_bootstrap, mid.name, [f"mv{i}" for i in range(5)])
        first = sorted(_values(kafka_bootstrap, out.name))
        op.stop()
        assert first == sorted([f"v{i}" for i in range(5)] + [f"mv{i}" for i in range(5)])
        assert all(r.headers for r in read_committed(kafka_bootstrap, mid.name))

        res = op.reset("--process", "join", "--to-offset", f"{src.name}:0=5",
                       "--to-offset", f"{mid.name}:0=0", "--yes")
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
        chosen = {(p["topic"], p["partition"]): p["chosen"]
                  for p in _record(res.stdout)["partitions"]}
        assert chosen == {(src.name, 0): 5, (mid.name, 0): 0}
        op.start()
        expected = sorted(first + [f"mv{i}" for i in range(5)])
        deadline = time.monotonic() + 90
        while sorted(_values(kafka_bootstrap, out.name)) != expected:
            got = _values(kafka_bootstrap, out.name)
            assert len(got) <= len(expected), got
            assert time.monotonic() < deadline, f"delivered {got}, expected {expected}"
            time.sleep(0.5)
        status = orjson.loads(op.cli("status", "--json").stdout)["processes"]["join"]
        assert status["state"] == "RUNNING" and not status.get("refusal_reason"), status
        assert sum(h["count"] for t in status["tasks"] for h in t["held"]) == 0, status
        op.stop()
    finally:
        op.kill()


@pytest.mark.slow
def test_reset_to_one_partitions_offset_leaves_the_others_where_the_process_stands(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path
) -> None:
    """``--to-offset TOPIC:PARTITION=N`` alone: the partition named starts at N, the other
    resumes where the process stood, so it neither re-delivers nor skips (docs/runbooks.md,
    "Resetting a process")."""
    src, out = create_topic(partitions=2), create_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})

    def produce(partition: int, values: list[str]) -> None:
        for v in values:
            producer.produce(src.name, key=b"k", value=v.encode(), partition=partition)
        assert producer.flush(30) == 0

    def await_sorted(expected: list[str]) -> None:
        deadline = time.monotonic() + 90
        while sorted(got := _values(kafka_bootstrap, out.name)) != sorted(expected):
            assert len(got) <= len(expected), f"delivered {sorted(got)}, expected {expected}"
            assert time.monotonic() < deadline, f"delivered {sorted(got)}, expected {expected}"
            time.sleep(0.5)

    produce(0, ["v0", "v1", "v2", "v3"])
    produce(1, ["w0", "w1"])
    op = _operator(kafka_bootstrap, tmp_path, APP, RS_SRC=src.name, RS_OUT=out.name)
    delivered = ["v0", "v1", "v2", "v3", "w0", "w1"]
    try:
        op.start()
        await_sorted(delivered)
        op.stop()
        produce(1, ["w2"])
        res = op.reset("--to-offset", f"{src.name}:0=2", "--yes")
        assert res.returncode == 0, f"{res.stdout}\n{res.stderr}"
        assert "the others where the process stands" in res.stdout, res.stdout
        chosen = {p["partition"]: p["chosen"] for p in _record(res.stdout)["partitions"]}
        assert chosen == {0: 2, 1: 2}, chosen
        op.start()
        delivered += ["v2", "v3", "w2"]  # p0 again from 2; p1 on from where it stood
        await_sorted(delivered)
        time.sleep(1.0)
        assert sorted(_values(kafka_bootstrap, out.name)) == sorted(delivered)
        op.stop()
    finally:
        op.kill()
