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

from typing import Final

__all__ = ["key_for_partition", "murmur2", "partition_for"]

_SEED: Final = 0x9747B28C
_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 hash of ``data``, as Java's signed 32-bit ``int``.

    Args:
        data: the serialized key bytes.

    Returns:
        The hash, in ``-2**31 .. 2**31 - 1``.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: bytes, partitions: int) -> int:
    """The partition a non-null ``key`` goes to among ``partitions`` (``murmur2_random``).

    Raises:
        ValueError: ``partitions`` below 1.
    """
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


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
