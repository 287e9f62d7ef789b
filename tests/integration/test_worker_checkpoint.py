"""The checkpoint of a clean stop (``workers.checkpoint``) on a real broker.

A task receiving A (one record, written last) and B (records each naming A@0 as a cause)
holds every B record, counting deliveries per source in a store. After a clean stop the
next start trusts its local stores and reads no changelog record, its held messages intact;
after a SIGKILL, or when anything recorded no longer holds (the changelog written after the
stop, the changelog recreated, the local store file touched), it restores from the
changelogs in full, as before checkpoints. Each test ends by releasing the held messages
and checking the output: every record exactly once, each B after its cause, the count
exactly once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    counting_relay,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley import Channel, Process, Store
from parsley.declarations import application_id, ordering_changelog
from parsley.engine.channel import ChannelId
from parsley.serdes import BYTES, JSON, STRING
from parsley.wire import CAUSES_HEADER, encode_causes
from workers.checkpoint import CHECKPOINT_FILE
from workers.protocol import EXIT_CODES, StopKind

HELD = 300


@dataclass
class Setup:
    """The relay, its topics, spec and status collector."""

    a: Any
    b: Any
    out: Any
    prefix: str
    process: Process
    spec: Any
    collector: StatusCollector
    state: Path
    producer: Producer

    def running(self, worker: Any, timeout_s: float = 60.0) -> dict[str, Any]:
        """The worker's first RUNNING status with everything read (lag 0)."""
        msg: dict[str, Any] = self.collector.wait_for(
            lambda m: m["kind"] == "status" and m["pid"] == worker.pid
            and m["state"] == "RUNNING" and m["lag"] == 0, timeout_s=timeout_s)
        return msg

    def holding(self, worker: Any) -> dict[str, Any]:
        """Wait until the worker holds every B record."""
        msg: dict[str, Any] = self.collector.wait_for(
            lambda m: m["kind"] == "status" and m["pid"] == worker.pid
            and m["state"] == "RUNNING" and m["held_total"] == HELD, timeout_s=60)
        return msg

    def restart(self) -> tuple[Any, dict[str, Any]]:
        """Spawn a worker; returns it and its status once it runs holding every B record."""
        worker = spawn(self.spec)
        status = self.holding(worker)
        return worker, status

    @property
    def checkpoint(self) -> Path:
        app = application_id(self.prefix, self.process.name)
        return self.state / app / "0" / CHECKPOINT_FILE

    def release_and_check(self, worker: Any) -> None:
        """Write A@0, wait until nothing is held, stop cleanly, check the output."""
        self.producer.produce(self.a.name, key=b"a", value=b"0", partition=0)
        assert self.producer.flush(30) == 0
        self.collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                                and m["held_total"] == 0 and m["lag"] == 0, timeout_s=60)
        time.sleep(0.5)
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
        seen = [orjson.loads(r.value) for r in read_committed(self.producer_bootstrap,
                                                              self.out.name)]
        keys = [(s["src"], s["off"]) for s in seen]
        assert len(keys) == len(set(keys)), "duplicate output"
        assert set(keys) == {(self.a.name, 0)} | {(self.b.name, j) for j in range(HELD)}
        assert keys[0] == (self.a.name, 0), "every B after its cause A@0"
        bs = [s for s in seen if s["src"] == self.b.name]
        assert [s["off"] for s in bs] == list(range(HELD))
        assert [s["n"] for s in bs] == list(range(1, HELD + 1)), "store not exactly-once"

    producer_bootstrap: str = ""


@pytest.fixture
def setup(kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
          unique_names: UniqueNames, tmp_path: Path) -> Iterator[Setup]:
    a = create_topic(unique_names.topic("a"))
    b = create_topic(unique_names.topic("b"))
    out = create_topic(unique_names.topic("out"))
    counts = Store("counts", STRING, JSON)
    out_ch = Channel(out.name, STRING, JSON)
    handler = counting_relay(out_ch, counts)
    process = (Process("ckpt").receives(Channel(a.name, BYTES, BYTES), handler)
               .receives(Channel(b.name, BYTES, BYTES), handler).sends(out_ch).stores(counts))
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, **QUIET})
    cause = encode_causes({ChannelId(a.topic_id, 0): 0})
    for j in range(HELD):
        producer.produce(b.name, key=b"b", value=b"%d" % j, partition=0,
                         headers=[(CAUSES_HEADER, cause)])
    assert producer.flush(30) == 0
    collector = StatusCollector()
    state = tmp_path / "state"
    spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(state), topics,
                     commit_interval_ms=100, status_interval_ms=200)
    s = Setup(a, b, out, prefix, process, spec, collector, state, producer)
    s.producer_bootstrap = kafka_bootstrap
    try:
        yield s
    finally:
        collector.close()


def _cleanly_stopped(s: Setup) -> dict[str, Any]:
    """A first worker holds every B record and stops cleanly: the checkpoint is written."""
    worker, status = s.restart()
    assert status["restore"]["checkpoint"] is False
    assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
    assert s.checkpoint.exists(), "a clean stop writes the checkpoint"
    doc: dict[str, Any] = json.loads(s.checkpoint.read_bytes())
    return doc


@pytest.mark.slow
def test_a_clean_restart_over_held_messages_trusts_the_checkpoint_and_reads_nothing(
        setup: Setup) -> None:
    doc = _cleanly_stopped(setup)
    ordering = ordering_changelog(setup.prefix, setup.process.name)
    assert {c["topic"] for c in doc["changelogs"]} >= {ordering}
    worker, status = setup.restart()
    assert status["restore"] == {"records": 0, "position": 0, "end": 0, "done": True,
                                 "checkpoint": True}
    assert status["held_total"] == HELD
    assert not setup.checkpoint.exists(), "a start takes the checkpoint: good for one start"
    setup.release_and_check(worker)


@pytest.mark.slow
def test_a_restart_after_sigkill_restores_from_the_changelogs(setup: Setup) -> None:
    _cleanly_stopped(setup)
    worker, status = setup.restart()  # takes the checkpoint...
    assert status["restore"]["checkpoint"] is True
    worker.kill()  # ...then dies: nothing says its stores equal the changelogs any more
    worker.join(10)
    assert worker.exitcode == -signal.SIGKILL
    assert not setup.checkpoint.exists()
    worker, status = setup.restart()
    assert status["restore"]["checkpoint"] is False
    assert status["restore"]["records"] > HELD, "the full restore read the changelogs"
    setup.release_and_check(worker)


def _write_changelog_after_the_stop(s: Setup) -> None:
    # One more record on the ordering changelog: a copy of its format row, so the state
    # means the same, but the end offset differs from the one recorded.
    topic = ordering_changelog(s.prefix, s.process.name)
    s.producer.produce(topic, key=b"v", value=b"\x01", partition=0)
    assert s.producer.flush(30) == 0


def _touch_local_store(s: Setup) -> None:
    path = s.checkpoint.parent / "ordering.sqlite"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


def _edit_checkpoint_end(s: Setup) -> None:
    doc = json.loads(s.checkpoint.read_bytes())
    for c in doc["changelogs"]:
        c["end"] -= 1
    s.checkpoint.write_text(json.dumps(doc))


MISMATCHES: dict[str, Callable[[Setup], None]] = {
    "the changelog written after the stop": _write_changelog_after_the_stop,
    "the local store file written after the stop": _touch_local_store,
    "an end offset that differs": _edit_checkpoint_end,
}


@pytest.mark.slow
@pytest.mark.parametrize("mismatch", sorted(MISMATCHES))
def test_a_mismatched_checkpoint_is_never_trusted(setup: Setup, mismatch: str) -> None:
    _cleanly_stopped(setup)
    MISMATCHES[mismatch](setup)
    worker, status = setup.restart()
    assert status["restore"]["checkpoint"] is False, mismatch
    assert status["restore"]["records"] > HELD
    setup.release_and_check(worker)


@pytest.mark.slow
def test_a_recreated_changelog_is_never_trusted(setup: Setup, kafka_admin: AdminClient,
                                                create_topic: CreateTopic) -> None:
    # The ordering changelog deleted and made again, empty, under the same name: its id
    # differs, the full restore reads nothing while the group has positions, and the task
    # refuses ORDERING_STATE_LOST (a trusted checkpoint would have run on stale state).
    _cleanly_stopped(setup)
    topic = ordering_changelog(setup.prefix, setup.process.name)
    for f in kafka_admin.delete_topics([topic], operation_timeout=30).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while topic in kafka_admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the changelog was not deleted"
        time.sleep(0.2)
    create_topic(topic, config={"cleanup.policy": "compact"})
    worker = spawn(setup.spec)
    worker.join(60)
    finals = [m for m in setup.collector.snapshot() if m["kind"] == "final"
              and m["pid"] == worker.pid]
    assert finals and finals[0]["refusal_reason"] == "ORDERING_STATE_LOST", finals
    assert worker.exitcode == EXIT_CODES[StopKind.REFUSAL] or worker.exitcode != 0
