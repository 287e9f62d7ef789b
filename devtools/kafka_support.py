"""Small helpers for tests that talk to the real broker (see ``tests/conftest.py``).

Topic creation here waits until the broker serves the topic with a leader on every
partition, so a test never races the metadata of a topic it just created.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition, Uuid
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

QUIET = {"log_level": 0}
"""librdkafka settings that keep transient connection chatter off the test output."""


def topic_uuid(raw: Uuid) -> uuid.UUID:
    """Convert confluent-kafka's ``Uuid`` (two signed 64-bit halves) to a ``uuid.UUID``."""
    msb = raw.get_most_significant_bits() & (2**64 - 1)
    lsb = raw.get_least_significant_bits() & (2**64 - 1)
    return uuid.UUID(int=(msb << 64) | lsb)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A described topic: its name, Kafka topic id and partition count."""

    name: str
    topic_id: uuid.UUID
    partitions: int


def describe_topic(admin: AdminClient, name: str, timeout_s: float = 10.0) -> TopicInfo:
    """Describe one topic by name.

    Raises:
        KafkaException: as confluent-kafka raises it (UNKNOWN_TOPIC_OR_PART when absent).
    """
    futures = admin.describe_topics(TopicCollection([name]), request_timeout=timeout_s)
    desc = futures[name].result(timeout=timeout_s + 5)
    return TopicInfo(name, topic_uuid(desc.topic_id), len(desc.partitions))


def wait_topic(
    admin: AdminClient, name: str, partitions: int, timeout_s: float = 30.0
) -> TopicInfo:
    """Wait until ``name`` has ``partitions`` partitions, each led and served by its leader.

    "Served" means ``list_offsets`` answers for every partition: right after creation a
    broker under load can name a leader in its metadata and still answer
    NOT_LEADER_FOR_PARTITION (6) to ListOffsets until the partition is created locally.

    Raises:
        TimeoutError: not served within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            futures = admin.describe_topics(TopicCollection([name]), request_timeout=5)
            desc = futures[name].result(timeout=10)
            if len(desc.partitions) == partitions and all(
                p.leader is not None for p in desc.partitions
            ):
                request = {TopicPartition(name, i): OffsetSpec.latest() for i in range(partitions)}
                for future in admin.list_offsets(request, request_timeout=5).values():
                    future.result(timeout=10)
                return TopicInfo(name, topic_uuid(desc.topic_id), partitions)
            last = f"{len(desc.partitions)} partitions"
        except KafkaException as exc:
            last = exc
        time.sleep(0.1)
    raise TimeoutError(f"topic {name!r} not ready in {timeout_s} s: {last}")


def wait_end_offset(
    admin: AdminClient, tp: TopicPartition, end: int, timeout_s: float = 30.0
) -> int:
    """Wait until ``list_offsets`` latest of ``tp`` reaches ``end``; return what it saw.

    Needed after ``commit_transaction``/``abort_transaction``: they return once the
    coordinator has decided, and the control markers are written to the partitions
    afterwards, so the end offset (and the last stable offset) moves a moment later.
    Returns the last value seen, which differs from ``end`` only on timeout.
    """
    deadline = time.monotonic() + timeout_s
    seen = -1
    while True:
        future = admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=5)[tp]
        seen = future.result(timeout=10).offset
        if seen >= end or time.monotonic() > deadline:
            return seen
        time.sleep(0.05)


def create_topic(
    admin: AdminClient,
    name: str,
    *,
    partitions: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    replication_factor: int = 1,
) -> TopicInfo:
    """Create a topic with topic configs and wait until it is served.

    Args:
        admin: an AdminClient on the test broker.
        name: topic name.
        partitions: partition count.
        config: topic configs, e.g. ``{"max.message.bytes": "1024"}``.
        timeout_s: deadline for creation and readiness, seconds.
        replication_factor: 1 by default (the session's single broker); -1 for the
            broker's default (3 on the dev cluster).

    Raises:
        KafkaException: the broker refused the creation (e.g. TOPIC_ALREADY_EXISTS).
        TimeoutError: the topic was not served in time.
    """
    new = NewTopic(name, num_partitions=partitions, replication_factor=replication_factor,
                   config=dict(config or {}))
    futures = admin.create_topics([new], request_timeout=timeout_s)
    futures[name].result(timeout=timeout_s + 5)
    return wait_topic(admin, name, partitions, timeout_s)


def delete_topic(admin: AdminClient, name: str, timeout_s: float = 30.0) -> None:
    """Delete a topic and wait until describing it answers UNKNOWN_TOPIC_OR_PART.

    Raises:
        TimeoutError: still described after ``timeout_s`` seconds.
    """
    futures = admin.delete_topics([name], request_timeout=timeout_s)
    futures[name].result(timeout=timeout_s + 5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            describe_topic(admin, name, 5)
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                return
        time.sleep(0.1)
    raise TimeoutError(f"topic {name!r} still described {timeout_s} s after deletion")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def unique_name(kind: str, test_name: str) -> str:
    """``<kind>-<test name slug>-<8 hex>``: legal as a topic, group or transactional id.

    At most 200 characters (topic names allow 249).
    """
    slug = _UNSAFE.sub("-", test_name).strip("-")[:150]
    return f"{kind}-{slug}-{uuid.uuid4().hex[:8]}"


class UniqueNames:
    """Names unique to one test run: ``<kind>-<test name>-<8 hex>`` (fixture ``unique_names``).

    Each call returns a new name, so a test may take several of each kind.
    """

    def __init__(self, test_name: str) -> None:
        self._test = test_name

    def topic(self, label: str = "topic") -> str:
        """A topic name."""
        return unique_name(label, self._test)

    def group(self, label: str = "group") -> str:
        """A consumer group id."""
        return unique_name(label, self._test)

    def transactional_id(self, label: str = "txn") -> str:
        """A producer ``transactional.id``."""
        return unique_name(label, self._test)


CreateTopic = Callable[..., TopicInfo]
"""Type of the ``create_topic`` fixture: ``(name=None, *, partitions=1, config=None,
timeout_s=30.0) -> TopicInfo``."""
