"""A fenced worker tells its own timed-out transaction from a live successor.

Both end with the producer fenced (librdkafka reports ``_FENCED`` for either; the
broker aborts a transaction open past ``transaction.timeout.ms`` and bumps the
producer's epoch, KIP-98). The worker asks the consumer group whether another live
member holds its ``group.instance.id`` (docs/operations.md, "Fenced: a successor or a
timeout"):

* its own handler held the transaction past the timeout, no successor: a restart would
  cure it, so the worker recovers in place (docs/operations.md, "The task timeout") and
  relays every input exactly once;
* a successor with the same transactional id fenced it (a second worker of the task
  started meanwhile): FATAL, so that two owners never fence each other in a restart
  loop; the successor goes on, and every input is committed exactly once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES
from workers.kafka_config import TRANSACTION_TIMEOUT_MS
from workers.protocol import EXIT_CODES, StopKind

STALL_S = 2 * TRANSACTION_TIMEOUT_MS / 1000 + 5
"""Past the timeout plus the broker's scan for timed-out transactions
(``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 10 s by default)."""


def _stalling_relay(out_name: str, source: str, token: str) -> Process:
    """Relays; the delivery of ``stall`` sleeps past the transaction timeout while the
    file ``token`` exists (removed first: the successor's replay does not stall)."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if delivery.value == b"stall" and os.path.exists(token):
            os.remove(token)
            time.sleep(STALL_S)
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process("fence").receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _setup(kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
           unique_names: UniqueNames, tmp_path: Path) -> tuple[Any, Any, str, str]:
    src = create_topic(unique_names.topic("src"))
    out = create_topic(unique_names.topic("out"))
    token = str(tmp_path / "stall-token")
    Path(token).touch()
    process = _stalling_relay(out.name, src.name, token)
    topics = {src.name: src, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)
    collector = StatusCollector()
    spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                     str(tmp_path / "state"), topics, status_interval_ms=300)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for v in (b"one", b"stall", b"two"):
        producer.produce(src.name, key=b"k", value=v, partition=0)
    assert producer.flush(30) == 0
    return spec, collector, src.name, out.name


def _final(collector: Any, pid: int, timeout_s: float = 90) -> dict[str, Any]:
    return collector.wait_for(lambda m: m["kind"] == "final" and m["pid"] == pid,
                              timeout_s=timeout_s)


@pytest.mark.slow
def test_own_transaction_timeout_is_recovered_in_place(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    spec, collector, _src, out = _setup(kafka_bootstrap, kafka_admin, create_topic,
                                        unique_names, tmp_path)
    try:
        worker = spawn(spec)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                           and m.get("recoveries", 0) >= 1 and m["state"] == "RUNNING"
                           and m["lag"] == 0, timeout_s=90, fail_on_stop=True)
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
    finally:
        collector.close()
    values = sorted(r.value for r in read_committed(kafka_bootstrap, out))
    assert values == [b"relayed:one", b"relayed:stall", b"relayed:two"], "exactly once"


@pytest.mark.slow
def test_a_fence_by_a_live_successor_is_fatal(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    spec, collector, _src, out = _setup(kafka_bootstrap, kafka_admin, create_topic,
                                        unique_names, tmp_path)
    successor = None
    try:
        first = spawn(spec)
        # Wait until the first worker is inside the stalling delivery, its transaction
        # open (its loop sends no status meanwhile).
        deadline = time.monotonic() + 90
        while os.path.exists(str(tmp_path / "stall-token")):
            assert time.monotonic() < deadline, "the stalling record was never delivered"
            time.sleep(0.1)
        successor = spawn(spec)  # the same task: same transactional id and instance id
        final = _final(collector, first.pid)
        first.join(15)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == successor.pid
                           and m["state"] == "RUNNING" and m["lag"] == 0, timeout_s=60)
        time.sleep(1.0)
        assert successor.is_alive()
        assert stop_worker(successor) == EXIT_CODES[StopKind.CLEAN]
    finally:
        if successor is not None and successor.is_alive():
            successor.kill()
        collector.close()
    print(f"first worker: {final['stop_kind']}: {final['failure_detail']}")
    assert final["stop_kind"] == StopKind.FATAL.value, final
    assert first.exitcode == EXIT_CODES[StopKind.FATAL]
    values = sorted(r.value for r in read_committed(kafka_bootstrap, out))
    assert values == [b"relayed:one", b"relayed:stall", b"relayed:two"], "exactly once"
