"""The test driver gives what a broker run gives (real broker).

The quickstart's two processes over three 2-partition topics, fed the same keyed
orders twice: through ``parsley.testing.ParsleyTestDriver`` and through
``Parsley.start`` on the broker. The ledger lines (with their partitions) read by an
independent ``read_committed`` consumer equal the driver's; then an order put on the
partition its key does not hash to makes both refuse, with the same reason and the
same detail, but for the topic ids (the driver's are its own; docs/testing.md).
"""

from __future__ import annotations

import re
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
from parsley import ParsleyFailClosedError, Reason
from parsley.testing import ParsleyTestDriver, partition_for

ORDERS = 6
TOPIC_ID = re.compile(r"\(topic id [A-Za-z0-9_-]+\)")


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s  # a liveness bound, not a speed assertion
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _without_ids(detail: str) -> str:
    return TOPIC_ID.sub("(topic id ...)", detail)


@pytest.mark.slow
def test_the_driver_gives_the_brokers_ledger_and_refusal(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    topics = f"td{uuid.uuid4().hex[:8]}"
    orders, ledger_topic = f"{topics}.orders", f"{topics}.ledger"
    for suffix in ("orders", "payments", "ledger"):
        create_topic(f"{topics}.{suffix}", partitions=2)
    processes = build(topics)
    driver = ParsleyTestDriver(processes, partitions={
        f"{topics}.{suffix}": 2 for suffix in ("orders", "payments", "ledger")})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    # customer-1's payment will land on payments partition `mine`; the good orders keep
    # off it, so that payment is the partition's first record (offset 0) in both runs,
    # however the broker run batches its transactions
    mine = partition_for(b"customer-1", 2)
    wrong = 1 - mine
    keys = [k for k in (f"customer-{i}" for i in range(2, 100))
            if partition_for(k.encode(), 2) == wrong][:ORDERS]
    for i, key in enumerate(keys):
        order = {"id": f"o{i}", "amount": i}
        producer.produce(orders, key=key, value=orjson.dumps(order))
        driver.pipe(orders, order, key=key)
    assert producer.flush(30) == 0

    config = ParsleyConfig(kafka_bootstrap, f"td-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=300)
    with Parsley.start(config, *processes) as parsley:
        _wait(lambda: len(read_committed(kafka_bootstrap, ledger_topic, (0, 1))) == ORDERS, 90,
              "a ledger line per order")
        on_broker = sorted((r.partition, r.value.decode())
                           for r in read_committed(kafka_bootstrap, ledger_topic, (0, 1)))
        assert on_broker == sorted((r.partition, r.value) for r in driver.read(ledger_topic))

        # customer-1 hashes to `mine`; its order is put on the other partition
        order = {"id": "bad", "amount": 1}
        producer.produce(orders, key="customer-1", value=orjson.dumps(order), partition=wrong)
        assert producer.flush(30) == 0
        with pytest.raises(ParsleyFailClosedError) as info:
            driver.pipe(orders, order, key="customer-1", partition=wrong)
        _wait(lambda: parsley.status()["ledger"].refusal_reason is not None, 90,
              "ledger's refusal")
        ledger = parsley.status()["ledger"]
        assert parsley.status()["checkout"].state is ProcessState.RUNNING
    assert info.value.reason is Reason.CROSS_PARTITION_CAUSE
    assert ledger.refusal_reason is info.value.reason
    assert ledger.failure_detail is not None
    assert _without_ids(ledger.failure_detail) == _without_ids(info.value.detail)
    assert sorted((r.partition, r.value.decode())
                  for r in read_committed(kafka_bootstrap, ledger_topic, (0, 1))) == on_broker
