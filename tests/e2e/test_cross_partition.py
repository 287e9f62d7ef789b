"""Cross-partition causes when the received topics' partition counts differ (real broker).

The quickstart's two processes over ``orders`` with 2 partitions and ``payments``
with 1: every payment lands on ``payments`` partition 0, which task 0 of ``ledger``
reads, and a payment whose order went to ``orders`` partition 1 names a cause task 0
can never enforce. docs/failing-closed.md, "Cross-partition causes": carried
unenforced, warned and counted in the task's status (``cross_partition_causes``); with
``cross_partition_causes = "refuse"`` it is the refusal ``CROSS_PARTITION_CAUSE``.
With equal partition counts ``auto`` refuses, and ``warn`` (for a deliberate fan-in
upstream) carries, warns and counts instead. The expected counts are read
independently, by a read_committed consumer.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from examples.quickstart import build
from parsley import Reason

ORDERS = 12


def _world(kafka_bootstrap: str, create_topic: Any) -> tuple[str, int]:
    """The three topics (orders 2 partitions, payments and ledger 1) and the keyed
    orders; returns the topic prefix and how many orders landed on partition 1."""
    topics = f"xp{uuid.uuid4().hex[:8]}"
    create_topic(f"{topics}.orders", partitions=2)
    create_topic(f"{topics}.payments", partitions=1)
    create_topic(f"{topics}.ledger", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    for i in range(ORDERS):
        producer.produce(f"{topics}.orders", key=f"customer-{i}",
                         value=orjson.dumps({"id": f"o{i}", "amount": i}))
    assert producer.flush(30) == 0
    on_one = len(read_committed(kafka_bootstrap, f"{topics}.orders", (1,)))
    assert 0 < on_one < ORDERS, "the keys must spread over both partitions"
    return topics, on_one


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s  # a liveness bound, not a speed assertion
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_unequal_partition_counts_carry_warn_and_count_cross_partition_causes(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    topics, on_one = _world(kafka_bootstrap, create_topic)
    config = ParsleyConfig(kafka_bootstrap, f"xp-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=300)
    with Parsley.start(config, *build(topics)) as parsley:
        _wait(lambda: len(read_committed(kafka_bootstrap, f"{topics}.ledger")) == ORDERS, 90,
              "a ledger line per order")

        def counted() -> int:
            tasks = parsley.status()["ledger"].tasks
            return sum(t.cross_partition_causes for t in tasks)

        _wait(lambda: counted() == on_one, 30, f"{on_one} cross-partition causes in status")
        ledger = parsley.status()["ledger"]
        assert ledger.state is ProcessState.RUNNING and ledger.refusal_reason is None
        by_task = {t.task: t.cross_partition_causes for t in ledger.tasks}
        assert by_task == {0: on_one, 1: 0}, by_task
    lines = [r.value for r in read_committed(kafka_bootstrap, f"{topics}.ledger")]
    assert len(lines) == len(set(lines)) == ORDERS, lines


@pytest.mark.slow
def test_the_setting_makes_them_a_refusal(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    topics, _on_one = _world(kafka_bootstrap, create_topic)
    config = ParsleyConfig(kafka_bootstrap, f"xp-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=300,
                           cross_partition_causes="refuse")
    with Parsley.start(config, *build(topics)) as parsley:
        _wait(lambda: parsley.status()["ledger"].refusal_reason is not None, 90,
              "ledger's refusal")
        ledger = parsley.status()["ledger"]
        assert ledger.refusal_reason is Reason.CROSS_PARTITION_CAUSE, ledger
        assert f"topic '{topics}.payments' partition 0 offset " in (ledger.failure_detail or "")
        assert f"names a cause at topic '{topics}.orders' partition 1 offset " in (
            ledger.failure_detail or "")
        assert parsley.status()["checkout"].state is ProcessState.RUNNING
    lines = [r.value.decode() for r in read_committed(kafka_bootstrap, f"{topics}.ledger")]
    assert not [x for x in lines if x.startswith("VIOLATION")], lines


@pytest.mark.slow
def test_warn_on_equal_partition_counts_keeps_running_and_counts(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    """orders and payments both with 2 partitions (``auto`` refuses); each order is
    written to partition ``i % 2`` by hand, as a stage that fans partitions in and
    re-emits keyed would, so a payment (keyed, murmur2) lands on the other partition
    index about half the time. Restarted with ``warn`` (docs/runbooks.md,
    CROSS_PARTITION_CAUSE, "If an upstream stage fans in"), ledger runs on."""
    topics = f"xq{uuid.uuid4().hex[:8]}"
    create_topic(f"{topics}.orders", partitions=2)
    create_topic(f"{topics}.payments", partitions=2)
    create_topic(f"{topics}.ledger", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(ORDERS):
        producer.produce(f"{topics}.orders", key=f"customer-{i}", partition=i % 2,
                         value=orjson.dumps({"id": f"o{i}", "amount": i}))
    assert producer.flush(30) == 0
    config = ParsleyConfig(kafka_bootstrap, f"xq-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=300)
    with Parsley.start(config, *build(topics)) as parsley:  # auto: refused
        _wait(lambda: parsley.status()["ledger"].refusal_reason is not None, 90,
              "ledger's refusal under auto")
        assert parsley.status()["ledger"].refusal_reason is Reason.CROSS_PARTITION_CAUSE
    # The runbook's remedy for a deliberate fan-in: restart with warn, no reset.
    config = config.with_overrides(cross_partition_causes="warn")
    with Parsley.start(config, *build(topics)) as parsley:
        _wait(lambda: len(read_committed(kafka_bootstrap, f"{topics}.ledger")) == ORDERS, 90,
              "a ledger line per order")
        payments = read_committed(kafka_bootstrap, f"{topics}.payments", (0, 1))
        assert len(payments) == ORDERS, payments
        expected = {0: 0, 1: 0}
        for r in payments:
            order = int(orjson.loads(r.value)["order"][1:])
            if r.partition != order % 2:
                expected[r.partition] += 1
        crossed = sum(expected.values())
        assert 0 < crossed < ORDERS, "the payments must cross partitions for some orders"

        def by_task() -> dict[int, int]:
            return {t.task: t.cross_partition_causes
                    for t in parsley.status()["ledger"].tasks}

        _wait(lambda: by_task() == expected, 30, f"{expected} cross-partition causes")
        ledger = parsley.status()["ledger"]
        assert ledger.state is ProcessState.RUNNING and ledger.refusal_reason is None
    lines = [r.value.decode() for r in read_committed(kafka_bootstrap, f"{topics}.ledger")]
    assert len(lines) == len(set(lines)) == ORDERS, lines
    # Causes on the task's own partitions are still enforced; the crossed ones are
    # carried unenforced, and ledger's per-task store never holds their orders.
    assert len([x for x in lines if x.startswith("paid ")]) == ORDERS - crossed, lines
