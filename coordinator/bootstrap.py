"""Bootstrap at start: everything a process needs before its first worker runs.

Per process, in the Java implementation's order (``JAVA-PARSLEY-FACTS.md`` §5,
"Bootstrap steps at ``Parsley.start``"):

1. validate the declarations (``ValueError``);
2. resolve every declared topic, received or sent, to its id and partition
   count; "unknown" only after three answers 500 ms apart
   (:class:`StartError` naming the topic); a topic without an id is
   ``SUBSTRATE_MISCONFIGURED`` (brokers below 3.7.0);
3. describe the ordering changelog (absence also takes three answers) and read
   every partition of it end to end, with progress (facts §3, "Start-time
   reads of the changelog"); with prior state, refuse
   ``CHANNEL_IDENTITY_CHANGED`` and ``CHANNEL_REMOVED_WITH_HELD_MESSAGES``;
   then ``TASK_WIDTH_CHANGED``; corrupt state is
   ``UNKNOWN_ORDERING_STATE_FORMAT``;
4. list the committed read positions (stable), refuse ``ORDERING_STATE_LOST``
   for a commit the bootstrap did not write over an empty changelog partition;
5. create the ordering changelog (compact, one partition per task) and the
   store changelogs where absent;
6. pre-commit every missing start position with the metadata
   ``parsley.bootstrap``: covered + 1 where the state covers the channel
   (earliest for the fed-to-end sentinel, never sentinel + 1); 0 for a topic
   the state names but never covered; earliest for a topic the state never
   named when there is prior state; the declared initial position only on a
   first start. A member of the group that is not this coordinator's and does
   not leave within a window is ``SUBSTRATE_MISCONFIGURED``.

Nothing runs yet when this module is done: the supervisor spawns workers from
the :class:`ProcessPlan` afterwards. A failed bootstrap raises one of
``ParsleyFailClosedError`` (a refusal), :class:`StartRetryableError` (message
ending "Retry this start."), :class:`StartError` (a missing prerequisite or a
cluster that could not be queried) or ``ValueError`` (a wrong declaration) —
seed 001, "If start threw".
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.config import ParsleyConfig
from parsley.declarations import (
    InitialPosition,
    Process,
    application_id,
    ordering_changelog,
    store_changelog,
    task_width,
    validate_declarations,
)
from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.inspector import OrderingStateInspector
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.changelog import RestoreProgress, ensure_changelog_topic, read_partition
from workers.kafka import SubstrateError, admin_config, restore_consumer_config

__all__ = [
    "BOOTSTRAP_CLIENT_PREFIX",
    "BOOTSTRAP_METADATA",
    "ProcessPlan",
    "ResolvedTopic",
    "StartError",
    "StartRetryableError",
    "TaskState",
    "bootstrap",
    "bootstrap_process",
    "initial_position",
    "kafka_topic_id",
    "progress_logger",
    "read_ordering_state",
    "resolve_topics",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

BOOTSTRAP_METADATA: Final = "parsley.bootstrap"
"""Commit metadata of every offset the bootstrap writes (facts §5, "Names on the cluster")."""
BOOTSTRAP_CLIENT_PREFIX: Final = "parsley-bootstrap-"
"""Client id prefix of the bootstrap's clients (facts §5)."""
UNKNOWN_ANSWERS: Final = 3
ANSWER_SPACING_S: Final = 0.5
ADMIN_TIMEOUT_S: Final = 30.0
STABLE_RETRY_S: Final = 0.2
STABLE_DEADLINE_S: Final = 5.0
DEFAULT_GROUP_WINDOW_S: Final = 12.0
"""How long a member in the group may stay before the bootstrap calls it a conflict:
2 x the workers' 6 s session timeout, so a worker of a previous execution has left."""

_UNKNOWN_CODES: Final = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
_FLOOR: Final = "3.7.0"


class StartError(RuntimeError):
    """A start prerequisite is missing, or the cluster could not be queried.

    Java's plain ``IllegalStateException`` at start (seed 001, "If start
    threw"): a declared topic does not exist, the changelog could not be read,
    positions could not be listed. Create the topic, restore connectivity or
    check the ACLs, then retry. Nothing is running after it.
    """


class StartRetryableError(StartError):
    """A broker's metadata view lagged, or a sibling was mid-start; the message ends
    "Retry this start." (seed 001, "If start threw")."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{detail.rstrip('. ')}. Retry this start.")


def _refuse(reason: Reason, detail: str) -> ParsleyFailClosedError:
    return ParsleyFailClosedError(reason, detail)


# ---------------------------------------------------------------------------
# Topic resolution (step 2)
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResolvedTopic:
    """A declared topic as the cluster describes it.

    Attributes:
        name: the topic name.
        topic_id: its Kafka topic id (never the zero UUID).
        partitions: its partition count, >= 1.
    """

    name: str
    topic_id: UUID
    partitions: int


def _to_uuid(raw: object) -> UUID | None:
    if raw is None:
        return None
    msb = raw.get_most_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    lsb = raw.get_least_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    return UUID(int=(msb << 64) | lsb)


def _describe_once(
    admin: AdminClient, names: Sequence[str], timeout_s: float
) -> tuple[dict[str, ResolvedTopic], list[str]]:
    futures = admin.describe_topics(TopicCollection(list(names)), request_timeout=timeout_s)
    found: dict[str, ResolvedTopic] = {}
    unknown: list[str] = []
    for name in names:
        try:
            desc = futures[name].result()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() in _UNKNOWN_CODES:
                unknown.append(name)
                continue
            raise StartError(
                f"could not describe declared topic '{name}' ({exc}); restore connectivity "
                "or grant Describe on the topic, then retry"
            ) from exc
        topic_id = _to_uuid(getattr(desc, "topic_id", None))
        if topic_id is None or topic_id.int == 0:
            raise _refuse(
                Reason.SUBSTRATE_MISCONFIGURED,
                f"topic '{name}' has no topic ID; brokers below the supported {_FLOOR} floor "
                "cannot provide channel identity. Upgrade the brokers.",
            )
        found[name] = ResolvedTopic(name, topic_id, len(desc.partitions))
    return found, unknown


def resolve_topics(
    admin: AdminClient,
    names: Iterable[str],
    *,
    answers: int = UNKNOWN_ANSWERS,
    spacing_s: float = ANSWER_SPACING_S,
    timeout_s: float = ADMIN_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, ResolvedTopic]:
    """Resolve topic names to ids and partition counts (facts §5, bootstrap step 2).

    A name is concluded unknown only after ``answers`` consecutive "unknown"
    answers ``spacing_s`` apart (a broker's metadata may lag a creation).

    Args:
        admin: an AdminClient.
        names: topic names (duplicates ignored).
        answers: unknown answers needed, >= 1.
        spacing_s: s between answers.
        timeout_s: bound on each describe, s.
        sleep: sleeps ``s`` seconds (tests pass a fake).

    Returns:
        ``{name: ResolvedTopic}`` for every name.

    Raises:
        StartError: a topic still unknown after the answers (naming it), or a
            describe that failed otherwise (authorization, timeout).
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` for a topic without
            a topic id ("... below the supported 3.7.0 floor ...", seed 001).
    """
    pending = sorted(set(names))
    resolved: dict[str, ResolvedTopic] = {}
    for attempt in range(answers):
        if not pending:
            break
        if attempt:
            sleep(spacing_s)
        found, pending = _describe_once(admin, pending, timeout_s)
        resolved.update(found)
    if pending:
        raise StartError(
            f"declared topic(s) {pending} do not exist ({answers} answers "
            f"{spacing_s * 1000:.0f} ms apart); create them, or remove them from the "
            "declaration, then retry"
        )
    return resolved


def _describe_changelog(
    admin: AdminClient,
    name: str,
    *,
    answers: int,
    spacing_s: float,
    timeout_s: float,
    sleep: Callable[[float], None],
) -> ResolvedTopic | None:
    """The ordering changelog, or ``None`` after ``answers`` unknown answers."""
    for attempt in range(answers):
        if attempt:
            sleep(spacing_s)
        found, _unknown = _describe_once(admin, [name], timeout_s)
        if name in found:
            return found[name]
    return None


# ---------------------------------------------------------------------------
# Reading the ordering changelog (step 3)
# ---------------------------------------------------------------------------


@dataclass
class TaskState:
    """One task's ordering state as read from changelog partition ``task``.

    Attributes:
        task: the task (= changelog partition) index.
        records: records read (tombstones included); 0 means the partition
            holds no ordering records.
        inspector: the latest value per key (held bodies as markers).
    """

    task: int
    records: int
    inspector: OrderingStateInspector

    @property
    def has_state(self) -> bool:
        """True when any key is live."""
        return not self.inspector.is_empty()


class _Collector:
    """Latest value per key of one partition, validating held blobs as they arrive."""

    def __init__(self) -> None:
        self.records = 0
        self.plain: dict[bytes, bytes] = {}
        self.held: dict[bytes, str | None] = {}  # key -> blob diagnosis (None = valid)

    def add(self, key: bytes, value: bytes | None) -> None:
        self.records += 1
        key = bytes(key)
        if key[:1] == b"h":
            if value is None:
                self.held.pop(key, None)
            else:
                try:
                    sc.validate_held(bytes(value))
                    self.held[key] = None
                except ParsleyFailClosedError as exc:
                    self.held[key] = exc.detail
        elif value is None:
            self.plain.pop(key, None)
        else:
            self.plain[key] = bytes(value)

    def check(self, where: str) -> OrderingStateInspector:
        """Validate every live row (state_codec's restore checks) and build the inspector.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` naming ``where``.
        """
        try:
            if self.held and sc.VERSION_KEY not in self.plain:
                # load_image judges the lost head only over the rows it sees.
                sc.load_image([(b"h", b"")])
            sc.load_image(sorted(self.plain.items()))
            for key in sorted(self.held):
                sc.held_key_parts(key)
                if self.held[key] is not None:
                    raise _refuse(Reason.UNKNOWN_ORDERING_STATE_FORMAT, str(self.held[key]))
        except ParsleyFailClosedError as exc:
            raise _refuse(exc.reason, f"{where}: {exc.detail}") from exc
        rows: list[tuple[bytes, bytes | None]] = list(self.plain.items())
        rows += [(k, b"") for k in self.held]
        return OrderingStateInspector(rows)


def read_ordering_state(
    admin: AdminClient,
    consumer: Consumer,
    topic: str,
    partitions: int,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    stall_timeout_s: float = 30.0,
) -> list[TaskState]:
    """Read every partition of an ordering changelog to its end (facts §3).

    Args:
        admin: an AdminClient (offset listings).
        consumer: an assign-only ``read_committed`` consumer
            (``workers.kafka.restore_consumer_config``).
        topic: the changelog.
        partitions: its partition count as described.
        on_progress: called with each partition's :class:`RestoreProgress`.
        stall_timeout_s: s without progress before the read fails.

    Returns:
        One :class:`TaskState` per partition, in partition order.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a corrupt
            row, a version this build cannot read, or state without its
            version entry; the detail starts with ``<topic>[<partition>]``.
        StartError: the read failed or stalled.
        StartRetryableError: the changelog has fewer partitions than described
            (a lagging metadata view).
    """
    states: list[TaskState] = []
    for p in range(partitions):
        collector = _Collector()
        try:
            for key, value in read_partition(
                consumer, admin, topic, p, on_progress=on_progress,
                stall_timeout_s=stall_timeout_s,
            ):
                collector.add(key, value)
        except SubstrateError as exc:
            if exc.code in _UNKNOWN_CODES:
                raise StartRetryableError(
                    f"partition {p} of {topic} is not known to the broker that was asked, "
                    f"although the topic was described with {partitions} partitions"
                ) from exc
            raise StartError(f"could not read the ordering changelog {topic}[{p}]: {exc}") from exc
        states.append(TaskState(p, collector.records, collector.check(f"{topic}[{p}]")))
    return states


def progress_logger(every_s: float = 5.0) -> Callable[[RestoreProgress], None]:
    """An ``on_progress`` that logs each partition's end, and its progress every ``every_s`` s."""
    last: dict[tuple[str, int], float] = {}

    def report(p: RestoreProgress) -> None:
        key = (p.topic, p.partition)
        now = time.monotonic()
        if p.done:
            log.info("read %s[%d] to its end: %d record(s), offsets %d..%d", p.topic,
                     p.partition, p.records_read, p.start_offset, p.end_offset)
        elif now - last.setdefault(key, now) >= every_s:
            last[key] = now
            log.info("reading %s[%d]: position %d of %d (%d record(s))", p.topic, p.partition,
                     p.position, p.end_offset, p.records_read)

    return report


# ---------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessPlan:
    """What the bootstrap established for one process; the supervisor spawns from it.

    Attributes:
        process: the declaration.
        prefix: the application id prefix.
        task_count: W, the widest received topic's partition count.
        topics: every declared topic (received and sent) as resolved.
        prior_state: whether the ordering changelog held any state.
        start_positions: ``{(topic, partition): offset}``, the committed read
            position (next offset to fetch) of every received partition.
        precommitted: the subset the bootstrap committed in this start.
    """

    process: Process
    prefix: str
    task_count: int
    topics: Mapping[str, ResolvedTopic]
    prior_state: bool
    start_positions: Mapping[tuple[str, int], int]
    precommitted: Mapping[tuple[str, int], int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The process name."""
        return self.process.name

    @property
    def application_id(self) -> str:
        """``<prefix>-<process>``."""
        return application_id(self.prefix, self.process.name)

    @property
    def topic_ids(self) -> dict[str, UUID]:
        """Declared topic name -> topic id (``TaskSpec.topic_ids``)."""
        return {n: t.topic_id for n, t in self.topics.items()}

    @property
    def partitions(self) -> dict[str, int]:
        """Declared topic name -> partition count (``TaskSpec.partitions``)."""
        return {n: t.partitions for n, t in self.topics.items()}


def initial_position(
    prior_state: bool,
    covered: int | None,
    named: bool,
    declared: InitialPosition,
    earliest: int,
    latest: int,
    *,
    where: str = "the channel",
) -> int:
    """The position the bootstrap pre-commits for a received partition without one (pure).

    The rule of facts §5 (bootstrap step 3, "pre-commit every missing start
    position"), in order:

    * prior state that covers the channel: ``covered + 1``; on the fed-to-end
      sentinel (``FED_TO_END``, 2^63-1) ``earliest`` instead, never sentinel + 1;
    * prior state that names the topic but never covered this channel: ``0``;
    * prior state that never named the topic: ``earliest``;
    * no prior state (a process's first start): the declared ``starting_at``
      (``earliest`` or ``latest``).

    Args:
        prior_state: whether the ordering changelog held any state.
        covered: the channel's covered position from the state, or ``None``.
        named: whether the state binds the topic's name.
        declared: the channel's declared initial position.
        earliest: the partition's earliest offset (>= 0).
        latest: the partition's latest offset (>= ``earliest``).
        where: names the channel in a refusal's detail
            (``"<changelog>[<p>]: <topic>-<p>"``).

    Returns:
        The offset to commit (the next offset to fetch), in ``0..FED_TO_END``.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a
            ``covered`` outside ``0..FED_TO_END`` (negative, or beyond a signed
            64-bit long): no such coverage can be written, so the state is not
            one this build understands.
        ValueError: ``earliest``/``latest`` negative or out of order (a
            caller's error, not the cluster's state).
    """
    if covered is not None and not 0 <= covered <= FED_TO_END:
        raise _refuse(
            Reason.UNKNOWN_ORDERING_STATE_FORMAT,
            f"{where}: covered position {covered} is outside 0..{FED_TO_END} (a covered "
            "position is a non-negative offset or the fed-to-end sentinel)",
        )
    if not 0 <= earliest <= latest:
        raise ValueError(f"{where}: offsets must satisfy 0 <= earliest <= latest, got "
                         f"earliest={earliest}, latest={latest}")
    if not prior_state:
        return latest if declared is InitialPosition.LATEST else earliest
    if covered is not None:
        return earliest if covered == FED_TO_END else covered + 1
    return 0 if named else earliest


def _received_partitions(
    process: Process, topics: Mapping[str, ResolvedTopic]
) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in process.received_topics
            for p in range(topics[t].partitions)]


def _committed(
    admin: AdminClient, group: str, tps: list[TopicPartition], sleep: Callable[[float], None]
) -> dict[tuple[str, int], tuple[int, str]]:
    """Stable committed offsets: ``{(topic, partition): (offset, metadata)}``, committed only."""
    deadline = time.monotonic() + STABLE_DEADLINE_S
    while True:
        try:
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t.topic, t.partition)
                                                           for t in tps])]
            result = admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=ADMIN_TIMEOUT_S
            )[group].result()
            out: dict[tuple[str, int], tuple[int, str]] = {}
            unstable = False
            for tp in result.topic_partitions:
                if tp.error is not None:
                    if tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                        unstable = True
                        continue
                    raise StartError(f"could not list the committed positions of group "
                                     f"'{group}' on {tp.topic}[{tp.partition}]: {tp.error}")
                if tp.offset >= 0:
                    out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
            if not unstable:
                return out
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() in (
                    KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE)):
                raise StartError(f"could not list the committed positions of group '{group}': "
                                 f"{exc}; restore connectivity or grant Describe on the group, "
                                 "then retry") from exc
        if time.monotonic() > deadline:
            raise StartRetryableError(
                f"the committed positions of group '{group}' stayed unstable (a transaction "
                f"was committing) for {STABLE_DEADLINE_S:g} s"
            )
        sleep(STABLE_RETRY_S)


def _list_offsets(
    admin: AdminClient, tps: Sequence[TopicPartition], latest: bool
) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    try:
        futures = admin.list_offsets(
            {TopicPartition(t.topic, t.partition): spec for t in tps},
            isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=ADMIN_TIMEOUT_S,
        )
        return {(tp.topic, tp.partition): int(f.result().offset) for tp, f in futures.items()}
    except KafkaException as exc:
        which = "latest" if latest else "earliest"
        raise StartError(f"could not list the {which} positions of "
                         f"{sorted({t.topic for t in tps})}: {exc}") from exc


def _members(admin: AdminClient, group: str) -> list[Any]:
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group]
        return list(desc.result().members or [])
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise StartError(f"could not describe group '{group}': {exc}") from exc


def _await_empty_group(
    admin: AdminClient, group: str, window_s: float, sleep: Callable[[float], None]
) -> None:
    """Wait until the group has no member; one that stays past the window is a conflict."""
    deadline = time.monotonic() + window_s
    while True:
        members = _members(admin, group)
        if not members:
            return
        if time.monotonic() >= deadline:
            names = sorted(f"{m.client_id} ({m.member_id})" for m in members)
            raise _refuse(
                Reason.SUBSTRATE_MISCONFIGURED,
                f"the group join has been refused as a protocol conflict for longer than "
                f"{window_s:g} s, so a member speaking another group protocol persists in "
                f"group '{group}': {names}. Something is in the consumer group under this "
                "application id that is not this process: a consumer configured with the "
                "application id as its group.id, or another instance's bootstrap member "
                f"that never left. List them with kafka-consumer-groups --describe --group "
                f"{group} --members, remove the foreign consumer, then restart.",
            )
        sleep(min(0.5, max(0.05, deadline - time.monotonic())))


def _bootstrap_consumer(config: ParsleyConfig, group: str) -> Consumer:
    from workers.kafka import _select  # the same prefix rules as every worker client

    props = _select(dict(config.kafka_properties), "consumer")
    props.update({
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": group,
        "client.id": f"{BOOTSTRAP_CLIENT_PREFIX}{group}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        "allow.auto.create.topics": False,
        "isolation.level": "read_committed",
    })
    return Consumer(props)


def kafka_topic_id(topic_id: UUID) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``: URL-safe base64, no padding),
    the form ``kafka-topics --describe`` shows as ``TopicId``."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def _fmt_channels(channels: Iterable[ChannelId]) -> str:
    return "[" + ", ".join(f"{kafka_topic_id(c.topic_id)}/{c.partition}" for c in channels) + "]"


def bootstrap_process(
    config: ParsleyConfig,
    process: Process,
    topics: Mapping[str, ResolvedTopic],
    admin: AdminClient,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    group_window_s: float = DEFAULT_GROUP_WINDOW_S,
    answers: int = UNKNOWN_ANSWERS,
    spacing_s: float = ANSWER_SPACING_S,
    sleep: Callable[[float], None] = time.sleep,
) -> ProcessPlan:
    """Bootstrap steps 3-6 for one process (facts §5 step 3): state, refusals, positions.

    Args:
        config: the configuration.
        process: the declaration (already validated).
        topics: every declared topic of ``process``, resolved.
        admin: an AdminClient.
        on_progress: changelog read progress.
        group_window_s: s a member may stay in the group before the
            pre-commit calls it a conflict.
        answers: unknown answers before the changelog counts as absent.
        spacing_s: s between answers.
        sleep: sleeps (tests pass a fake).

    Returns:
        The :class:`ProcessPlan`.

    Raises:
        ParsleyFailClosedError: ``CHANNEL_IDENTITY_CHANGED`` ("topics [<names>] now
            resolve to different identities than this process's state was built
            against"), ``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` ("received messages
            remain undelivered on [<topicId>/<partition>, ...], which the new
            declaration no longer receives"), ``TASK_WIDTH_CHANGED`` ("this
            process's ordering state was built for <n> task(s) but the
            declaration now induces <m> ..."), ``ORDERING_STATE_LOST`` ("committed
            read positions exist for <topic-partition>, ..."),
            ``UNKNOWN_ORDERING_STATE_FORMAT``, ``SUBSTRATE_MISCONFIGURED`` (a
            foreign group member) — shapes of seed 001.
        StartRetryableError: a changelog view that changed under the read.
        StartError: the cluster could not be queried.
    """
    prefix = config.application_id_prefix
    app_id = application_id(prefix, process.name)
    changelog_name = ordering_changelog(prefix, process.name)
    received = {t: topics[t] for t in process.received_topics}
    width = task_width({t: r.partitions for t, r in received.items()})

    # Step 3.1-3.3: describe and read the ordering changelog.
    changelog = _describe_changelog(admin, changelog_name, answers=answers,
                                    spacing_s=spacing_s, timeout_s=ADMIN_TIMEOUT_S, sleep=sleep)
    states: list[TaskState] = []
    read_consumer: Consumer | None = None

    def read(partitions: int) -> list[TaskState]:
        nonlocal read_consumer
        if read_consumer is None:
            cfg = restore_consumer_config(config.bootstrap_servers, prefix, process.name, 0,
                                          config.kafka_properties)
            cfg["client.id"] = f"{BOOTSTRAP_CLIENT_PREFIX}{app_id}-changelog"
            read_consumer = Consumer(cfg)
        return read_ordering_state(admin, read_consumer, changelog_name, partitions,
                                   on_progress=on_progress)

    try:
        if changelog is not None:
            log.info("%s: reading ordering changelog %s (%d partitions)", app_id,
                     changelog_name, changelog.partitions)
            states = read(changelog.partitions)
        prior = any(s.has_state for s in states)

        # Step 3.4: identity and stranded holds, with prior state.
        if prior:
            current = {t: r.topic_id for t, r in received.items()}
            changed = sorted({n for s in states
                              for n in s.inspector.identity_changed_topics(current)})
            if changed:
                raise _refuse(
                    Reason.CHANNEL_IDENTITY_CHANGED,
                    f"topics {changed} now resolve to different identities than this "
                    f"process's state was built against (process '{process.name}'). Positions "
                    "in the old log mean nothing in the new one; reset the process "
                    "(runbook: CHANNEL_IDENTITY_CHANGED).",
                )
            channels = {ChannelId(r.topic_id, p) for r in received.values()
                        for p in range(r.partitions)}
            stranded = sorted({ch for s in states for ch in s.inspector.held_channels()
                               if ch not in channels})
            if stranded:
                raise _refuse(
                    Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES,
                    f"received messages remain undelivered on {_fmt_channels(stranded)}, "
                    f"which the new declaration of process '{process.name}' no longer "
                    "receives. Put the channel back in the declaration and restart, or reset.",
                )

        # Step 3.5: width.
        if changelog is not None and changelog.partitions != width:
            raise _refuse(
                Reason.TASK_WIDTH_CHANGED,
                f"this process's ordering state was built for {changelog.partitions} task(s) "
                f"but the declaration now induces {width} (the widest received topic's "
                f"partition count changed) (process '{process.name}', changelog "
                f"{changelog_name}). Restore the declaration, or reset if partitions were "
                "added to the widest topic.",
            )

        # Step 3.6: start positions.
        tps = _received_partitions(process, topics)
        committed = _committed(admin, app_id, tps, sleep)
        for (topic, p), (offset, metadata) in sorted(committed.items()):
            if metadata == BOOTSTRAP_METADATA:
                continue
            if changelog is not None and p < len(states) and states[p].records > 0:
                continue
            if changelog is not None and p < len(states):
                # Look again: a sibling's first commit may have landed meanwhile.
                again = read(len(states))
                if again[p].records > 0:
                    raise StartRetryableError(
                        f"ordering records appeared in {changelog_name}[{p}] while the start "
                        "was checking it"
                    )
            provenance = ("stamped by a previous execution" if metadata else
                          "committed by a previous execution or outside parsley (external "
                          "tooling, or pre-seeded offsets)")
            behind = (f"partition {p} of this process's ordering-store changelog "
                      f"{changelog_name} holds no ordering records" if changelog is not None
                      else f"this process's ordering-store changelog {changelog_name} does "
                      "not exist")
            raise _refuse(
                Reason.ORDERING_STATE_LOST,
                f"committed read positions exist for {topic}-{p} (offset {offset}), "
                f"{provenance}, but {behind}. If the changelog's records can be restored "
                "from a backup, restore them and start; otherwise finish the reset "
                f"(kafka-consumer-groups --delete --group {app_id}).",
            )

        missing = [tp for tp in tps if (tp.topic, tp.partition) not in committed]
        positions = {k: v[0] for k, v in committed.items()}
        precommit: dict[tuple[str, int], int] = {}
        if missing:
            named: set[str] = set()
            for s in states:
                named.update(s.inspector.name_bindings())
            earliest = _list_offsets(admin, missing, latest=False)
            latest = _list_offsets(admin, missing, latest=True)
            for tp in missing:
                key = (tp.topic, tp.partition)
                covered: int | None = None
                if tp.partition < len(states):
                    covered = states[tp.partition].inspector.covered_positions().get(
                        ChannelId(topics[tp.topic].topic_id, tp.partition))
                inp = process.input(tp.topic)
                assert inp is not None
                precommit[key] = initial_position(
                    prior, covered, tp.topic in named, inp.channel.initial_position,
                    earliest[key], latest[key],
                    where=f"{changelog_name}[{tp.partition}]: {tp.topic}-{tp.partition}")

        # Step 5 (Streams creates its changelogs at start): only once nothing refused.
        try:
            info, _created = ensure_changelog_topic(admin, changelog_name, width)
            if info.cleanup_policy != "compact":
                log.warning(
                    "%s: the ordering changelog %s has cleanup.policy=%s; it must be compact, "
                    "or its earliest records age out and the next start refuses "
                    "(ORDERING_STATE_LOST or a state without its version entry)",
                    app_id, changelog_name, info.cleanup_policy)
            for store in process.declared_stores:
                ensure_changelog_topic(admin, store_changelog(prefix, process.name, store.name),
                                       width)
        except SubstrateError as exc:
            raise StartError(f"could not create the changelogs of '{process.name}': {exc}") from exc

        if precommit:
            _await_empty_group(admin, app_id, group_window_s, sleep)
            consumer = _bootstrap_consumer(config, app_id)
            try:
                offsets = [TopicPartition(t, p, off, metadata=BOOTSTRAP_METADATA)
                           for (t, p), off in sorted(precommit.items())]
                consumer.commit(offsets=offsets, asynchronous=False)
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if isinstance(err, KafkaError) and err.code() in (
                        KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
                        KafkaError.REBALANCE_IN_PROGRESS):
                    raise StartRetryableError(
                        f"a member joined group '{app_id}' while the start committed its "
                        f"initial positions ({err.name()})"
                    ) from exc
                raise StartError(f"could not commit the initial positions of group "
                                 f"'{app_id}': {exc}") from exc
            finally:
                consumer.close()
            positions.update(precommit)
            log.info("%s: committed initial positions for %s", app_id,
                     [f"{t}-{p}@{o}" for (t, p), o in sorted(precommit.items())])
    finally:
        if read_consumer is not None:
            read_consumer.close()

    return ProcessPlan(
        process=process,
        prefix=prefix,
        task_count=width,
        topics={n: topics[n]
                for n in {*process.received_topics, *(c.name for c in process.outputs)}},
        prior_state=prior,
        start_positions=dict(sorted(positions.items())),
        precommitted=dict(sorted(precommit.items())),
    )


def bootstrap(
    config: ParsleyConfig,
    processes: Sequence[Process],
    *,
    admin: AdminClient | None = None,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    group_window_s: float = DEFAULT_GROUP_WINDOW_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, ProcessPlan]:
    """Run the whole bootstrap for ``processes`` (facts §5 steps 1-3), all or nothing.

    Args:
        config: the configuration.
        processes: the declared processes.
        admin: an AdminClient (one is built from ``config`` when omitted).
        on_progress: changelog read progress (default: :func:`progress_logger`).
        group_window_s: see :func:`bootstrap_process`.
        sleep: sleeps (tests pass a fake).

    Returns:
        ``{process name: ProcessPlan}`` in declaration order.

    Raises:
        ValueError: a wrong declaration (``validate_declarations``).
        ParsleyFailClosedError: a refusal (see :func:`bootstrap_process`).
        StartRetryableError: a lagging metadata view ("... Retry this start.").
        StartError: a missing prerequisite or an unreachable cluster.
    """
    procs = list(processes)
    validate_declarations(config.application_id_prefix, procs)
    if on_progress is None:
        on_progress = progress_logger()
    own_admin = admin is None
    if admin is None:
        admin = AdminClient(admin_config(config.bootstrap_servers, config.kafka_properties))
    del own_admin  # AdminClient has no close; it is released with the object
    names = {c.name for p in procs for c in (*(i.channel for i in p.inputs), *p.outputs)}
    topics = resolve_topics(admin, names, sleep=sleep)
    plans: dict[str, ProcessPlan] = {}
    for p in procs:
        plans[p.name] = bootstrap_process(config, p, topics, admin, on_progress=on_progress,
                                          group_window_s=group_window_s, sleep=sleep)
    return plans
