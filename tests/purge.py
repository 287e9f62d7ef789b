"""Purge a compacted topic's partition the way an operator does: policy first, then records.

Kafka refuses DeleteRecords on a compact-only topic with ``POLICY_VIOLATION``, so the
purge first sets ``cleanup.policy`` away from ``compact``. The broker applies that change
when its metadata record reaches the partition leader, a moment after AlterConfigs
answers, so a DeleteRecords sent at once can still meet the old policy: it is retried on
``POLICY_VIOLATION`` until ``timeout_s``.
"""

from __future__ import annotations

import time

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)


def purge_to(admin: AdminClient, topic: str, partition: int, offset: int, *,
             policy: str = "compact,delete", timeout_s: float = 30.0) -> None:
    """Set ``topic``'s ``cleanup.policy`` to ``policy``, then delete records below ``offset``.

    Raises the broker's ``KafkaException`` for any error but a ``POLICY_VIOLATION`` seen
    before ``timeout_s`` (seconds) has passed.
    """
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(timeout=35)
    tp = TopicPartition(topic, partition, offset)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            admin.delete_records([tp], request_timeout=30)[tp].result(timeout=35)
            return
        except KafkaException as e:
            if e.args[0].code() != KafkaError.POLICY_VIOLATION or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
