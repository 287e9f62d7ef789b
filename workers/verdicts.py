"""How a worker ends: the :class:`Stop` verdict, and whether a fenced worker was replaced.

:func:`stop_of` classifies whatever ended the loop (never from message text). A fence
(``_FENCED``, or the static consumer member fenced) is then weighed by :func:`timed_out`:
a live successor holding the task's ``group.instance.id`` makes it FATAL (another worker
owns the task, so this one is not restarted); with none, the broker's own abort of an old
transaction, or its re-registering of the member after a restart, makes it SUBSTRATE (a
restart resolves it). docs/operations.md, "Fenced: a successor or a timeout".
"""

from __future__ import annotations

import logging
import time
from typing import Final, Protocol, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from parsley.frame import HandlerFailure
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.admin import group_view, lacking_topic
from workers.authorization import NotAuthorized, principal_of
from workers.calls import CallStalled, awaiting, pause
from workers.kafka_config import DEFAULT_SESSION_TIMEOUT_MS, TRANSACTION_TIMEOUT_MS
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    classify,
    kafka_error_of,
    stop_kind,
    to_exception,
)
from workers.protocol import StopKind
from workers.task_timeout import TaskTimedOut
from workers.transaction import TaskTransaction

__all__ = ["RECOVERABLE", "SUCCESSOR_WAIT_S", "Stop", "abort_and_log", "ending",
           "in_place_verdict", "live_successor", "names_nothing", "stop_of", "successor_stop",
           "timed_out", "unmasked"]

log = logging.getLogger("parsley.worker")

E = TypeVar("E", bound=BaseException)

SUCCESSOR_WAIT_S: Final = 2 * DEFAULT_SESSION_TIMEOUT_MS / 1000.0
"""How long a worker fenced after a long transaction looks for a successor in the group, s:
a successor joins after its ``init_transactions`` and its restore."""


class Stop(Exception):
    """How the worker ends: a stop kind, a refusal reason, a detail."""

    def __init__(self, kind: StopKind, reason: Reason | None, detail: str | None) -> None:
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.reason = reason
        self.detail = detail


def stop_of(exc: BaseException) -> Stop:
    """Classify an exception into the worker's :class:`Stop` (never from message text).

    ``ParsleyFailClosedError`` (anywhere on the cause chain) -> REFUSAL with its
    reason; ``HandlerFailure`` -> APPLICATION; ``SubstrateError``/``KafkaException``
    -> FATAL (fenced or fatal) or SUBSTRATE, or REFUSAL for a Kafka error that is one (an
    ACL's, a record over a size limit: :func:`workers.kafka_errors.to_exception`); any
    other exception (:func:`names_nothing`) is a worker bug, reported FATAL so that it is
    never restarted blindly.
    """
    if isinstance(exc, Stop):
        return exc
    if names_nothing(exc):
        return Stop(StopKind.FATAL, None, f"worker error {type(exc).__name__}: {exc}")
    refusal = ParsleyFailClosedError.find_in(exc)
    if refusal is not None:
        return Stop(StopKind.REFUSAL, refusal.reason, refusal.detail)
    if isinstance(exc, HandlerFailure):
        return Stop(StopKind.APPLICATION, None, str(exc))
    if not isinstance(exc, SubstrateError) and kafka_error_of(exc) is not None:
        # A KafkaException, or an exception carrying one on its cause chain: confluent-kafka
        # raises SystemError "<callback> returned a result with an exception set" from a
        # flush whose delivery callback ran while the client's own error (e.g. _FENCED) was
        # pending; the Kafka error beneath it is what happened.
        exc = to_exception(kafka_error_of(exc) or exc)
    if isinstance(exc, ParsleyFailClosedError):  # a Kafka error that is a refusal
        return Stop(StopKind.REFUSAL, exc.reason, exc.detail)
    assert isinstance(exc, SubstrateError)  # names_nothing: every other case returned
    return Stop(stop_kind(exc) or StopKind.SUBSTRATE, None, exc.detail)


def names_nothing(exc: BaseException) -> bool:
    """Whether ``exc`` is what :func:`stop_of` calls a worker error (pure): not itself a
    :class:`Stop`, an application failure or a :class:`SubstrateError`, with no refusal on
    its chain (:meth:`ParsleyFailClosedError.find_in`) and no Kafka error on its causes
    (:func:`workers.kafka_errors.kafka_error_of`)."""
    return not isinstance(exc, Stop | HandlerFailure | SubstrateError) \
        and ParsleyFailClosedError.find_in(exc) is None and kafka_error_of(exc) is None


def unmasked(exc: E, worker: Fenced | None) -> E | ParsleyFailClosedError | SubstrateError:
    """``exc``, or the fatal error the task's producer holds when ``exc`` names nothing
    (:func:`names_nothing`): confluent-kafka can raise a producer's fatal error as another
    exception, and a fence judged a worker bug would stop a process whose task only moved
    (docs/architecture.md, "Recovery in place"). The held error
    (:meth:`workers.transaction.TaskTransaction.fatal_error`) is judged instead, ``exc``
    its context; with none, or no worker, ``exc`` is a worker bug as it was.
    """
    if worker is None or not names_nothing(exc):
        return exc
    try:
        held = worker.txn.fatal_error()
    except Exception:  # the verdict must still be reached: asking failed, nothing traded
        log.debug("asking the producer for its fatal error failed", exc_info=True)
        return exc
    if held is None:
        return exc
    held.__context__ = exc
    log.warning("%s task %d: met %s: %s; the producer holds a fatal error, judged "
                "instead: %s", worker.app_id, worker.task, type(exc).__name__, exc, held,
                exc_info=exc)
    return held


class Fenced(Protocol):
    """What the fence verdicts read of a worker (:class:`workers.main.Worker`)."""

    app_id: str
    task: int
    member_fenced: bool
    txn: TaskTransaction

    def successor_member(self, wait_s: float) -> str | None: ...


def live_successor(admin: AdminClient, group: str, instance: str, mine: str | None,
                   session_s: float, wait_s: float) -> str | None:
    """Another live member of ``group`` with ``group.instance.id`` ``instance``, if any.

    Asks the group every 0.5 s; each ask is bounded (``describe_consumer_groups``,
    :func:`workers.calls.awaiting`). A member counts as live once it is still listed twice
    its session timeout plus 1 s after it was first listed with the group ``Stable``, every
    answer in between from one group coordinator. A member that has been in a Stable group
    and that nobody heart-beats is removed within its session timeout of the coordinator
    loading it, and a successor heart-beats; the second session timeout is the margin for a
    broker on a loaded machine whose timers fire late (one removed 1.5 s late was once
    taken for live). The count starts again when another coordinator answers, or when an
    ask fails (a coordinator loading the group answers ``COORDINATOR_LOAD_IN_PROGRESS``):
    a coordinator that loads the group lists its static members again with a fresh session
    timeout, heart-beaten or not. Before the group is Stable a member may be held by a
    rebalance alone: the broker keeps a member whose ``JoinGroup`` is pending (or, as
    leader, whose ``SyncGroup`` is awaited) up to its rebalance timeout even when no client
    holds it (:class:`workers.admin.GroupView`). Such a member is never counted: one this
    worker's own consumer left (``mine``), or one that a ``JoinGroup`` of its own
    registered when the broker fenced it after a group coordinator's failover ("Static
    consumer fenced by other consumer with same group.instance.id"; docs/operations.md,
    "Fenced: a successor or a timeout").

    Args:
        wait_s: how long to look for a candidate, s (a candidate found late is
            still given its time to prove live).

    Returns:
        That member's id, or ``None`` when none proved live: none was listed within
        ``wait_s``; or, once ``wait_s`` has passed, the session timeout plus 5 s has
        passed since the first was listed, and the proof's time plus 1 s both since any
        was first listed in a Stable group and since the count last started again; and
        always by ``wait_s`` plus twice the proof's time plus 7 s (members listed under
        new ids, again and again, end the look too; so does a count started again and
        again).
    """
    proof_s = 2 * session_s + 1.0
    began = time.monotonic()
    deadline = began + wait_s
    hard_end = deadline + 2 * proof_s + 7.0
    seen: dict[str, float] = {}  # first listed, in any state
    stable: dict[str, float] = {}  # first listed with the group Stable, on `coordinator`
    coordinator: int | None = None
    answered = False  # any answer yet (`coordinator` may be None in one)
    counting = began  # when the count last (re)started
    while True:
        # An answer shows the group at some moment of its ask: a listing counts from when
        # its answer came (`now`) and is still there no earlier than its ask began
        # (`asked`), so an ask's own time never shortens the proof.
        asked = time.monotonic()
        try:
            with awaiting("describe_consumer_groups"):
                view = group_view(admin, group, answer_s=5)
            now = time.monotonic()
            present = {m.member_id for m in view.members
                       if m.group_instance_id == instance and m.member_id != mine}
            seen = {m: seen.get(m, now) for m in present}
            if answered and view.coordinator != coordinator:
                counting, stable = now, {}
            coordinator, answered = view.coordinator, True
            stable = {m: t for m, t in stable.items() if m in present}
            if view.stable:
                stable = {m: stable.get(m, now) for m in present}
            for member, since in stable.items():
                if asked - since >= proof_s:
                    return member
        except (KafkaException, TimeoutError, CallStalled) as exc:
            log.debug("describing group %s: %s", group, exc)
            now = time.monotonic()
            if seen:
                counting = now  # perhaps a coordinator loading the group: count again
            stable = {}
        if now >= hard_end or (now >= deadline and not seen):
            return None
        if seen:
            end = max(deadline, min(seen.values()) + session_s + 5.0,
                      min(stable.values(), default=0.0) + proof_s + 1.0,
                      counting + proof_s + 1.0)
            if now >= end:
                return None
        pause(0.5)  # the status keeps coming: the look can outlast stale_task_ms


def timed_out(outcome: Stop, worker: Fenced, fenced: bool = False) -> Stop:
    """A fenced producer: its own transaction timed out (SUBSTRATE), or a successor (FATAL).

    The broker aborts a transaction open past ``transaction.timeout.ms`` and bumps the
    producer epoch, and the client then reports ``_FENCED`` exactly as for a newer
    worker of the task (librdkafka folds the broker's fencing errors into one code).
    The open transaction's age alone cannot tell them apart: a live successor may
    fence a worker whose transaction is old too, and calling that restartable would
    let two owners of a task fence each other in a restart loop. The rule, step by
    step: docs/architecture.md, "The worker", "Stop verdicts".
    """
    if worker.member_fenced:
        return _member_fenced(outcome, worker)
    txn = worker.txn
    age_s = time.monotonic() - txn.opened_at if txn.open else 0.0
    if age_s * 1000 <= TRANSACTION_TIMEOUT_MS:
        return (successor_stop(outcome, worker, "") if fenced else None) or outcome
    fatal = successor_stop(outcome, worker, f" (the transaction was open {age_s:.1f} s)")
    if fatal is not None:
        return fatal
    return Stop(
        StopKind.SUBSTRATE, None,
        f"the task's transaction was open {age_s:.1f} s, past transaction.timeout.ms="
        f"{TRANSACTION_TIMEOUT_MS}, and the broker aborted it (a stalled handler or loop); "
        f"no other member holds the task's group.instance.id; nothing of it was committed; "
        f"restart: {outcome.detail}")


def successor_stop(outcome: Stop, worker: Fenced, context: str) -> Stop | None:
    """FATAL naming the live successor that holds this task's ``group.instance.id``
    (asked for up to :data:`SUCCESSOR_WAIT_S`), or ``None`` when there is none.

    A successor fences a static member by joining with its ``group.instance.id``
    (KIP-345); another worker then owns the task, so this one is not restarted.
    ``context`` is added after the id (e.g. the transaction's age).
    """
    successor = worker.successor_member(SUCCESSOR_WAIT_S)
    if successor is None:
        return None
    return Stop(
        StopKind.FATAL, None,
        f"fenced by a live successor: member {successor} of group {worker.app_id} holds "
        f"this task's group.instance.id{context}; another worker owns the task, so this "
        f"one is not restarted: {outcome.detail}")


def _member_fenced(outcome: Stop, worker: Fenced) -> Stop:
    """The task's static consumer member was fenced: by a successor (FATAL) or by the
    broker itself (SUBSTRATE).

    A successor fences a static member by joining with its ``group.instance.id``
    (KIP-345), so it is then a live member of the group. After a broker restart the
    broker was also seen to fence a worker's own member with no other worker running
    ("Static consumer fenced by other consumer with same group.instance.id"): when no
    other live member holds the id within :data:`SUCCESSOR_WAIT_S`, a restart resolves
    it (docs/operations.md, "Fenced: a successor or a timeout").
    """
    fatal = successor_stop(outcome, worker, "")
    if fatal is not None:
        return fatal
    return Stop(
        StopKind.SUBSTRATE, None,
        f"the task's static group member was fenced, but no other live member holds its "
        f"group.instance.id (the broker re-registered it, as after a broker restart); "
        f"nothing more was committed; restart: {outcome.detail}")


RECOVERABLE: Final = frozenset({ErrorKind.RETRIABLE, ErrorKind.ABORTABLE,
                                ErrorKind.SUBSTRATE_TRANSIENT})
"""Error kinds a worker recovers from in place, within its task timeout."""


def in_place_verdict(exc: BaseException, worker: Fenced) -> Stop | None:
    """``None`` when ``exc`` is a fault the worker recovers from in place; else the stop it
    ends the worker with (docs/operations.md, "The task timeout").

    ``exc`` is the fault as :func:`unmasked` judged it (``Worker._recover`` asks first, so
    that its log lines name the same). :func:`stop_of` first, so that a :class:`Stop`, a
    refusal, an application failure (whatever Kafka error its cause chain holds) and a
    worker bug stop as they are; then a substrate error is recovered when its kind is in
    :data:`RECOVERABLE` (never
    ``OFFSET_RESET`` or ``RESTART_REQUIRED``); a fence or a fatal client is recovered
    unless a live successor holds the task's ``group.instance.id``
    (:func:`successor_stop`), whatever the transaction's age: a late ``InitProducerId`` of
    an abandoned client fences the fresh one as a successor's would.
    """
    if isinstance(exc, TaskTimedOut):
        return Stop(StopKind.SUBSTRATE, None, exc.detail)  # the recovery's own end
    verdict = stop_of(exc)
    if verdict.kind is StopKind.SUBSTRATE:
        return None if classify(exc).kind in RECOVERABLE else verdict
    if verdict.kind is StopKind.FATAL and classify(exc).kind in (ErrorKind.FENCED,
                                                                 ErrorKind.FATAL):
        return successor_stop(verdict, worker, "")
    return verdict


def ending(exc: BaseException, worker: Fenced | None) -> Stop:
    """The verdict on what ended a worker: :func:`stop_of`, a FATAL one weighed by
    :func:`timed_out` when there is a worker to ask (``None``: it was never built), and a
    refusal of the cluster's ACLs completed with the task's names (:func:`not_authorized`).
    ``exc`` is what ended it as :func:`unmasked` judged it (the worker's ``run`` asks first,
    so that :func:`abort_and_log` logs the same)."""
    if isinstance(exc, Stop):
        return exc  # already weighed (the worker's own verdict, or a clean stop)
    outcome = stop_of(exc)
    if outcome.kind is StopKind.FATAL and worker is not None:
        outcome = timed_out(outcome, worker, fenced=classify(exc).kind is ErrorKind.FENCED)
    refusal = ParsleyFailClosedError.find_in(exc)
    if refusal is None and kafka_error_of(exc) is not None:  # a raw Kafka error's refusal
        found = to_exception(kafka_error_of(exc) or exc)
        refusal = found if isinstance(found, ParsleyFailClosedError) else None
    if outcome.kind is StopKind.REFUSAL and isinstance(refusal, NotAuthorized) \
            and worker is not None:
        outcome = Stop(StopKind.REFUSAL, refusal.reason, not_authorized(refusal, worker).detail)
    return outcome


def not_authorized(refusal: NotAuthorized, worker: Fenced) -> NotAuthorized:
    """``refusal`` completed with what the worker knows: its application id (the group, the
    transactional ids), its principal (``sasl.username``) and servers, and, for a failed
    transaction's topics, the one its principal may not write (``describe_topics`` with
    the authorized operations, bounded; a topic it may not even describe counts too)."""
    spec = getattr(worker, "spec", None)
    props = getattr(spec, "kafka_properties", None)
    name = None
    if refusal.grant.name is None and len(refusal.candidates) > 1:
        admin = getattr(getattr(worker, "clients", None), "admin", None)
        if admin is not None:
            name = lacking_topic(admin, refusal.candidates, refusal.grant.operations)
    return refusal.completed(worker.app_id, principal_of(props),
                             getattr(spec, "bootstrap_servers", None), name)


def abort_and_log(outcome: Stop, exc: BaseException, worker: Fenced | None, app_id: str,
                  task: int) -> None:
    """After any but a clean stop: abort the worker's open transaction (best effort) and log
    the stop at ERROR, a refusal as ``<app-id> task <i> stopped: <REASON>: <detail> (failing
    closed)``; the traceback only for an exception no verdict names."""
    if outcome.kind is StopKind.CLEAN:
        return
    if worker is not None:
        try:
            worker.txn.abort()
        except Exception:
            log.debug("abort after the stop failed", exc_info=True)
    if outcome.kind is StopKind.REFUSAL:
        assert outcome.reason is not None
        log.error("%s task %d stopped: %s: %s (failing closed)", app_id, task,
                  outcome.reason.name, outcome.detail)
    else:
        log.error("%s task %d stopped (%s): %s", app_id, task, outcome.kind.value,
                  outcome.detail,
                  exc_info=not isinstance(exc, Stop | SubstrateError | HandlerFailure))
