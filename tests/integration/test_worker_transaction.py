"""TaskTransaction's account of the open transaction against the real broker.

An abort that fails with a retriable error (here: a timeout far shorter than the
round trip to the transaction coordinator) leaves the transaction open on the
broker; the object must still say so, so that the next abort retries it rather
than believing nothing is open.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Producer

from devtools.kafka_support import CreateTopic
from workers.kafka_config import producer_config
from workers.kafka_errors import ErrorKind, SubstrateError
from workers.transaction import TaskTransaction


def test_a_failed_abort_leaves_the_transaction_open_and_a_retry_aborts_it(
    kafka_bootstrap: str, create_topic: CreateTopic,
) -> None:
    topic = create_topic(f"txn-abort-{uuid.uuid4().hex[:8]}")
    producer = Producer(producer_config(kafka_bootstrap, f"t{uuid.uuid4().hex[:8]}", "p", 0,
                                        {"log_level": 0}, task_count=1))
    txn = TaskTransaction(producer, timeout_s=30.0)
    txn.init()
    # A 1 us bound is shorter than any round trip to the transaction coordinator, yet the
    # client has been seen to finish an abort before it looked at the clock (once, in a CI
    # run under load): try again with a fresh transaction until an abort fails.
    failed: SubstrateError | None = None
    for _ in range(20):
        txn.timeout_s = 30.0
        txn.begin()
        txn.send(topic.name, b"k", b"v", (), 0)
        assert producer.flush(30) == 0  # the partition is in the transaction on the broker
        txn.timeout_s = 0.000001
        try:
            txn.abort()
        except SubstrateError as exc:
            failed = exc
            break
        assert not txn.open, "an abort that succeeded must close the transaction"
    assert failed is not None and failed.kind is not ErrorKind.FATAL, failed
    assert txn.open, "a failed abort must leave the transaction counted as open"
    txn.timeout_s = 30.0
    # The first abort's client call may still run past its bound (workers/calls.py): a
    # second one meanwhile is refused _STATE "in state BeginAbort" or "in state
    # AbortingTransaction" (the client's two states of an abort under way); retry it.
    deadline = time.monotonic() + 30
    while True:
        try:
            txn.abort()
            break
        except SubstrateError as exc:
            under_way = "AbortingTransaction" in str(exc) or "BeginAbort" in str(exc)
            if not under_way or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    assert not txn.open
    txn.begin()  # the producer is usable again
    assert txn.open
    txn.abort()
