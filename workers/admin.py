"""Admin queries of a worker (and of the coordinator's bootstrap), each bounded by our own timeout.

An AdminClient call returns futures; each function here asks the broker with a
``request_timeout`` and then waits for the answer at most a bound of its own, so a
wedged client cannot hold the caller. The worker bounds each whole query too, with
:func:`workers.calls.awaiting`: past that bound a wait raises
:class:`workers.calls.CallStalled` and the worker recovers in place (docs/operations.md,
"Bounded client calls"). Failures come back as the client raised them
(``KafkaException``, ``TimeoutError``) or as the small exceptions below, and each caller
maps them to its own errors: the worker to :class:`workers.kafka_errors.SubstrateError`,
the bootstrap to its start errors.

Group members come back as :class:`workers.positions.GroupMember`, whose describers name a
member (id, client id, host, instance id) in every refusal and warning. The changelog
describes and offset listings raise :class:`workers.kafka_errors.SubstrateError` themselves.
"""

from __future__ import annotations

import concurrent.futures
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    OffsetSpec,
    ResourceType,
)

from workers.authorization import Grant
from workers.calls import CallStalled, await_future, call, pause
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    group_coordinator_busy,
    map_kafka_errors,
    to_exception,
    unknown_topic,
    unstable_offsets,
)
from workers.positions import GroupMember

__all__ = [
    "ADMIN_CALL_BOUND_S",
    "ADMIN_TIMEOUT_S",
    "COORDINATOR_REQUEST_TIMEOUT_S",
    "LIST_TOPICS_MARGIN_S",
    "GroupView",
    "OffsetsStayedUnstable",
    "PartitionOffsetError",
    "TopicInfo",
    "answer",
    "cluster_answers",
    "describe_topic",
    "group_members",
    "group_view",
    "kafka_uuid",
    "lacking_topic",
    "leaders_known",
    "list_topics",
    "log_starts",
    "offset_bounds",
    "partition_count",
    "stable_committed_offsets",
    "topic_ids",
]

ADMIN_CALL_BOUND_S: Final = 10.0
"""Our own bound on a worker's punctuation or rebuild admin call (its future), s."""
ADMIN_TIMEOUT_S: Final = 30.0
"""Bound on each changelog admin call (docs/operations.md, "Running": each admin request 30 s)."""
LIST_TOPICS_MARGIN_S: Final = 5.0
"""The watchdog bound of a ``list_topics`` is its timeout plus this, s (docs/operations.md,
"Bounded client calls")."""
COORDINATOR_REQUEST_TIMEOUT_S: Final = 3600.0
"""The ``request_timeout`` a worker gives a request routed to a group coordinator
(``describe_consumer_groups``), s: librdkafka's longest, so that the request never times
out inside librdkafka while its client lives; the caller bounds its own wait instead
(``answer_s``). librdkafka 2.16 uses freed memory when such a request timed out before the
coordinator was reached and the client reaches it later: the process aborts
(docs/operations.md, "A librdkafka abort during broker outages"). A request left waiting
is answered once the coordinator is reached, or failed when its client is dropped."""


@dataclass(frozen=True, slots=True)
class GroupView:
    """A consumer group as one ``describe_consumer_groups`` answer gives it.

    Attributes:
        stable: whether the group's state was ``Stable``: no rebalance under way, so every
            member listed has joined and synced, and one that stops heart-beating is
            removed within its session timeout. During a rebalance a member that has sent
            ``JoinGroup`` (or awaits ``SyncGroup``) counts as heart-beating until the
            rebalance ends, up to its rebalance timeout (``max.poll.interval.ms``), even
            when no client holds it any more (the classic group protocol, KIP-345's static
            members included).
        members: the members listed.
        coordinator: the node id of the broker that answered as the group's coordinator,
            or ``None`` when not given. A coordinator that (re)loads the group from
            ``__consumer_offsets`` (a failover, or its broker back) lists the group's static
            members again, each with a fresh session timeout, whether anyone still
            heart-beats them or not.
        rebalancing: whether a rebalance was under way (``PreparingRebalance`` or
            ``CompletingRebalance``).
        settled: whether the group was ``Stable``, ``Empty`` or ``Dead`` (not rebalancing,
            and its state known).
    """

    stable: bool
    members: list[GroupMember]
    coordinator: int | None = None
    rebalancing: bool = False
    settled: bool = False


def group_view(admin: AdminClient, group: str, *, answer_s: float,
               request_timeout_s: float = COORDINATOR_REQUEST_TIMEOUT_S) -> GroupView:
    """``group``'s state and members now (``describe_consumer_groups``).

    Args:
        admin: an AdminClient.
        group: the consumer group.
        answer_s: how long to wait for the answer, s (our own bound).
        request_timeout_s: the request's ``request_timeout``, s; a shorter one than the
            default lets the request time out inside librdkafka, which can abort the
            process when the client lives on (:data:`COORDINATOR_REQUEST_TIMEOUT_S`).

    Raises:
        KafkaException: the describe failed (``GROUP_ID_NOT_FOUND``, a coordinator
            loading, ACLs, connectivity); the caller decides.
        TimeoutError: no answer within ``answer_s``.
    """
    future = admin.describe_consumer_groups([group], request_timeout=request_timeout_s)[group]
    desc = await_future(future, answer_s)
    members = [GroupMember(str(m.member_id), str(m.client_id), str(m.host),
                           getattr(m, "group_instance_id", None) or None)
               for m in (desc.members or [])]
    node = getattr(desc, "coordinator", None)
    return GroupView(desc.state == ConsumerGroupState.STABLE, members,
                     None if node is None else int(node.id),
                     desc.state in (ConsumerGroupState.PREPARING_REBALANCING,
                                    ConsumerGroupState.COMPLETING_REBALANCING),
                     desc.state in (ConsumerGroupState.STABLE, ConsumerGroupState.EMPTY,
                                    ConsumerGroupState.DEAD))


def group_members(admin: AdminClient, group: str, *, answer_s: float,
                  request_timeout_s: float = COORDINATOR_REQUEST_TIMEOUT_S
                  ) -> list[GroupMember]:
    """The members of ``group`` now: :func:`group_view`'s members (its arguments and
    errors)."""
    return group_view(admin, group, answer_s=answer_s,
                      request_timeout_s=request_timeout_s).members


def partition_count(admin: AdminClient, topic: str, *, timeout_s: float = 5.0) -> int | None:
    """How many partitions ``topic`` has, from the admin client's metadata (one topic per
    request: a cluster-wide listing costs ~0.2 s on a busy broker); ``None`` when the
    topic is not listed or listed with an error.

    Raises:
        KafkaException: the metadata request failed (an unreachable cluster).
        CallStalled: it did not return within ``timeout_s`` + :data:`LIST_TOPICS_MARGIN_S`.
    """
    meta = list_topics(admin, timeout_s, topic).topics.get(topic)
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
            result = await_future(future, answer_s)
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


def answer(future: Any, timeout_s: float, what: str) -> Any:
    """``future.result()`` bounded by ``timeout_s`` + 5 s: a client wedged after a broker
    outage may never answer, whatever its own request timeout.

    Raises:
        KafkaException: the answer was an error (unchanged).
        SubstrateError: ``SUBSTRATE_TRANSIENT`` when no answer came in time.
    """
    try:
        return await_future(future, timeout_s + 5.0)
    except concurrent.futures.TimeoutError as exc:
        raise SubstrateError(ErrorKind.SUBSTRATE_TRANSIENT,
                             f"{what}: no answer within {timeout_s + 5.0:g} s") from exc


def offset_bounds(
    admin: AdminClient,
    tp: TopicPartition,
    where: str,
    stall_timeout_s: float,
    now: Callable[[], float],
) -> tuple[int, int]:
    """(log start, high watermark) listed ``READ_UNCOMMITTED``, retrying
    transient answers (a leader not yet elected on a new topic) until
    ``stall_timeout_s`` has passed.

    Its waits (two answers per attempt, each up to ``min(ADMIN_TIMEOUT_S,
    stall_timeout_s)`` + 5 s, retried) may sum past any watchdog bound: callers run it
    inside :func:`workers.calls.awaiting`, whose deadline ends it.

    Raises:
        CallStalled: the deadline of the :func:`workers.calls.awaiting` block it runs in
            passed; never retried here (docs/operations.md, "Bounded client calls").
        SubstrateError: the listing failed (classified), or still failed transiently when
            ``stall_timeout_s`` had passed.
    """
    deadline = now() + stall_timeout_s
    timeout = min(ADMIN_TIMEOUT_S, stall_timeout_s)
    while True:
        try:
            with map_kafka_errors(f"listing the offsets of {where}"):
                bounds = []
                for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):  # type: ignore[no-untyped-call]
                    futures = admin.list_offsets(
                        {tp: spec},
                        isolation_level=IsolationLevel.READ_UNCOMMITTED,
                        request_timeout=timeout,
                    )
                    bounds.append(int(answer(next(iter(futures.values())), timeout,
                                             f"listing the offsets of {where}").offset))
            return bounds[0], bounds[1]
        except CallStalled:
            raise  # the awaiting block's bound passed: the worker recovers in place
        except SubstrateError as exc:
            if exc.kind not in (ErrorKind.RETRIABLE, ErrorKind.SUBSTRATE_TRANSIENT):
                raise
            if now() > deadline:
                raise
            pause(0.1)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A described topic.

    Attributes:
        name: the topic name.
        topic_id: the Kafka topic id.
        partitions: the partition count.
        cleanup_policy: the topic's ``cleanup.policy`` (``"compact"`` for a changelog).
        max_message_bytes: the topic's ``max.message.bytes``, bytes.
        replicas: the fewest replicas any of its partitions has.
    """

    name: str
    topic_id: UUID
    partitions: int
    cleanup_policy: str
    max_message_bytes: int
    replicas: int = 0


def kafka_uuid(raw: object) -> UUID:
    """A Kafka ``Uuid`` as a :class:`uuid.UUID`."""
    msb = raw.get_most_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    lsb = raw.get_least_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    return UUID(int=(msb << 64) | lsb)


def describe_topic(
    admin: AdminClient, name: str, *, timeout_s: float = ADMIN_TIMEOUT_S
) -> TopicInfo | None:
    """Describe ``name`` with its id, partition count and changelog-relevant configs.

    Returns:
        The :class:`TopicInfo`, or ``None`` when the broker answers that the
        topic does not exist, to the describe or to the configs' describe (one
        answer; callers that must be sure ask again).

    Raises:
        SubstrateError: any other failure, classified.
        NotAuthorized: ``TOPIC_AUTHORIZATION_FAILED``, naming Describe or
            DescribeConfigs on the topic (:mod:`workers.authorization`).
    """
    futures = admin.describe_topics(
        TopicCollection([name]), request_timeout=timeout_s
    )
    try:
        desc = answer(futures[name], timeout_s, f"describing topic {name}")
    except KafkaException as exc:
        if unknown_topic(exc):
            return None
        raise to_exception(exc, f"describing topic {name}",
                           grant=Grant("Topic", name, ("Describe",))) from exc
    resource = ConfigResource(ResourceType.TOPIC, name)
    try:
        with map_kafka_errors(f"describing the configs of topic {name}",
                              Grant("Topic", name, ("DescribeConfigs",))):
            configs = answer(
                admin.describe_configs([resource], request_timeout=timeout_s)[resource],
                timeout_s, f"describing the configs of topic {name}")
    except SubstrateError as exc:
        if unknown_topic(exc):
            # A broker other than the one that described it has not learned of it yet
            # (a topic just created, on a cluster): not known, as for the describe.
            return None
        raise
    return TopicInfo(
        name=name,
        topic_id=kafka_uuid(desc.topic_id),
        partitions=len(desc.partitions),
        cleanup_policy=str(configs["cleanup.policy"].value),
        max_message_bytes=int(configs["max.message.bytes"].value),
        replicas=min((len(p.replicas) for p in desc.partitions), default=0),
    )


def leaders_known(admin: AdminClient, name: str, timeout_s: float) -> bool:
    """Whether every partition of ``name`` has a leader (``list_topics``, ``timeout_s``, under
    the watchdog's bound of ``timeout_s`` + :data:`LIST_TOPICS_MARGIN_S`).

    Raises:
        SubstrateError: the metadata request failed (classified).
    """
    with map_kafka_errors(f"reading the metadata of topic {name}"):
        topic = list_topics(admin, timeout_s, name).topics.get(name)
    if topic is None or topic.error is not None or not topic.partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())

def list_topics(admin: AdminClient, timeout_s: float, topic: str | None = None) -> Any:
    """The cluster's metadata (of ``topic`` alone when given): ``list_topics`` with
    ``timeout_s``, under the watchdog's bound of ``timeout_s`` + :data:`LIST_TOPICS_MARGIN_S`
    (librdkafka's own timeout is not trusted: docs/operations.md, "Bounded client calls").

    Raises:
        KafkaException: the metadata request failed.
    """
    return call("list_topics", admin.list_topics, topic, timeout=timeout_s,
                bound_s=timeout_s + LIST_TOPICS_MARGIN_S)


def cluster_answers(admin: AdminClient, topic: str | None = None,
                    timeout_s: float = 5.0) -> str | None:
    """``None`` when the cluster answers a metadata request (of ``topic`` alone when given)
    naming its brokers and its controller; else why not.

    A worker asks this before any admin request that waits for the controller or a group
    coordinator (describes, committed-offset listings): such a request that times out
    while the cluster is unreachable can abort the process inside librdkafka
    (docs/operations.md, "A librdkafka abort during broker outages"). A metadata request
    is not one of them.
    """
    try:
        meta = list_topics(admin, timeout_s, topic)
    except (KafkaException, CallStalled) as exc:
        return f"the cluster did not answer a metadata request ({exc})"
    if not meta.brokers or meta.controller_id < 0:
        return "the cluster answered a metadata request without a controller"
    return None


def topic_ids(admin: AdminClient, names: Sequence[str],
              timeout_s: float) -> Iterator[tuple[str, UUID | KafkaException | TimeoutError]]:
    """Describe ``names`` (one ``describe_topics`` request, ``request_timeout`` at least
    0.5 s) and yield, name by name, its topic id or the error its answer raised; each
    answer is waited for at most ``timeout_s`` + 5 s."""
    futures = admin.describe_topics(TopicCollection(list(names)),
                                    request_timeout=max(0.5, timeout_s))
    for name in names:
        try:
            desc = await_future(futures[name], timeout_s + 5)
        except (KafkaException, TimeoutError) as exc:
            yield name, exc
        else:
            yield name, kafka_uuid(desc.topic_id)


def log_starts(
    admin: AdminClient, name: str, partitions: Sequence[int],
    *, timeout_s: float = ADMIN_TIMEOUT_S,
) -> dict[int, int]:
    """Log start offset per partition of ``name`` (``ListOffsets`` earliest).

    Raises:
        SubstrateError: the listing failed (classified), or no answer came within
            ``timeout_s`` + 5 s.
    """
    if not partitions:
        return {}
    spec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    with map_kafka_errors(f"listing the log start of store changelog {name}"):
        futures = admin.list_offsets(
            {TopicPartition(name, p): spec for p in partitions},
            isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout_s)
        return {tp.partition: int(answer(f, timeout_s, f"listing the log start of {name}").offset)
                for tp, f in futures.items()}


def lacking_topic(admin: Any, topics: tuple[str, ...], operations: tuple[str, ...],
                  timeout_s: float = 10.0) -> str | None:
    """The first of ``topics`` on which the admin client's principal lacks one of
    ``operations`` (``describe_topics`` with the authorized operations; a topic it may not
    even describe lacks them all), or None when none can be told (no answer in time).
    """
    try:
        futures = admin.describe_topics(TopicCollection(list(topics)),
                                        include_authorized_operations=True,
                                        request_timeout=timeout_s)
    except KafkaException:
        return None
    wanted = {re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper() for op in operations}
    for topic in topics:
        try:
            desc = await_future(futures[topic], timeout_s + 5.0)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() \
                    == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return topic
            continue
        except Exception:  # no answer in time: this one cannot be told
            continue
        allowed = {op.name for op in (desc.authorized_operations or [])}
        if not wanted <= allowed:
            return topic
    return None
