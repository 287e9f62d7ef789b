"""The one KafkaError classifier of the worker and the coordinator's bootstrap.

Every ``KafkaError``/``KafkaException`` is classified here and nowhere else: :func:`fatal`,
:func:`retriable`, :func:`txn_requires_abort`, :func:`classify`, the named predicates for
callers that branch on a code (:func:`offset_reset`, :func:`partition_eof`, ...), and
:func:`to_exception` / :func:`map_kafka_errors`, which re-raise ``from`` the original error
as a :class:`~parsley.refusals.ParsleyFailClosedError` (the two substrate refusals) or a
:class:`SubstrateError` carrying an :class:`ErrorKind`. Client configurations live in
:mod:`workers.kafka_config`; the offset-reset judgement in :mod:`workers.offsets`.

Verified on a real broker (``tests/integration/test_worker_kafka.py``): a record over a
size limit surfaces as ``MSG_SIZE_TOO_LARGE`` (10), from ``produce()`` or as the
transaction's abortable error; under ``auto.offset.reset=error`` a fetch below the log
start and a partition with no committed offset both report ``_AUTO_OFFSET_RESET`` (-140),
told apart by :func:`workers.offsets.offset_reset_verdict`; after aborting a transaction in
which a produce failed, the next commit failed once with ``OUT_OF_ORDER_SEQUENCE_NUMBER``
flagged abortable (an abortable error may recur once after such an abort).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

from parsley import refusal_shapes as shapes
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.authorization import AUTHORIZATION_CODES, Grant, NotAuthorized, default_grant
from workers.protocol import StopKind

__all__ = [
    "AUTHORIZATION_CODES",
    "PURGE_CODES",
    "RECORD_TOO_LARGE_CODES",
    "UNKNOWN_TOPIC_CODES",
    "UNREACHABLE_CODES",
    "Classification",
    "ErrorKind",
    "SubstrateError",
    "TransientSubstrateError",
    "authorization_failed",
    "classify",
    "fatal",
    "group_coordinator_busy",
    "group_not_empty",
    "group_not_found",
    "invalid_argument",
    "kafka_error_of",
    "map_kafka_errors",
    "member_joined",
    "offset_reset",
    "partition_eof",
    "purged",
    "retriable",
    "stop_kind",
    "to_exception",
    "topic_already_exists",
    "topic_authorization_failed",
    "topic_missing_or_unreadable",
    "txn_requires_abort",
    "unknown_topic",
    "unreachable",
    "unstable_offsets",
]

RECORD_TOO_LARGE_CODES: Final = frozenset(
    {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}
)
"""Codes of "a record exceeded a size limit": ``MSG_SIZE_TOO_LARGE`` (10: the
broker's ``MESSAGE_TOO_LARGE``/Java's ``RecordTooLargeException``, and
librdkafka's own check against ``message.max.bytes``) and
``RECORD_LIST_TOO_LARGE`` (18)."""

_OFFSET_RESET_CODES: Final = frozenset(
    {KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE}
)
_FENCED_CODES: Final = frozenset(
    {
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
        KafkaError.FENCED_INSTANCE_ID,
    }
)


class ErrorKind(enum.Enum):
    """What the worker does about an error (one answer per error, decided here).

    The stop kinds the coordinator sees follow from it: ``REFUSAL`` is a
    refusal (with a reason); ``FENCED``, ``FATAL`` and ``SUBSTRATE_TRANSIENT``
    are substrate failures; ``UNCLASSIFIED`` is not Kafka's, and the layer
    that raised it (the handler frame: an application failure) decides.
    """

    REFUSAL = "refusal"
    """A substrate refusal (``SUBSTRATE_MISCONFIGURED``: a record over a size limit, a
    call the cluster's ACLs refused; ``POSITIONS_DISCARDED_UNREAD``) or any
    ``ParsleyFailClosedError``: abort the open transaction and stop, failing closed."""
    OFFSET_RESET = "offset_reset"
    """The consumer refused to reset a position (``auto.offset.reset=error``).
    Not decidable from the error: call :func:`resolve_offset_reset`, which
    yields ``POSITIONS_DISCARDED_UNREAD`` or a missing committed offset."""
    RETRIABLE = "retriable"
    """The same call may be retried as it is (``KafkaError.retriable()``)."""
    ABORTABLE = "abortable"
    """Abort the transaction, rebuild state from the changelogs, rewind to
    the committed offsets and go on (``txn_requires_abort()``)."""
    FENCED = "fenced"
    """The producer epoch or the static member was fenced: a stop when a live successor
    holds the task's ``group.instance.id`` (another worker owns the task), else recovered
    in place (docs/operations.md, "Fenced: a successor or a timeout")."""
    FATAL = "fatal"
    """The client is unusable (``KafkaError.fatal()``): stop with a failure detail."""
    SUBSTRATE_TRANSIENT = "substrate_transient"
    """Any other broker, timeout, topic or partition condition: the worker recovers in
    place (fresh clients, state rebuilt, positions rewound) until its task timeout, then
    stops with no reason (docs/operations.md, "The task timeout"; docs/runbooks.md, "The
    cluster was unreachable")."""
    RESTART_REQUIRED = "restart_required"
    """A condition only a restart through the bootstrap resolves (a received topic
    re-resolved, a missing start position pre-committed): stop with no reason, never
    recovered in place."""
    UNCLASSIFIED = "unclassified"
    """Not a Kafka error and not a refusal."""


@dataclass(frozen=True, slots=True)
class Classification:
    """The verdict on one error.

    Attributes:
        kind: what to do (:class:`ErrorKind`).
        reason: the refusal reason when ``kind`` is ``REFUSAL``, else ``None``.
        code: the ``KafkaError`` code, or ``None`` when not a Kafka error.
        name: the code's name (``"MSG_SIZE_TOO_LARGE"``) or the exception type.
        text: the error's own text.
    """

    kind: ErrorKind
    reason: Reason | None
    code: int | None
    name: str
    text: str


class SubstrateError(Exception):
    """A classified Kafka failure that is not a refusal.

    Raised ``from`` the original ``KafkaException`` by :func:`to_exception`
    and :func:`map_kafka_errors`, and directly for substrate conditions the
    worker detects itself (a changelog read that stalls).

    Attributes:
        kind: an :class:`ErrorKind` other than ``REFUSAL``.
        detail: what was seen, where, and the error's own text.
        code: the ``KafkaError`` code, or ``None``.
    """

    def __init__(self, kind: ErrorKind, detail: str, code: int | None = None) -> None:
        if kind is ErrorKind.REFUSAL:
            raise ValueError("a refusal is a ParsleyFailClosedError, not a SubstrateError")
        super().__init__(f"{kind.value}: {detail}")
        self.kind = kind
        self.detail = detail
        self.code = code

    def __reduce__(self) -> tuple[type[SubstrateError], tuple[ErrorKind, str, int | None]]:
        return (type(self), (self.kind, self.detail, self.code))


class TransientSubstrateError(SubstrateError):
    """A ``SUBSTRATE_TRANSIENT`` condition the worker detects itself, given by its detail
    alone (:class:`workers.task_timeout.TaskTimedOut`, :class:`workers.join_watch.JoinStalled`)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorKind.SUBSTRATE_TRANSIENT, detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))


def kafka_error_of(exc_or_err: BaseException | KafkaError | None) -> KafkaError | None:
    """The ``KafkaError`` inside ``exc_or_err`` (itself, a ``KafkaException``'s
    first argument, or one found along the ``__cause__`` chain), or ``None``."""
    seen = 0
    cur: object = exc_or_err
    while cur is not None and seen < 64:
        if isinstance(cur, KafkaError):
            return cur
        if isinstance(cur, KafkaException) and cur.args and isinstance(cur.args[0], KafkaError):
            return cur.args[0]
        if not isinstance(cur, BaseException):
            return None
        cur = cur.__cause__
        seen += 1
    return None


def fatal(exc_or_err: BaseException | KafkaError) -> bool:
    """True when the client that raised it is unusable (librdkafka fatal error)."""
    err = kafka_error_of(exc_or_err)
    return err is not None and bool(err.fatal())


def retriable(exc_or_err: BaseException | KafkaError) -> bool:
    """True when the failed call may be retried as it is (librdkafka's flag)."""
    err = kafka_error_of(exc_or_err)
    return err is not None and bool(err.retriable())


def txn_requires_abort(exc_or_err: BaseException | KafkaError) -> bool:
    """True when the open transaction must be aborted (and may then be retried)."""
    err = kafka_error_of(exc_or_err)
    return err is not None and bool(err.txn_requires_abort())


def classify(exc_or_err: BaseException | KafkaError) -> Classification:
    """Classify an error, in this order (the first match wins):

    1. a ``ParsleyFailClosedError`` (anywhere on the cause chain) → ``REFUSAL``
       with its reason;
    2. a :class:`SubstrateError` → its own kind;
    3. a record over a size limit (:data:`RECORD_TOO_LARGE_CODES`), or a call the
       cluster's ACLs refused (:data:`AUTHORIZATION_CODES`) →
       ``REFUSAL``/``SUBSTRATE_MISCONFIGURED`` — checked before the abortable, fatal
       and retriable flags because an oversize produce or a partition the principal
       may not write surfaces as the transaction's abortable error, and aborting and
       retrying (or recovering in place) would meet it again (docs/failing-closed.md,
       "Diagnosis": "the two stops ... that recur identically");
    4. ``_AUTO_OFFSET_RESET``/``OFFSET_OUT_OF_RANGE`` → ``OFFSET_RESET``;
    5. fenced codes (``_FENCED``, ``PRODUCER_FENCED``,
       ``INVALID_PRODUCER_EPOCH``, ``FENCED_INSTANCE_ID``) → ``FENCED``;
    6. ``fatal()``, or the code ``_FATAL`` whatever its flag → ``FATAL``: a
       static member replaced by a newer worker for the task reaches the
       consumer as a ``_FATAL`` event ("Static consumer fenced by other
       consumer with same group.instance.id") whose own ``fatal()`` is false
       (the client's fatal state is set, the event announcing it is not
       flagged); the consumer is unusable either way;
       7. ``txn_requires_abort()`` → ``ABORTABLE``;
       8. ``retriable()`` → ``RETRIABLE``;
    9. any other Kafka error → ``SUBSTRATE_TRANSIENT``;
    10. anything else → ``UNCLASSIFIED``.

    Args:
        exc_or_err: a ``KafkaError``, a ``KafkaException``, or any exception.
    """
    if isinstance(exc_or_err, BaseException):
        refusal = ParsleyFailClosedError.find_in(exc_or_err)
        if refusal is not None:
            return Classification(
                ErrorKind.REFUSAL, refusal.reason, None, refusal.reason.name, refusal.detail
            )
        if isinstance(exc_or_err, SubstrateError):
            return Classification(
                exc_or_err.kind, None, exc_or_err.code, exc_or_err.kind.name, exc_or_err.detail
            )
    err = kafka_error_of(exc_or_err)
    if err is None:
        return Classification(
            ErrorKind.UNCLASSIFIED, None, None, type(exc_or_err).__name__, str(exc_or_err)
        )
    code = err.code()
    name, text = str(err.name()), str(err.str())
    if code in RECORD_TOO_LARGE_CODES or code in AUTHORIZATION_CODES:
        return Classification(
            ErrorKind.REFUSAL, Reason.SUBSTRATE_MISCONFIGURED, code, name, text
        )
    if code in _OFFSET_RESET_CODES:
        kind = ErrorKind.OFFSET_RESET
    elif code in _FENCED_CODES:
        kind = ErrorKind.FENCED
    elif err.fatal() or code == KafkaError._FATAL:
        kind = ErrorKind.FATAL
    elif err.txn_requires_abort():
        kind = ErrorKind.ABORTABLE
    elif err.retriable():
        kind = ErrorKind.RETRIABLE
    else:
        kind = ErrorKind.SUBSTRATE_TRANSIENT
    return Classification(kind, None, code, name, text)


_STOP_KINDS: Final = {
    ErrorKind.REFUSAL: StopKind.REFUSAL,
    ErrorKind.FENCED: StopKind.FATAL,
    ErrorKind.FATAL: StopKind.FATAL,
    ErrorKind.OFFSET_RESET: StopKind.SUBSTRATE,
    ErrorKind.RETRIABLE: StopKind.SUBSTRATE,
    ErrorKind.ABORTABLE: StopKind.SUBSTRATE,
    ErrorKind.SUBSTRATE_TRANSIENT: StopKind.SUBSTRATE,
    ErrorKind.RESTART_REQUIRED: StopKind.SUBSTRATE,
}


def stop_kind(exc_or_err: BaseException | KafkaError | Classification) -> StopKind | None:
    """The :class:`workers.protocol.StopKind` a worker reports when it stops on this error.

    ``REFUSAL`` → ``REFUSAL``; ``FENCED``/``FATAL`` → ``FATAL``; every other
    Kafka kind (a retriable or abortable error the worker gave up on, an
    unresolved offset reset, a transient condition) → ``SUBSTRATE``;
    ``None`` for an unclassified exception, whose raiser decides (the
    handler frame reports ``APPLICATION``).
    """
    c = exc_or_err if isinstance(exc_or_err, Classification) else classify(exc_or_err)
    return _STOP_KINDS.get(c.kind)


RECORD_TOO_LARGE_DETAIL: Final = (
    f"{shapes.substrate_record_too_large()}, typically a held message's persisted form against "
    "the ordering changelog's max.message.bytes; raise max.message.bytes on the topic "
    "named (or the producer's message.max.bytes if that is lower), then restart"
)
"""docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``, "A record exceeded a size limit"."""


def to_exception(
    exc_or_err: BaseException | KafkaError, context: str = "", *, grant: Grant | None = None,
    candidates: tuple[str, ...] = (),
) -> ParsleyFailClosedError | SubstrateError | BaseException:
    """The exception the worker raises for ``exc_or_err`` (raise it ``from`` the original).

    Args:
        exc_or_err: the error met.
        context: where it was met, e.g. ``"producing to orders[3]"``; goes
            into the detail.
        grant: for an authorization failure, the right the call needed (used when the
            code concerns its resource type; else :func:`workers.authorization.default_grant`
            of the code).
        candidates: for an authorization failure whose ``grant`` names no resource, the
            resources it may be (the topics of a failed transaction).

    Returns:
        ``ParsleyFailClosedError(SUBSTRATE_MISCONFIGURED, ...)`` for a record
        over a size limit; :class:`~workers.authorization.NotAuthorized` (one) for a
        call the ACLs refused, naming ``grant``; the refusal itself for a refusal; a
        :class:`SubstrateError` for every other Kafka error (an
        ``OFFSET_RESET`` one still awaits :func:`resolve_offset_reset`);
        an unclassified exception unchanged (a bare ``KafkaError`` is wrapped
        in a ``KafkaException`` first).
    """
    c = classify(exc_or_err)
    where = f"{context}: " if context else ""
    if c.kind is ErrorKind.REFUSAL:
        if isinstance(exc_or_err, BaseException):
            found = ParsleyFailClosedError.find_in(exc_or_err)
            if found is not None:
                return found
        assert c.reason is not None and c.code is not None
        if c.code in AUTHORIZATION_CODES:
            if grant is None or grant.resource != AUTHORIZATION_CODES[c.code]:
                grant, candidates = default_grant(c.code), ()  # another resource refused
            return NotAuthorized(c.name, c.text, context, grant, candidates=candidates)
        return ParsleyFailClosedError(
            c.reason, f"{RECORD_TOO_LARGE_DETAIL} ({where}{c.name}: {c.text})"
        )
    if c.kind is ErrorKind.UNCLASSIFIED:
        assert isinstance(exc_or_err, BaseException)
        return exc_or_err
    if isinstance(exc_or_err, SubstrateError):
        return exc_or_err
    return SubstrateError(c.kind, f"{where}{c.name}: {c.text}", c.code)


@contextlib.contextmanager
def map_kafka_errors(context: str, grant: Grant | None = None) -> Iterator[None]:
    """Re-raise a ``KafkaException`` in the block as its classified exception.

    ``with map_kafka_errors("committing task 3"): producer.commit_transaction()``
    raises ``ParsleyFailClosedError`` or :class:`SubstrateError` ``from`` the
    original (httpcore's ``map_exceptions``). Other exceptions pass unchanged.
    ``grant`` names the right an authorization failure lacked (:func:`to_exception`).
    """
    try:
        yield
    except KafkaException as exc:
        raise to_exception(exc, context, grant=grant) from exc


# ---------------------------------------------------------------------------
# Named predicates, for callers that branch on what a Kafka error means
# ---------------------------------------------------------------------------


def _code(exc_or_err: BaseException | KafkaError | None) -> int | None:
    if isinstance(exc_or_err, SubstrateError):
        return exc_or_err.code  # the code it was raised for, whatever its cause chain
    err = kafka_error_of(exc_or_err)
    return None if err is None else int(err.code())


def offset_reset(exc_or_err: BaseException | KafkaError | None) -> bool:
    """The consumer refused to reset a position (``_AUTO_OFFSET_RESET``,
    ``OFFSET_OUT_OF_RANGE``): judge it with :func:`workers.offsets.resolve_offset_reset`."""
    return _code(exc_or_err) in _OFFSET_RESET_CODES


def partition_eof(exc_or_err: BaseException | KafkaError | None) -> bool:
    """A partition-EOF event (``_PARTITION_EOF``, ``enable.partition.eof``): not a failure."""
    return _code(exc_or_err) == KafkaError._PARTITION_EOF


UNKNOWN_TOPIC_CODES: Final = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}
)
"""The broker's and the client's "no such topic"."""


def unknown_topic(exc_or_err: BaseException | KafkaError | None) -> bool:
    """The topic does not exist (``UNKNOWN_TOPIC_OR_PART``, ``_UNKNOWN_TOPIC``)."""
    return _code(exc_or_err) in UNKNOWN_TOPIC_CODES


def authorization_failed(exc_or_err: BaseException | KafkaError | None) -> bool:
    """The cluster's ACLs refused the call (:data:`AUTHORIZATION_CODES`)."""
    return _code(exc_or_err) in AUTHORIZATION_CODES


def topic_authorization_failed(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``TOPIC_AUTHORIZATION_FAILED``: the principal may not describe or read the topic."""
    return _code(exc_or_err) == KafkaError.TOPIC_AUTHORIZATION_FAILED


_TOPIC_GONE_CODES: Final = UNKNOWN_TOPIC_CODES | {
    KafkaError._UNKNOWN_PARTITION, KafkaError.TOPIC_AUTHORIZATION_FAILED
}


def topic_missing_or_unreadable(exc_or_err: BaseException | KafkaError | None) -> bool:
    """A consumed topic or partition is gone or unreadable (unknown topic or partition, or
    ``TOPIC_AUTHORIZATION_FAILED``): the worker's deletion check decides."""
    return _code(exc_or_err) in _TOPIC_GONE_CODES


def topic_already_exists(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``TOPIC_ALREADY_EXISTS`` from a create (another creator won the race)."""
    return _code(exc_or_err) == KafkaError.TOPIC_ALREADY_EXISTS


def unstable_offsets(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``UNSTABLE_OFFSET_COMMIT``: a transaction carrying offsets for the group is still
    open, so ``require_stable`` offsets cannot be answered yet (KIP-447)."""
    return _code(exc_or_err) == KafkaError.UNSTABLE_OFFSET_COMMIT


def group_coordinator_busy(exc_or_err: BaseException | KafkaError | None, *,
                           not_available: bool = True) -> bool:
    """The group coordinator cannot answer yet: loading (``COORDINATOR_LOAD_IN_PROGRESS``)
    or moving (``NOT_COORDINATOR``), and, when ``not_available``, not elected yet
    (``COORDINATOR_NOT_AVAILABLE``). Ask again."""
    code = _code(exc_or_err)
    return code in (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR) or (
        not_available and code == KafkaError.COORDINATOR_NOT_AVAILABLE)


def group_not_found(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``GROUP_ID_NOT_FOUND``: the group has no members and no offsets."""
    return _code(exc_or_err) == KafkaError.GROUP_ID_NOT_FOUND


_MEMBER_JOINED_CODES: Final = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID, KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
})


def member_joined(exc_or_err: BaseException | KafkaError | None) -> bool:
    """A commit answer meaning a member joined the group meanwhile (``UNKNOWN_MEMBER_ID``,
    ``ILLEGAL_GENERATION``, ``REBALANCE_IN_PROGRESS``)."""
    return _code(exc_or_err) in _MEMBER_JOINED_CODES


UNREACHABLE_CODES: Final = frozenset(
    {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}
)
"""The client's "no broker answered" codes."""


def unreachable(exc_or_err: BaseException | KafkaError | None) -> bool:
    """No broker answered (``_TIMED_OUT``, ``_TRANSPORT``, ``_ALL_BROKERS_DOWN``)."""
    return _code(exc_or_err) in UNREACHABLE_CODES


PURGE_CODES: Final = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
"""Delivery errors of records purged because *another* failure ended the transaction.

A record over a size limit inside a transaction puts it in the abortable state
and librdkafka purges the transaction's other records, whose reports carry
``_PURGE_QUEUE`` (-152) or ``_PURGE_INFLIGHT`` (-151), possibly before the
oversize record's own report. They are consequences, never the cause to report.
"""


def purged(exc_or_err: BaseException | KafkaError | None) -> bool:
    """A delivery report of a record purged (:data:`PURGE_CODES`)."""
    return _code(exc_or_err) in PURGE_CODES


def group_not_empty(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``NON_EMPTY_GROUP``: the group still has members (a delete or an offset change of a
    group in use)."""
    return _code(exc_or_err) == KafkaError.NON_EMPTY_GROUP


def invalid_argument(exc_or_err: BaseException | KafkaError | None) -> bool:
    """``_INVALID_ARG``: the client refused a configuration or argument locally."""
    return _code(exc_or_err) == KafkaError._INVALID_ARG
