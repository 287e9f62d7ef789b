"""Admin queries of a worker (and of the coordinator's bootstrap), each bounded by our own timeout.

An AdminClient call returns futures; each function here asks the broker with a
``request_timeout`` and then waits for the answer at most a bound of its own, so a
wedged client cannot hold the caller (the worker's watchdog bounds the whole call too:
:mod:`workers.watchdog`). Failures come back as the client raised them
(``KafkaException``, ``TimeoutError``) or as the small exceptions below, and each caller
maps them to its own errors: the worker to :class:`workers.kafka_errors.SubstrateError`,
the bootstrap to its start errors.

Group members come back as :class:`workers.positions.GroupMember`, whose describers name a
member (id, client id, host, instance id) in every refusal and warning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from workers.kafka_errors import group_coordinator_busy, unstable_offsets
from workers.positions import GroupMember

__all__ = [
    "ADMIN_CALL_BOUND_S",
    "OffsetsStayedUnstable",
    "PartitionOffsetError",
    "group_members",
    "partition_count",
    "stable_committed_offsets",
]

ADMIN_CALL_BOUND_S: Final = 10.0
"""Our own bound on a worker's punctuation or rebuild admin call (its future), s."""


def group_members(admin: AdminClient, group: str, *, request_timeout_s: float,
                  answer_s: float) -> list[GroupMember]:
    """The members of ``group`` now (``describe_consumer_groups``).

    Args:
        admin: an AdminClient.
        group: the consumer group.
        request_timeout_s: the request's ``request_timeout``, s.
        answer_s: how long to wait for the answer, s (our own bound).

    Raises:
        KafkaException: the describe failed (``GROUP_ID_NOT_FOUND``, a coordinator
            loading, ACLs, connectivity); the caller decides.
        TimeoutError: no answer within ``answer_s``.
    """
    future = admin.describe_consumer_groups([group], request_timeout=request_timeout_s)[group]
    desc = future.result(timeout=answer_s)
    return [GroupMember(str(m.member_id), str(m.client_id), str(m.host),
                        getattr(m, "group_instance_id", None) or None)
            for m in (desc.members or [])]


def partition_count(admin: AdminClient, topic: str, *, timeout_s: float = 5.0) -> int | None:
    """How many partitions ``topic`` has, from the admin client's metadata (one topic per
    request: a cluster-wide listing costs ~0.2 s on a busy broker); ``None`` when the
    topic is not listed or listed with an error.

    Raises:
        KafkaException: the metadata request failed (an unreachable cluster).
    """
    meta = admin.list_topics(topic=topic, timeout=timeout_s).topics.get(topic)
    if meta is None or meta.error is not None:
        return None
    return len(meta.partitions)


class PartitionOffsetError(Exception):
    """A partition's committed offset came back with an error other than "unstable".

    Attributes:
        partition: the ``TopicPartition`` as answered (its ``error`` set).
    """

    def __init__(self, partition: TopicPartition) -> None:
        super().__init__(f"{partition.topic}[{partition.partition}]: {partition.error}")
        self.partition = partition


class OffsetsStayedUnstable(Exception):
    """The group's committed offsets stayed unstable (a transaction carrying offsets for the
    group is still open) past the caller's deadline."""


def stable_committed_offsets(
    admin: AdminClient,
    group: str,
    tps: Sequence[TopicPartition],
    *,
    deadline_s: float,
    retry_s: float,
    request_timeout_s: float,
    answer_s: float,
    retry_coordinator_not_available: bool,
    sleep: Callable[[float], None] = time.sleep,
    on_unstable: Callable[[], None] | None = None,
) -> dict[tuple[str, int], tuple[int, str]]:
    """The group's stable committed offsets of ``tps``: ``{(topic, partition): (offset,
    metadata)}``, committed ones only (``require_stable``: KIP-447).

    Asked again every ``retry_s`` while the answer is unstable or the group coordinator is
    not ready (``UNSTABLE_OFFSET_COMMIT``, ``COORDINATOR_LOAD_IN_PROGRESS``,
    ``NOT_COORDINATOR``), until ``deadline_s`` from the first ask.

    Args:
        retry_coordinator_not_available: also ask again on ``COORDINATOR_NOT_AVAILABLE``.
            The bootstrap does (a start may meet a cluster still electing a group
            coordinator); a worker's rebuild does not: it fails, and
            ``Worker.build_state`` retries the whole restore with a fresh admin client.
        on_unstable: called once, at the first unstable answer (the bootstrap logs).

    Raises:
        KafkaException: the listing failed otherwise.
        TimeoutError: no answer within ``answer_s``.
        PartitionOffsetError: a partition answered an error other than unstable.
        OffsetsStayedUnstable: still unstable (or the coordinator not ready) at the deadline.
    """
    deadline = time.monotonic() + deadline_s
    said = False
    while True:
        try:
            request = [ConsumerGroupTopicPartitions(
                group, [TopicPartition(t.topic, t.partition) for t in tps])]
            future = admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=request_timeout_s)[group]
            result = future.result(timeout=answer_s)
        except KafkaException as exc:
            if not (unstable_offsets(exc) or group_coordinator_busy(
                    exc, not_available=retry_coordinator_not_available)):
                raise
        else:
            out: dict[tuple[str, int], tuple[int, str]] = {}
            unstable = False
            for tp in result.topic_partitions:
                if tp.error is not None:
                    if not unstable_offsets(tp.error):
                        raise PartitionOffsetError(tp)
                    unstable = True
                    continue
                if tp.offset >= 0:
                    out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
            if not unstable:
                return out
            if not said and on_unstable is not None:
                on_unstable()
            said = True
        if time.monotonic() > deadline:
            raise OffsetsStayedUnstable(group)
        sleep(retry_s)
