"""Bootstrap at start: everything a process needs before its first worker runs.

Per process, in the Java implementation's order (Java's ``StreamsRuntime.start``): validate
the declarations, resolve the topics, read the ordering state and judge the store changelogs,
list the committed read positions, create the changelogs, wait for the group's previous members
and pre-commit the missing start positions. The steps in full, and the package's modules one
step each: docs/architecture.md, "The bootstrap" (and docs/operations.md, "Running").

Every start, and every restart attempt (:func:`restart_bootstrap`), builds its own Kafka
clients and drops them when done, and bounds every admin answer itself
(:mod:`~coordinator.bootstrap.clients`): a client wedged by a broker outage never outlives
the attempt that met it. Nothing runs yet when this module is done: the supervisor spawns
workers from the :class:`ProcessPlan` afterwards.

A failed bootstrap raises ``ParsleyFailClosedError`` (a refusal), :class:`StartRetryableError`
(message ending "Retry this start."), :class:`StartError` (a missing prerequisite or a cluster
that could not be queried) or ``ValueError`` (a wrong declaration); docs/runbooks.md,
"If `start` raised".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.changelog import TaskState, progress_logger, read_ordering_state
from coordinator.bootstrap.clients import new_admin
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    ANSWER_SPACING_S,
    BOOTSTRAP_CLIENT_PREFIX,
    BOOTSTRAP_METADATA,
    UNKNOWN_ANSWERS,
    StartError,
    StartRetryableError,
    check_reachable,
    naming_the_group,
    naming_the_principal,
    refuse,
    with_client_logger,
)
from coordinator.bootstrap.fence import fence_tasks
from coordinator.bootstrap.group import (
    await_foreign_members_gone,
    await_group_vacated,
    commit_initial_positions,
    leave_window_s,
    session_timeout_ms,
)
from coordinator.bootstrap.positions import (
    committed_positions,
    initial_position,
    list_offsets,
    lost_positions,
    ordering_state_lost,
    override_foreign_positions,
)
from coordinator.bootstrap.replication import warn_unreplicated
from coordinator.bootstrap.resolve import (
    ResolvedTopic,
    describe_changelog,
    kafka_topic_id,
    resolve_topics,
)
from coordinator.bootstrap.stores import check_store_changelogs
from coordinator.config import ParsleyConfig
from parsley import refusal_shapes as shapes
from parsley.declarations import (
    Process,
    application_id,
    ordering_changelog,
    store_changelog,
    task_width,
    validate_declarations,
)
from parsley.engine.channel import ChannelId
from parsley.refusals import Reason
from workers.changelog import RestoreProgress, ensure_changelog_topic
from workers.kafka_config import restore_consumer_config
from workers.kafka_errors import SubstrateError

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
    "restart_bootstrap",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

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


def _received_partitions(
    process: Process, topics: Mapping[str, ResolvedTopic]
) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in process.received_topics
            for p in range(topics[t].partitions)]


@naming_the_principal
@naming_the_group
def bootstrap_process(
    config: ParsleyConfig,
    process: Process,
    topics: Mapping[str, ResolvedTopic],
    admin: AdminClient,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    group_window_s: float | None = None,
    answers: int = UNKNOWN_ANSWERS,
    spacing_s: float = ANSWER_SPACING_S,
    sleep: Callable[[float], None] = time.sleep,
    tasks: Collection[int] | None = None,
    lead: bool = True,
    fence: bool = False,
) -> ProcessPlan:
    """Bootstrap steps 3-6 for one process: state, refusals, positions.

    The steps: docs/architecture.md, "The bootstrap".

    Args:
        config: the configuration.
        process: the declaration (already validated).
        topics: every declared topic of ``process``, resolved.
        admin: an AdminClient.
        on_progress: changelog read progress.
        group_window_s: s the start waits for the group's previous members to
            leave before it refuses; ``None`` (default) for twice the consumer
            ``session.timeout.ms`` (:func:`~coordinator.bootstrap.group.leave_window_s`).
        answers: unknown answers before the changelog counts as absent.
        spacing_s: s between answers.
        sleep: sleeps (tests pass a fake).
        tasks: ``None`` (default) for a coordinator that runs every task. With
            ``--join`` (docs/operations.md, "Several coordinators"): the task indexes
            this coordinator gained; the group check accepts the peers' workers, and
            the position checks judge only these tasks' partitions.
        lead: with ``tasks``, whether this coordinator owns task 0, and so creates the
            changelogs and pre-commits missing start positions; the others wait for it.
        fence: a restart, once every previous worker of these tasks was seen to exit:
            fence their transactional ids first, so that a dead worker's open transaction
            does not hold up the reads (:mod:`~coordinator.bootstrap.fence`).

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
            group member still there after the wait, each one named) — shapes
            of docs/failing-closed.md.
        StartRetryableError: a changelog view that changed under the read; with
            ``tasks`` and not ``lead``: a changelog or a start position of a gained
            task that the owner of task 0 has not created yet.
        StartError: the cluster could not be queried.
    """
    prefix = config.application_id_prefix
    app_id = application_id(prefix, process.name)
    changelog_name = ordering_changelog(prefix, process.name)
    received = {t: topics[t] for t in process.received_topics}
    width = task_width({t: r.partitions for t, r in received.items()})

    if fence:
        fence_tasks(config, process, range(width) if tasks is None else tasks, width)

    # Step 3.1-3.3: describe and read the ordering changelog.
    changelog = describe_changelog(admin, changelog_name, answers=answers,
                                    spacing_s=spacing_s, timeout_s=ADMIN_TIMEOUT_S, sleep=sleep)
    states: list[TaskState] = []
    read_consumer: Consumer | None = None

    def read(partitions: int) -> list[TaskState]:
        nonlocal read_consumer
        if read_consumer is None:
            cfg = restore_consumer_config(config.bootstrap_servers, prefix, process.name, 0,
                                          config.kafka_properties)
            cfg["client.id"] = f"{BOOTSTRAP_CLIENT_PREFIX}{app_id}-changelog"
            read_consumer = Consumer(with_client_logger(cfg))
        return read_ordering_state(admin, read_consumer, changelog_name, partitions,
                                   on_progress=on_progress)

    if changelog is None and tasks is not None and not lead:
        raise StartRetryableError(
            f"{app_id}: the ordering changelog {changelog_name} does not exist yet: the "
            "coordinator that owns task 0 creates it (docs/operations.md, \"Several "
            "coordinators\")")
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
                raise refuse(
                    Reason.CHANNEL_IDENTITY_CHANGED,
                    f"{shapes.channel_identity_changed_at_start(changed)} (process "
                    f"'{process.name}'). Positions in the old log mean nothing in the new one; "
                    "reset the process (runbook: CHANNEL_IDENTITY_CHANGED).",
                )
            channels = {ChannelId(r.topic_id, p) for r in received.values()
                        for p in range(r.partitions)}
            stranded = sorted({ch for s in states for ch in s.inspector.held_channels()
                               if ch not in channels})
            if stranded:
                raise refuse(
                    Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES,
                    f"{shapes.channel_removed_at_start(stranded)} (process '{process.name}'). "
                    "Put the channel back in the declaration and restart, or reset.",
                )

        # Step 3.5: width.
        if changelog is not None and changelog.partitions != width:
            raise refuse(
                Reason.TASK_WIDTH_CHANGED,
                f"{shapes.task_width_changed(changelog.partitions, width)} (process "
                f"'{process.name}', changelog {changelog_name}). Restore the declaration, or "
                "reset if partitions were added to the widest topic.",
            )

        # Step 3.5 (stores): a store changelog the state binds must still hold what was
        # written, and have one partition per task; judged before step 5 creates any.
        check_store_changelogs(admin, prefix, process, width, states, answers=answers,
                               spacing_s=spacing_s, sleep=sleep)

        # Step 3.6: start positions, once the previous members have left the group (a
        # stopped run's static members leave at their session timeout; a member that
        # stays is not this process, and would take partitions or commit under us).
        session_ms = session_timeout_ms(config.kafka_properties)
        window_s = leave_window_s(config.kafka_properties) if group_window_s is None \
            else group_window_s
        if tasks is None:
            await_group_vacated(admin, app_id, window_s, session_ms=session_ms,
                                bootstrap_servers=config.bootstrap_servers, sleep=sleep)
        else:
            await_foreign_members_gone(admin, app_id, window_s, session_ms=session_ms,
                                       bootstrap_servers=config.bootstrap_servers, sleep=sleep)
        all_tps = _received_partitions(process, topics)
        tps = all_tps if tasks is None else [tp for tp in all_tps if tp.partition in tasks]
        committed_all = committed_positions(admin, app_id, all_tps, sleep)
        committed = {k: v for k, v in committed_all.items()
                     if tasks is None or k[1] in tasks}
        suspects = lost_positions(
            committed, None if changelog is None else [s.records for s in states])
        if suspects:
            if changelog is not None:
                # Look again: a sibling's first commit may have landed meanwhile.
                again = read(len(states))
                appeared = [s.partition for s in suspects
                            if s.partition < len(again) and again[s.partition].records > 0]
                if appeared:
                    raise StartRetryableError(
                        f"ordering records appeared in {changelog_name}{appeared} while the "
                        "start was checking it"
                    )
            raise ordering_state_lost(suspects[0], changelog_name, changelog is not None,
                                      app_id)
        named: set[str] = set()
        for s in states:
            named.update(s.inspector.name_bindings())
        # Positions Parsley did not commit, over state: resume where the state says.
        coverage = {
            (t, p): states[p].inspector.covered_positions().get(
                ChannelId(topics[t].topic_id, p))
            for (t, p) in committed if p < len(states) and states[p].records > 0}
        overridden = override_foreign_positions(admin, app_id, committed, coverage, named)

        missing = [tp for tp in (all_tps if lead else tps)
                   if (tp.topic, tp.partition) not in committed_all]
        if missing and not lead:
            raise StartRetryableError(
                f"{app_id}: no start position yet for "
                f"{[f'{tp.topic}-{tp.partition}' for tp in missing]}: the coordinator that "
                "owns task 0 pre-commits them (docs/operations.md, \"Several coordinators\")")
        positions = {k: v[0] for k, v in committed_all.items()}
        precommit: dict[tuple[str, int], int] = dict(overridden)
        if missing:
            earliest = list_offsets(admin, missing, latest=False)
            latest = list_offsets(admin, missing, latest=True)
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
                    where=str(ChannelId(topics[tp.topic].topic_id, tp.partition)),
                    source=f"{tp.topic}-{tp.partition}, ordering changelog "
                    f"{changelog_name}[{tp.partition}]")

        # Step 5 (Streams creates its changelogs at start): only once nothing refused.
        written = {topics[c.name].name: topics[c.name].replicas for c in process.outputs}
        try:
            # With --join, only the owner of task 0 creates them (the others found the
            # ordering changelog, checked above).
            if lead:
                replicas = config.changelog_replication_factor
                min_isr = config.changelog_min_insync_replicas
                info, _created = ensure_changelog_topic(
                    admin, changelog_name, width, replication_factor=replicas,
                    min_insync_replicas=min_isr)
                written[changelog_name] = info.replicas
                if info.cleanup_policy != "compact":
                    log.warning(
                        "%s: the ordering changelog %s has cleanup.policy=%s; it must be compact, "
                        "or its earliest records age out and the next start refuses "
                        "(ORDERING_STATE_LOST or a state without its version entry)",
                        app_id, changelog_name, info.cleanup_policy)
                for store in process.declared_stores:
                    name = store_changelog(prefix, process.name, store.name)
                    store_info, _created = ensure_changelog_topic(
                        admin, name, width, replication_factor=replicas,
                        min_insync_replicas=min_isr)
                    written[name] = store_info.replicas
                    if store_info.cleanup_policy != "compact":
                        log.warning(
                            "%s: the store changelog %s has cleanup.policy=%s; it must be compact, "
                            "or its records age out and the next start refuses "
                            "ORDERING_STATE_LOST", app_id, name, store_info.cleanup_policy)
        except SubstrateError as exc:
            raise StartError(f"could not create the changelogs of '{process.name}': {exc}") from exc
        if lead:  # once per application, by the owner of task 0 (at each of its starts)
            warn_unreplicated(admin, app_id, written)

        if precommit:
            try:
                commit_initial_positions(config, app_id, [
                    TopicPartition(t, p, off, metadata=BOOTSTRAP_METADATA)
                    for (t, p), off in sorted(precommit.items())])
            except StartRetryableError as exc:
                if tasks is None or not overridden:
                    raise
                # The peers' workers are the group's members: Kafka takes no commit from
                # outside the group while it has members, so this would retry for ever.
                raise StartError(
                    f"{app_id}: read positions Parsley did not commit "
                    f"({[f'{t}-{p}' for (t, p) in sorted(overridden)]}) cannot be moved back "
                    "to the ordering state's coverage while other coordinators' workers are "
                    f"in group '{app_id}' ({exc}). Stop every coordinator of the application "
                    "(parsley-coordinator stop --all), start one without --join once (it "
                    "overrides them and warns), stop it, then start the coordinators with "
                    "--join again (docs/operations.md, \"Several coordinators\")") from exc
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


def topic_operations(processes: Sequence[Process]) -> dict[str, tuple[str, ...]]:
    """The ACL operations each declared topic needs (pure): ``Read`` where received,
    ``Write`` where sent (docs/operations.md, "ACLs")."""
    out: dict[str, tuple[str, ...]] = {}
    for p in processes:
        for name in p.received_topics:
            out[name] = tuple(dict.fromkeys((*out.get(name, ()), "Read")))
        for channel in p.outputs:
            out[channel.name] = tuple(dict.fromkeys((*out.get(channel.name, ()), "Write")))
    return out


@naming_the_principal
def bootstrap(
    config: ParsleyConfig,
    processes: Sequence[Process],
    *,
    admin: AdminClient | None = None,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    group_window_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, ProcessPlan]:
    """Run the whole bootstrap for ``processes`` (docs/operations.md, "Running"), all or nothing.

    Args:
        config: the configuration.
        processes: the declared processes.
        admin: an AdminClient; when omitted (as ``Parsley.start`` does) a new
            one is built for this bootstrap and dropped when it ends.
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
    own = admin if admin is not None else new_admin(config)
    try:
        check_reachable(own, config.bootstrap_servers)
        names = {c.name for p in procs for c in (*(i.channel for i in p.inputs), *p.outputs)}
        topics = resolve_topics(own, names, sleep=sleep, operations=topic_operations(procs))
        plans: dict[str, ProcessPlan] = {}
        for p in procs:
            plans[p.name] = bootstrap_process(config, p, topics, own, on_progress=on_progress,
                                              group_window_s=group_window_s, sleep=sleep)
        return plans
    finally:
        del own  # AdminClient has no close: a client built here goes with its last reference


@naming_the_principal
def restart_bootstrap(
    config: ParsleyConfig,
    process: Process,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    group_window_s: float | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> ProcessPlan:
    """One restart attempt of one process through its bootstrap, on clients of its own.

    The supervisor's restart under ``transient`` calls this once per attempt, once every
    worker of the process was seen to exit; the tasks' transactional ids are fenced before
    the changelog is read (:mod:`~coordinator.bootstrap.fence`). A new AdminClient (and
    new consumers) are built for the attempt and dropped when it ends, so a client wedged
    by a broker outage never answers for a later attempt (docs/operations.md, "Broker
    outage").

    Args:
        config: the configuration.
        process: the declaration (validated at the first start).
        on_progress: changelog read progress (default: :func:`progress_logger`).
        group_window_s: see :func:`bootstrap_process`.
        sleep: sleeps (tests pass a fake).

    Returns:
        The new :class:`ProcessPlan`.

    Raises:
        ParsleyFailClosedError: a refusal (see :func:`bootstrap_process`).
        StartRetryableError: a lagging metadata view.
        StartError: the cluster could not be queried within the bounds.
    """
    admin = new_admin(config)
    try:
        check_reachable(admin, config.bootstrap_servers)
        names = {c.name for c in (*(i.channel for i in process.inputs), *process.outputs)}
        topics = resolve_topics(admin, names, sleep=sleep,
                                operations=topic_operations([process]))
        return bootstrap_process(config, process, topics, admin,
                                 on_progress=on_progress or progress_logger(),
                                 group_window_s=group_window_s, sleep=sleep, fence=True)
    finally:
        del admin
