"""A start waits out a transaction a dead worker left open over the group's positions.

A worker killed with its coordinator (``kill -9``) can leave a transaction open that
carries read positions: the broker answers ``UNSTABLE_OFFSET_COMMIT`` (KIP-447,
``require_stable``) until it aborts the transaction, ``transaction.timeout.ms`` (10 s for
every worker producer) plus up to one abort check (10 s by default) later. The start's
read of the committed positions must wait that out, not fail after a few seconds
(coordinator.bootstrap.common.STABLE_DEADLINE_S).
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.positions import committed_positions
from devtools.kafka_support import QUIET, CreateTopic
from workers.kafka_config import TRANSACTION_TIMEOUT_MS


@pytest.mark.slow
def test_positions_left_unstable_by_an_open_transaction_are_waited_for(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
) -> None:
    topic = create_topic(partitions=1)
    group = f"unstable-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, **QUIET})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET,
                         "transactional.id": f"{group}-dead-worker",
                         "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS})
    try:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.send_offsets_to_transaction([TopicPartition(topic.name, 0, 7)],
                                             consumer.consumer_group_metadata(), 30)
        began = time.monotonic()
        # The "dead worker" never commits nor aborts: only the broker ends it.
        got = committed_positions(kafka_admin, group, [TopicPartition(topic.name, 0)],
                                  time.sleep)
        waited = time.monotonic() - began
    finally:
        consumer.close()
    print(f"stable after {waited:.1f} s: {got}")
    # Aborted by the broker: no position was committed, and the read waited for that.
    assert got == {}
    assert waited >= TRANSACTION_TIMEOUT_MS / 1000 - 1
