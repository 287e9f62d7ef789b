"""Kafka's default key partitioning (murmur2), for keys that must land on a chosen partition.

Producers in this pipeline use librdkafka's ``murmur2_random`` partitioner,
which is Java's default: partition = ``(murmur2(key) & 0x7fffffff) % n``
for a non-null key. The ingester's end-of-input markers and the ``digest``
steps that answer them need keys that land on a given partition, so that a
Parsley process (which sends by key only) writes each task's marker answer
on its own partition index.

Source: Apache Kafka ``org.apache.kafka.common.utils.Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey``; librdkafka ``rd_kafka_msg_partitioner_murmur2``.
"""

from __future__ import annotations

from parsley.testing.partitioner import murmur2, partition_for

__all__ = ["key_for_partition", "murmur2", "partition_for"]


def key_for_partition(stem: str, partition: int, partitions: int) -> str:
    """The first key ``<stem>-<j>`` (j = 0, 1, ...) whose UTF-8 bytes land on ``partition``.

    Args:
        stem: the key's readable part, e.g. ``"end-of-input"``.
        partition: the wanted partition, ``0 .. partitions - 1``.
        partitions: the topic's partition count.

    Raises:
        ValueError: ``partition`` is out of range.
    """
    if not 0 <= partition < partitions:
        raise ValueError(f"partition {partition} is outside 0..{partitions - 1}")
    j = 0
    while True:
        key = f"{stem}-{j}"
        if partition_for(key.encode(), partitions) == partition:
            return key
        j += 1
