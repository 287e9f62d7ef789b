"""The calls to Kafka and the control endpoint that reset a process, in the one order that
fails closed at every step.

Refuse while a coordinator or a member of the group is alive; read the boundary; delete the
ordering and store changelogs; delete the group and commit the chosen positions under the
metadata ``parsley.bootstrap``; remove the local state; write the boundary record. The
steps, why this order and why the metadata are in docs/architecture.md, "The coordinator",
"Resetting a process"; the runbook is docs/runbooks.md, "Resetting a process". The pure
part (targets, positions, the plan's text and Kafka commands, the record) is
:mod:`coordinator.reset.plan`; the subcommand is :mod:`coordinator.cli.reset`.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import orjson
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.bootstrap.changelog import read_ordering_state
from coordinator.bootstrap.clients import answer, new_admin
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    BOOTSTRAP_METADATA,
    StartError,
    check_reachable,
    with_client_logger,
)
from coordinator.bootstrap.group import group_members, leave_window_s
from coordinator.bootstrap.positions import committed_positions, list_offsets
from coordinator.bootstrap.resolve import resolve_topics
from coordinator.config import ParsleyConfig
from coordinator.reset.plan import (
    PartitionBoundary,
    ResetPlan,
    Target,
    choose_positions,
    current_positions,
    iso_utc,
    members_refusal,
)
from parsley.declarations import Process, application_id, ordering_changelog, store_changelog
from workers.kafka_errors import group_not_empty, group_not_found, member_joined, unknown_topic

__all__ = [
    "DELETE_TIMEOUT_S",
    "coordinator_serving",
    "default_wait_s",
    "execute_reset",
    "open_admin",
    "plan_reset",
    "wait_for_no_members",
]

log = logging.getLogger("parsley.coordinator.reset")

DELETE_TIMEOUT_S: Final = 60.0
"""Default bound on a changelog's deletion, s: from the delete request until two
describes 0.5 s apart answer that the topic does not exist."""

RECORDS_DIR: Final = "resets"
"""Under the state dir: where each reset's boundary record is written."""


# ------------------------------------------------------------------ Kafka and the endpoint


def coordinator_serving(config: ParsleyConfig, processes: Iterable[str],
                        timeout_s: float = 2.5) -> str | None:
    """The control endpoint of a coordinator serving any of ``processes`` under
    ``config``'s prefix and state dir, or ``None`` when none answers within ``timeout_s``.

    A coordinator that answers with none of the processes among its own is not one
    (another application under the same prefix)."""
    from coordinator.control.status_socket import (
        NoReplyError,
        default_endpoint,
        endpoint_file,
        listening,
        request,
    )

    record = endpoint_file(config)
    endpoint = record.read_text().strip() if record.exists() else ""
    endpoint = endpoint or default_endpoint(config)
    if listening(endpoint) is False:  # nothing accepts there: known at once
        return None
    try:
        reply = request(endpoint, {"op": "status"}, timeout_s=timeout_s)
    except NoReplyError:
        return None
    running = (reply.get("status") or {}).get("processes") or {}
    wanted = set(processes)
    if isinstance(running, dict) and running and not wanted.intersection(running):
        return None
    return endpoint


def wait_for_no_members(admin: AdminClient, group: str, window_s: float, *,
                        bootstrap_servers: str, poll_s: float = 0.5,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic) -> None:
    """Return once ``group`` has no member; wait at most ``window_s`` s (a stopped
    worker's static membership lasts its session timeout), logging the wait.

    Raises:
        ResetRefused: members still there after ``window_s`` (:func:`members_refusal`).
        StartError: the group could not be described, or its coordinator never answered.
    """
    start = clock()
    announced = False
    while True:
        present = group_members(admin, group)
        now = clock()
        if present == []:
            return
        if present and not announced:
            log.info("waiting up to %g s for the members of group %s to leave: [%s]",
                     window_s, group, "; ".join(sorted(m.describe() for m in present)))
            announced = True
        if now - start >= window_s:
            if present is None:
                raise StartError(f"the coordinator of group '{group}' did not answer a "
                                 f"describe within {window_s:g} s; retry")
            raise members_refusal(group, present, round(now - start, 1), bootstrap_servers)
        sleep(poll_s)


def _held_and_covered(config: ParsleyConfig, admin: AdminClient, process: Process,
                      topic_ids: Mapping[str, Any], partitions: int | None
                      ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int],
                                 dict[tuple[str, int], int], str]:
    """``({(topic, p): held count}, {(topic, p): covered}, {(topic, p): held head}, what
    was read)`` from the ordering changelog. State the bootstrap refuses
    (``UNKNOWN_ORDERING_STATE_FORMAT``, a refusal that asks for a reset) is reported as
    unreadable, never raised: the reset is its remedy."""
    from confluent_kafka import Consumer

    from coordinator.bootstrap.common import StartRetryableError
    from parsley.refusals import ParsleyFailClosedError
    from workers.kafka_config import restore_consumer_config

    if partitions is None:
        return {}, {}, {}, "absent"
    cfg = restore_consumer_config(config.bootstrap_servers, config.application_id_prefix,
                                  process.name, 0, config.kafka_properties)
    cfg["client.id"] = f"parsley-reset-{process.name}"
    consumer = Consumer(with_client_logger(cfg))
    try:
        states = read_ordering_state(admin, consumer,
                                     ordering_changelog(config.application_id_prefix,
                                                        process.name), partitions)
    except (ParsleyFailClosedError, StartRetryableError) as exc:
        log.warning("%s: the ordering state is unreadable, so the record has no held or "
                    "covered positions: %s", process.name, exc)
        return {}, {}, {}, f"unreadable: {exc}"
    finally:
        consumer.close()
    by_id = {v: k for k, v in topic_ids.items()}
    held: dict[tuple[str, int], int] = {}
    covered: dict[tuple[str, int], int] = {}
    heads: dict[tuple[str, int], int] = {}
    for s in states:
        for ch, n in s.inspector.held_channels().items():
            if ch.topic_id in by_id:
                held[(by_id[ch.topic_id], ch.partition)] = n
        for ch, pos in s.inspector.held_heads().items():
            if ch.topic_id in by_id:
                heads[(by_id[ch.topic_id], ch.partition)] = pos
        for ch, pos in s.inspector.covered_positions().items():
            if ch.topic_id in by_id:
                covered[(by_id[ch.topic_id], ch.partition)] = pos
    return held, covered, heads, f"read ({partitions} partition(s))"


def _by_time(admin: AdminClient, tps: Sequence[TopicPartition],
             timestamp_ms: int) -> dict[tuple[str, int], int]:
    """ListOffsets by timestamp (KIP-396): the first offset whose record time is at or
    after ``timestamp_ms`` per partition, ``-1`` where none is."""
    spec = OffsetSpec.for_timestamp(timestamp_ms)
    try:
        futures = admin.list_offsets({TopicPartition(t.topic, t.partition): spec for t in tps},
                                     isolation_level=IsolationLevel.READ_COMMITTED,
                                     request_timeout=ADMIN_TIMEOUT_S)
        return {(tp.topic, tp.partition): int(answer(f, f"listing the offsets of "
                                                         f"{tp.topic}-{tp.partition} at "
                                                         f"{timestamp_ms} ms").offset)
                for tp, f in futures.items()}
    except KafkaException as exc:
        raise StartError(f"could not list the offsets at {timestamp_ms} ms: {exc}") from exc


def plan_reset(config: ParsleyConfig, process: Process, target: Target,
               admin: AdminClient) -> ResetPlan:
    """Read the boundary of ``process`` and choose its positions; changes nothing.

    Raises:
        ResetRefused: the target cannot be applied (:func:`choose_positions`).
        StartError: a received topic does not exist, or the cluster could not be queried.
    """
    from workers.admin import describe_topic
    from workers.kafka_errors import SubstrateError

    prefix = config.application_id_prefix
    group = application_id(prefix, process.name)
    topics = resolve_topics(admin, process.received_topics)
    tps = [TopicPartition(t, p) for t in process.received_topics
           for p in range(topics[t].partitions)]
    names = [ordering_changelog(prefix, process.name),
             *(store_changelog(prefix, process.name, s.name) for s in process.declared_stores)]
    try:
        infos = {n: describe_topic(admin, n) for n in names}
    except SubstrateError as exc:
        raise StartError(f"could not describe the changelogs of '{process.name}': {exc}") from exc
    ordering = infos[names[0]]
    held, covered, heads, state = _held_and_covered(
        config, admin, process, {t: r.topic_id for t, r in topics.items()},
        None if ordering is None else ordering.partitions)
    committed = committed_positions(admin, group, tps, time.sleep)
    start = list_offsets(admin, tps, latest=False)
    end = list_offsets(admin, tps, latest=True)
    bounds = {k: (start[k], end[k]) for k in start}
    by_time = _by_time(admin, tps, target.timestamp_ms) \
        if target.mode == "datetime" and target.timestamp_ms is not None else None
    chosen = choose_positions(target, bounds, by_time,
                              current=current_positions(heads, covered, committed))
    parts = tuple(PartitionBoundary(
        t.topic, t.partition,
        committed[(t.topic, t.partition)][0] if (t.topic, t.partition) in committed else None,
        committed[(t.topic, t.partition)][1] if (t.topic, t.partition) in committed else None,
        start[(t.topic, t.partition)], end[(t.topic, t.partition)],
        covered.get((t.topic, t.partition)), held.get((t.topic, t.partition), 0),
        chosen[(t.topic, t.partition)]) for t in tps)
    return ResetPlan(process.name, prefix, config.bootstrap_servers, target, parts, names[0],
                     {n: i is not None for n, i in infos.items()},
                     Path(config.state_dir) / group, int(time.time() * 1000), state,
                     _last_status(config, process.name))


def _last_status(config: ParsleyConfig, process: str) -> dict[str, Any] | None:
    """The process's status in the last report ``run`` kept (docs/operations.md, "Status
    after exit"), with the exit's time and code; ``None`` when there is none."""
    from coordinator.control.last_status import last_status_file, read_last_report

    try:
        report = read_last_report(last_status_file(config.state_dir,
                                                   config.application_id_prefix))
    except OSError:
        return None
    if report is None or process not in report.processes:
        return None
    return {"exited_at": report.exited_at, "exit": report.exit_name,
            "exit_code": report.exit_code, **report.processes[process].to_json()}


def _delete_topics(admin: AdminClient, names: Sequence[str], timeout_s: float) -> None:
    """Delete ``names`` and wait until two describes 0.5 s apart answer "unknown" for
    each, at most ``timeout_s`` s in all (a topic being deleted cannot be created again,
    so the next start's creation waits on this).

    Raises:
        StartError: a deletion refused (ACLs: Delete on the topic) or not done in time.
    """
    from workers.admin import describe_topic

    if not names:
        return
    deadline = time.monotonic() + timeout_s
    for name, future in admin.delete_topics(list(names),
                                            request_timeout=min(timeout_s, ADMIN_TIMEOUT_S)
                                            ).items():
        try:
            answer(future, f"deleting topic {name}", min(timeout_s, ADMIN_TIMEOUT_S))
        except KafkaException as exc:
            if unknown_topic(exc):
                continue
            raise StartError(f"could not delete topic {name}: {exc}; a reset needs Delete on "
                             "the process's changelogs (docs/runbooks.md)") from exc
    pending = list(names)
    gone_once: set[str] = set()
    while pending:
        for name in list(pending):
            if describe_topic(admin, name, timeout_s=5.0) is None:
                if name in gone_once:
                    pending.remove(name)
                gone_once.add(name)
            else:
                gone_once.discard(name)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise StartError(f"topics {pending} were still described {timeout_s:g} s after "
                             "their deletion; run the reset again once they are gone")
        time.sleep(0.5)


def _delete_group(admin: AdminClient, group: str) -> None:
    """Delete ``group`` (its committed offsets); an absent group is already deleted.

    Raises:
        StartError: a member joined meanwhile (``NON_EMPTY_GROUP``), the deletion was
            refused otherwise (ACLs: Delete on the group), or no answer came.
    """
    try:
        answer(admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group],
               f"deleting group '{group}'")
    except KafkaException as exc:
        if group_not_found(exc):
            return
        if group_not_empty(exc):
            raise StartError(f"a member joined group '{group}' during the reset, after its "
                             "changelogs were deleted: stop it and run the reset again") from exc
        raise StartError(f"could not delete group '{group}': {exc}; a reset needs Delete on "
                         "the group (docs/runbooks.md)") from exc


def _commit_positions(admin: AdminClient, group: str,
                      positions: Mapping[tuple[str, int], int]) -> None:
    """Commit ``positions`` to ``group`` with the metadata ``parsley.bootstrap``
    (AlterConsumerGroupOffsets, KIP-396), then read them back.

    Raises:
        StartError: a member joined meanwhile, the commit failed, or what is read back
            differs.
    """
    tps = [TopicPartition(t, p, o, metadata=BOOTSTRAP_METADATA)
           for (t, p), o in sorted(positions.items())]
    try:
        result = answer(admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=ADMIN_TIMEOUT_S)[group],
            f"committing the reset positions of group '{group}'")
    except KafkaException as exc:
        if member_joined(exc):
            raise StartError(f"a member joined group '{group}' during the reset, after its "
                             "changelogs were deleted: stop it and run the reset again") from exc
        raise StartError(f"could not commit the reset positions of group '{group}': "
                         f"{exc}") from exc
    errors = [tp for tp in result.topic_partitions if tp.error is not None]
    if errors:
        raise StartError(f"could not commit the reset positions of group '{group}': "
                         f"{[(e.topic, e.partition, str(e.error)) for e in errors]}")
    back = committed_positions(admin, group, [TopicPartition(t, p) for t, p in positions],
                               time.sleep)
    wrong = {k: back.get(k) for k, o in positions.items()
             if back.get(k) != (o, BOOTSTRAP_METADATA)}
    if wrong:
        raise StartError(f"group '{group}' reads back {wrong} after the reset committed "
                         f"{dict(positions)}; run the reset again")


def execute_reset(plan: ResetPlan, admin: AdminClient, *,
                  delete_timeout_s: float = DELETE_TIMEOUT_S) -> Path:
    """Carry out ``plan`` in the module's order and write its boundary record.

    Returns:
        The record's path, ``<state_dir>/resets/<app-id>-<UTC time>.json``.

    Raises:
        StartError: a deletion or the commit failed, or a member joined the group
            during the reset (the message says to run the reset again; until then the
            next start refuses ``ORDERING_STATE_LOST`` or starts at its declared positions).
        OSError: the local state or the record could not be written.
    """
    existing = [n for n, e in plan.changelogs.items() if e]
    log.info("%s: deleting %s", plan.group, existing or "no changelog (none exists)")
    _delete_topics(admin, list(plan.changelogs), delete_timeout_s)
    _delete_group(admin, plan.group)
    _commit_positions(admin, plan.group, plan.positions)
    log.info("%s: committed %s with metadata %s", plan.group,
             [f"{t}-{p}@{o}" for (t, p), o in sorted(plan.positions.items())],
             BOOTSTRAP_METADATA)
    if plan.local_state.exists():
        shutil.rmtree(plan.local_state)
    records = plan.local_state.parent / RECORDS_DIR
    records.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = dt.datetime.fromtimestamp(plan.read_at_ms / 1000, tz=dt.UTC).strftime(
        "%Y%m%dT%H%M%S.%fZ")
    path = records / f"{plan.group}-{stamp}.json"
    record = {**plan.record(), "done_at": iso_utc(int(time.time() * 1000))}
    path.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return path


def open_admin(config: ParsleyConfig) -> AdminClient:
    """A new AdminClient for the reset, after checking the cluster answers.

    Raises:
        StartError: the cluster is unreachable.
    """
    admin = new_admin(config)
    check_reachable(admin, config.bootstrap_servers)
    return admin


def default_wait_s(config: ParsleyConfig) -> float:
    """How long the reset waits for members to leave by default, s: twice the workers'
    ``session.timeout.ms``, as a start does
    (:func:`~coordinator.bootstrap.group.leave_window_s`)."""
    return leave_window_s(config.kafka_properties)
