"""The consumer group at a start: wait, bounded and saying so, for previous members to leave.

A process's workers are static members of group ``<prefix>-<process>``, and a static member
sends no LeaveGroup when it stops. So every start, and every restart through the bootstrap,
waits for the group to hold no member, up to twice the consumer ``session.timeout.ms`` the
workers run with, logging what it waits for. The bound is the Java implementation's bootstrap
join deadline: ``StreamsRuntime.commitInitialPositions`` joins with
``streamsSessionTimeout(...).multipliedBy(2)``. The window starts when the group's
coordinator first answers a describe.

A member still there then that is not this process is refused with
``SUBSTRATE_MISCONFIGURED``, member by member (docs/runbooks.md). Members that all carry this
process's own ``group.instance.id`` (``<group>-task-*``) raise :class:`StartRetryableError`
instead, counted by the restart budget. The whole rule, with its log lines:
docs/operations.md, "The consumer group at a start".
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.clients import ANSWER_MARGIN_S
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    BOOTSTRAP_CLIENT_PREFIX,
    StartError,
    StartRetryableError,
    not_authorized,
    refuse,
    with_client_logger,
)
from coordinator.config import ParsleyConfig
from parsley import refusal_shapes as shapes
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.admin import group_members as describe_members
from workers.authorization import Grant
from workers.kafka_config import DEFAULT_SESSION_TIMEOUT_MS
from workers.kafka_errors import (
    group_coordinator_busy,
    group_not_found,
    kafka_error_of,
    member_joined,
)
from workers.positions import GroupMember

__all__ = [
    "await_foreign_members_gone",
    "await_group_vacated",
    "bootstrap_consumer",
    "commit_initial_positions",
    "group_members",
    "is_own_member",
    "leave_window_s",
    "members_remain",
    "own_members_remain",
    "session_timeout_ms",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

def session_timeout_ms(kafka_properties: Mapping[str, Any]) -> int:
    """The consumer ``session.timeout.ms`` the workers run with, ms (pure).

    ``consumer.session.timeout.ms`` over ``session.timeout.ms`` over
    ``workers.kafka_config.DEFAULT_SESSION_TIMEOUT_MS``, as ``workers.kafka_config.consumer_config``
    resolves it.

    Raises:
        ValueError: a value that is not a positive integer.
    """
    raw = kafka_properties.get("consumer.session.timeout.ms",
                               kafka_properties.get("session.timeout.ms"))
    if raw is None:
        return DEFAULT_SESSION_TIMEOUT_MS
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"session.timeout.ms must be an integer number of ms, got {raw!r}") \
            from None
    if value < 1:
        raise ValueError(f"session.timeout.ms must be >= 1 ms, got {value}")
    return value


def leave_window_s(kafka_properties: Mapping[str, Any]) -> float:
    """How long a start waits for previous members to leave, s: 2 x :func:`session_timeout_ms`
    (pure; the Java implementation's bootstrap join deadline)."""
    return 2 * session_timeout_ms(kafka_properties) / 1000.0


def group_members(admin: AdminClient, group: str,
                  timeout_s: float = ADMIN_TIMEOUT_S) -> list[GroupMember] | None:
    """The members of ``group`` now; ``[]`` for an unknown group, ``None`` when its
    coordinator cannot answer yet (loading, moving, not elected:
    :func:`workers.kafka_errors.group_coordinator_busy`).

    Raises:
        NotAuthorized: the principal may not describe the group (naming Read on it, which
            a process needs: docs/operations.md, "ACLs").
        StartError: the describe failed otherwise (connectivity), or no answer came
            within the coordinator's bound (``timeout_s`` + the margin).
    """
    bound = timeout_s + ANSWER_MARGIN_S
    try:
        return describe_members(admin, group, request_timeout_s=timeout_s, answer_s=bound)
    except TimeoutError as exc:
        raise StartError(f"describing group '{group}': no answer within {bound:g} s (the "
                         "client may be wedged after a broker outage; the next attempt uses "
                         "a new one)") from exc
    except KafkaException as exc:
        if group_not_found(exc):
            return []
        if group_coordinator_busy(exc):
            return None
        refusal = not_authorized(exc, f"describing group '{group}'",
                                 Grant("Group", group, ("Read",)))
        if refusal is not None:
            raise refusal from exc
        raise StartError(f"could not describe group '{group}': {exc}; restore connectivity "
                         "or grant Describe on the group, then retry") from exc


def is_own_member(group: str, member: GroupMember) -> bool:
    """Whether ``member`` carries one of this process's worker instance ids,
    ``<group>-task-*`` (pure; the ids workers.kafka_config gives the workers)."""
    return (member.group_instance_id or "").startswith(f"{group}-task-")


def _named(group: str, remaining: Sequence[GroupMember]) -> str:
    def one(m: GroupMember) -> str:
        return m.describe() + (" (an instance id of this process's workers)"
                               if is_own_member(group, m) else "")

    return "; ".join(one(m) for m in sorted(
        remaining, key=lambda m: (m.client_id, m.group_instance_id or "", m.member_id)))


def members_remain(group: str, remaining: Sequence[GroupMember], waited_s: float,
                   session_ms: int, bootstrap_servers: str) -> ParsleyFailClosedError:
    """The ``SUBSTRATE_MISCONFIGURED`` refusal naming every member still in ``group`` (pure;
    the group-protocol conflict of docs/runbooks.md, SUBSTRATE_MISCONFIGURED), for
    ``remaining`` members of which one or more is not this process's own
    (:func:`is_own_member`); ``waited_s`` counts from the group's first answer."""
    return refuse(
        Reason.SUBSTRATE_MISCONFIGURED,
        f"{shapes.substrate_group_conflict(f'{waited_s:g} s')}: group '{group}' still holds "
        f"{len(remaining)} member(s) after {waited_s:g} s from its first answer (twice the "
        f"consumer session.timeout.ms of {session_ms} ms, after which a stopped worker of "
        f"this process has left), not all of them this process's: "
        f"[{_named(group, remaining)}]. A consumer configured with the application id "
        "as its group.id never leaves. List them (kafka-consumer-groups --bootstrap-server "
        f"{bootstrap_servers} --describe --group {group} --members), stop the foreign "
        "consumer, then restart (runbook: SUBSTRATE_MISCONFIGURED, a member that is not "
        "this process).",
    )


def own_members_remain(group: str, remaining: Sequence[GroupMember], waited_s: float,
                       session_ms: int, bootstrap_servers: str) -> StartRetryableError:
    """The retryable start error for ``remaining`` members that all carry this process's
    own instance ids (pure; docs/operations.md, "The consumer group at a start").

    Which run they belong to is not known: a previous worker whose session outlives
    the window leaves by itself, so the start is retried (under the restart budget).
    """
    return StartRetryableError(
        f"group '{group}' still holds {len(remaining)} member(s) with this process's own "
        f"group.instance.id after {waited_s:g} s from its first answer (twice the consumer "
        f"session.timeout.ms of {session_ms} ms): [{_named(group, remaining)}]. A previous "
        "worker whose session outlived the wait (a session.timeout.ms lowered since it ran) "
        "leaves by itself; if they stay, a worker of this process runs elsewhere: list them "
        f"(kafka-consumer-groups --bootstrap-server {bootstrap_servers} --describe --group "
        f"{group} --members) and stop the run they belong to"
    )


def await_group_vacated(
    admin: AdminClient,
    group: str,
    window_s: float,
    *,
    session_ms: int,
    bootstrap_servers: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 0.5,
) -> float:
    """Wait until ``group`` holds no member, at most ``window_s`` s from the group's first
    answer (and at most ``window_s`` s for that answer), logging the wait.

    Logs once "waiting up to N s for the previous members of group G to leave:
    [...]" when members are present, and how long they took to leave.

    Args:
        admin: an AdminClient (this attempt's own).
        group: the consumer group, ``<prefix>-<process>``.
        window_s: the bound, s (:func:`leave_window_s`).
        session_ms: the workers' session timeout, ms (named in the refusal).
        bootstrap_servers: named in the refusal's command.
        sleep: sleeps (tests pass a fake).
        clock: monotonic seconds (tests pass a fake).
        poll_s: s between describes.

    Returns:
        s waited (0 when the group was empty at once).

    Raises:
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` (:func:`members_remain`)
            when members remain after ``window_s``, not all of them this process's.
        StartRetryableError: (:func:`own_members_remain`) when the members that
            remain all carry this process's own instance ids.
        StartError: the group could not be described, or its coordinator did
            not answer within ``window_s``.
    """
    def refusal(remaining: Sequence[GroupMember]) -> Exception:
        if all(is_own_member(group, m) for m in remaining):
            return own_members_remain(group, remaining, window_s, session_ms, bootstrap_servers)
        return members_remain(group, remaining, window_s, session_ms, bootstrap_servers)

    return _await_gone(admin, group, window_s, waiting=list, refusal=refusal,
                       what="the previous members of group {group}",
                       gone="the previous members", sleep=sleep, clock=clock, poll_s=poll_s)


def await_foreign_members_gone(
    admin: AdminClient,
    group: str,
    window_s: float,
    *,
    session_ms: int,
    bootstrap_servers: str,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 0.5,
) -> float:
    """The group check of a ``--join`` start: wait until every member of ``group`` carries
    one of this process's own instance ids (:func:`is_own_member`), at most ``window_s`` s
    from the group's first answer (docs/operations.md, "Several coordinators").

    The workers of peer coordinators are such members and stay; the previous member of a
    task this coordinator gained need not leave (the new worker's static join replaces
    it). Any other member (another ``group.instance.id``, or a dynamic member) must leave.

    Returns:
        s waited.

    Raises:
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` (:func:`members_remain`) when a
            foreign member is still there after ``window_s``.
        StartError: the group could not be described, or its coordinator did not answer
            within ``window_s``.
    """
    return _await_gone(
        admin, group, window_s,
        waiting=lambda present: [m for m in present if not is_own_member(group, m)],
        refusal=lambda foreign: members_remain(group, foreign, window_s, session_ms,
                                               bootstrap_servers),
        what="members of group {group} that are not this process's workers",
        gone="the foreign members", sleep=sleep, clock=clock, poll_s=poll_s)


def _await_gone(
    admin: AdminClient,
    group: str,
    window_s: float,
    *,
    waiting: Callable[[list[GroupMember]], list[GroupMember]],
    refusal: Callable[[list[GroupMember]], Exception],
    what: str,
    gone: str,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
    poll_s: float,
) -> float:
    """Poll ``group`` until ``waiting(members)`` is empty, at most ``window_s`` s from the
    group's first answer (and at most ``window_s`` s for that answer); returns s waited.

    ``what`` (with ``{group}``) names the awaited members in the one warning logged per
    change of them, ``gone`` in the info line when they left. Past the bound it raises
    ``refusal(awaited members)``, or :class:`StartError` when the group never answered.
    """
    start = clock()
    deadline = start + window_s  # until the group first answers: bounds the loading wait
    answered = False
    announced: tuple[str, ...] | None = None
    while True:
        present = group_members(admin, group)
        now = clock()
        awaited = None if present is None else waiting(present)
        if awaited == []:
            if announced is not None:
                log.info("%s: %s left after %.1f s", group, gone, now - start)
            return now - start
        if awaited is not None:
            if not answered:
                answered, deadline = True, now + window_s
            names = tuple(sorted(m.describe() for m in awaited))
            if announced != names:
                log.warning("waiting up to %.0f s for %s to leave: [%s]",
                            max(0.0, deadline - now), what.format(group=group),
                            "; ".join(names))
                announced = names
        if now >= deadline:
            if awaited is None:
                raise StartError(f"the coordinator of group '{group}' did not answer a "
                                 f"describe within {window_s:g} s; retry")
            raise refusal(awaited)
        sleep(min(poll_s, max(0.05, deadline - now)))


def bootstrap_consumer(config: ParsleyConfig, group: str,
                       on_commit: Callable[[KafkaError | None, list[TopicPartition]], None]
                       | None = None) -> Consumer:
    """The consumer that commits the bootstrap's initial positions to ``group``.

    It never subscribes, so it never joins: its commit (generation -1) is
    accepted only while the group is empty. ``on_commit`` receives commit results
    (served by ``poll``).
    """
    # workers.kafka_config has no public name for its client-prefix rules; the private one is
    # imported so the bootstrap consumer reads user properties exactly as workers do.
    from workers.kafka_config import _select

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
    if on_commit is not None:
        props["on_commit"] = on_commit
    return Consumer(with_client_logger(props))


def commit_initial_positions(config: ParsleyConfig, group: str,
                             offsets: Sequence[TopicPartition],
                             timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Commit ``offsets`` (metadata set by the caller) to ``group`` from a new bootstrap
    consumer, waiting for the answer at most ``timeout_s`` s (the coordinator's bound,
    not the client's), then close the consumer.

    Raises:
        StartRetryableError: a member joined the group meanwhile
            (``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``, ``REBALANCE_IN_PROGRESS``).
        StartError: the commit failed otherwise, or got no answer within ``timeout_s``.
    """
    results: list[tuple[KafkaError | None, list[TopicPartition]]] = []
    consumer = bootstrap_consumer(config, group,
                                  on_commit=lambda err, tps: results.append((err, tps)))
    try:
        consumer.commit(offsets=list(offsets), asynchronous=True)
        deadline = time.monotonic() + timeout_s
        while not results:
            if time.monotonic() >= deadline:
                raise StartError(f"committing the initial positions of group '{group}': no "
                                 f"answer within {timeout_s:g} s; retry")
            consumer.poll(0.1)
    except KafkaException as exc:
        refusal = _commit_refusal(exc, group, [])
        if refusal is not None:
            raise refusal from exc
        raise StartError(f"could not commit the initial positions of group '{group}': "
                         f"{exc}") from exc
    finally:
        consumer.close()
    err, tps = results[0]
    errors = [e for e in [err, *(tp.error for tp in tps)] if e is not None]
    if not errors:
        return
    if any(member_joined(e) for e in errors):
        raise StartRetryableError(f"a member joined group '{group}' while the start committed "
                                  f"its initial positions ({errors[0].name()})")
    refusal = _commit_refusal(errors[0], group, [tp for tp in tps if tp.error is not None])
    if refusal is not None:
        raise refusal
    raise StartError(f"could not commit the initial positions of group '{group}': "
                     f"{errors[0]}")


def _commit_refusal(err: Any, group: str, failed: Sequence[TopicPartition]) -> Any:
    """The refusal for an offset commit the ACLs refused: Read on the group, or Read on the
    topic of the partitions it failed for (an offset commit needs both); else None."""
    code = getattr(kafka_error_of(err), "code", lambda: None)()
    topics = tuple(sorted({tp.topic for tp in failed}))
    grant = Grant("Group", group, ("Read",)) if code != KafkaError.TOPIC_AUTHORIZATION_FAILED \
        else Grant("Topic", topics[0] if len(topics) == 1 else None, ("Read",))
    return not_authorized(err, f"committing the initial positions of group '{group}'", grant,
                          topics if len(topics) > 1 else ())
