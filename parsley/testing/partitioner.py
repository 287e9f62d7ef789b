"""Kafka's default key partitioning (murmur2), as the test driver places records.

A record with a key goes to partition ``(murmur2(key) & 0x7fffffff) % n``, as the
Java client's default partitioner and librdkafka's ``murmur2_random`` (what Parsley's
own producers use, README.md, "Write your own process") place it, so a test sees
the same partition a broker run would.

Source: Apache Kafka ``org.apache.kafka.common.utils.Utils.murmur2`` and
``BuiltInPartitioner.partitionForKey``; librdkafka ``rd_kafka_msg_partitioner_murmur2``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["murmur2", "partition_for"]

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
    """The partition a non-null ``key`` goes to among ``partitions``.

    Raises:
        ValueError: ``partitions`` below 1.
    """
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions
