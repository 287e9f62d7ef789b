"""The worker's Kafka edge: client configurations and the one KafkaError classifier.

Two jobs, both at the I/O edge:

* **Configurations.** :func:`consumer_config`, :func:`producer_config`,
  :func:`restore_consumer_config` and :func:`admin_config` build the
  confluent-kafka (librdkafka) dicts the worker of task ``i`` uses, from the
  bootstrap servers, the prefix and process (application id
  ``<prefix>-<process>``; ids from ``parsley.declarations``), the task index
  and the user's ``kafka_properties``. Properties Parsley owns are
  refused in user overrides (:data:`OWNED_PROPERTIES`).
* **Classification.** Every ``KafkaError``/``KafkaException`` the worker meets
  is classified here and nowhere else: :func:`fatal`, :func:`retriable`,
  :func:`txn_requires_abort`, :func:`classify`, and :func:`to_exception` /
  :func:`map_kafka_errors`, which re-raise ``from`` the original error as a
  :class:`~parsley.refusals.ParsleyFailClosedError` (the two substrate
  refusals) or a :class:`SubstrateError` carrying an :class:`ErrorKind`.

The offset-reset judgement lives in :mod:`workers.offsets` and the delivery
accounting in :mod:`workers.ledger`; their names are still importable from here.

Verified on a real broker (``tests/integration/test_worker_kafka.py``):

* a record over a size limit surfaces as ``MSG_SIZE_TOO_LARGE`` (10), either
  from ``produce()`` (over the client's ``message.max.bytes``) or as the
  transaction's abortable error (over the topic's ``max.message.bytes``);
* under ``auto.offset.reset=error`` librdkafka reports a fetch below the log
  start *and* a partition with no committed offset with the same code,
  ``_AUTO_OFFSET_RESET`` (-140); :func:`workers.offsets.offset_reset_verdict` tells them apart
  from the numbers (committed offset vs the listed log start and end);
* closed static members stay in the group until their session times out
  (librdkafka sends no LeaveGroup for them): measured 5.9 s after ``close()``
  at the default :data:`DEFAULT_SESSION_TIMEOUT_MS` (6000), and 3.1 s with
  ``session.timeout.ms=3000`` (the test broker accepts it; the worker tests use
  it), so a clean stop empties the group within about the session timeout;
* after aborting a transaction in which a produce failed (an oversize
  record), the next transaction's commit failed with
  ``OUT_OF_ORDER_SEQUENCE_NUMBER`` flagged abortable: an abortable error may
  recur once after such an abort.
"""

from __future__ import annotations

import contextlib
import enum
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException

from parsley.declarations import application_id, group_instance_id, transactional_id
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.protocol import StopKind

__all__ = [
    "DEFAULT_SESSION_TIMEOUT_MS",
    "OWNED_PROPERTIES",
    "RECORD_TOO_LARGE_CODES",
    "TRANSACTION_TIMEOUT_MS",
    "Classification",
    "ErrorKind",
    "SubstrateError",
    "admin_config",
    "classify",
    "consumer_config",
    "fatal",
    "kafka_error_of",
    "map_kafka_errors",
    "producer_config",
    "restore_consumer_config",
    "retriable",
    "stop_kind",
    "to_exception",
    "txn_requires_abort",
]

# ---------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------

TRANSACTION_TIMEOUT_MS: Final = 10_000
"""``transaction.timeout.ms`` of every worker producer (docs/operations.md, "Transaction time
bound": an open transaction is aborted at ten seconds)."""

DEFAULT_SESSION_TIMEOUT_MS: Final = 6_000
"""Consumer ``session.timeout.ms``. Static members do not leave the group on
close, so the group empties only when their sessions expire: keep it to
seconds (docs/operations.md, "The consumer group at a start"). 6 s is the broker's default
``group.min.session.timeout.ms``, the shortest a stock broker accepts."""

PREFETCH_KIB: Final = 16_384
"""The ``queued.max.messages.kbytes`` (KiB) of the main and the restore consumer unless the
user sets one (``consumer.queued.max.messages.kbytes``)."""

RESTORE_FETCH_WAIT_MS: Final = 10
"""``fetch.wait.max.ms`` of the restore consumer: how long the broker may hold a fetch that
found nothing new, which is how each changelog read learns it reached the end (KIP-98's
commit marker is the last offset, so the partition-EOF event ends the read)."""

OWNED_PROPERTIES: Final = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",  # librdkafka's alias of bootstrap.servers
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "isolation.level",
        "auto.offset.reset",
        "enable.auto.commit",
        "partitioner",
    }
)
"""librdkafka properties Parsley sets itself and refuses in user overrides.

Source: docs/operations.md, "Configuration" (forbidden keys and suffixes) and "Transaction
time bound"; README.md, "Write your own process"
(``transaction.timeout.ms=10000``; ``partitioner=murmur2_random`` keeps
co-partitioning with Java producers).
"""

_CLIENT_PREFIXES: Final = ("consumer.", "producer.", "admin.")


def _check_user_properties(kafka_properties: Mapping[str, Any] | None) -> dict[str, Any]:
    props = dict(kafka_properties or {})
    for key, value in props.items():
        if not isinstance(key, str):
            raise TypeError(f"kafka property names must be str, got {key!r}")
        bare = key.strip().lower()
        for prefix in _CLIENT_PREFIXES:
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
                break
        if bare in OWNED_PROPERTIES:
            raise ValueError(
                f"kafka property {key!r} is owned by Parsley and cannot be overridden "
                f"(owned: {', '.join(sorted(OWNED_PROPERTIES))})"
            )
        if bare == "default.topic.config" and isinstance(value, Mapping):
            _check_user_properties(value)
        if value is None:
            raise ValueError(f"kafka property {key!r} has no value")
    return props


def _select(props: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Unprefixed properties apply to every client; ``<kind>.x`` to that kind only."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key.startswith(_CLIENT_PREFIXES):
            prefix = f"{kind}."
            if key.startswith(prefix):
                out[key[len(prefix):]] = value
        else:
            out[key] = value
    return out


def _check_common(bootstrap_servers: str, prefix: str, process: str) -> None:
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ValueError("bootstrap servers must be non-blank")
    for what, name in (("application id prefix", prefix), ("process name", process)):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{what} must be non-blank, got {name!r}")


def consumer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
) -> dict[str, Any]:
    """The main consumer of task ``task``: a static member of group ``<app-id>``.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        prefix: the application id prefix; ``<prefix>-<process>`` is the
            application id and the group id.
        process: the process name.
        task: task index ``i`` (the partition this worker owns on every topic).
        kafka_properties: user overrides; unprefixed keys apply to every
            client, ``consumer.<key>`` to consumers only (``producer.<key>``,
            ``admin.<key>`` likewise).
        task_count: the process's task width, for the id padding
            (``parsley.declarations.group_instance_id``).
        session_timeout_ms: ms a static member stays in the group after it
            stops heart-beating (a crash or a close).

    Returns:
        A librdkafka config: ``group.id = <prefix>-<process>``,
        ``group.instance.id = <prefix>-<process>-task-<NNN>``,
        classic group protocol with the range assignor, ``read_committed``,
        no auto commit, ``auto.offset.reset=error`` (a committed position
        below the log start is refused, never skipped: docs/failing-closed.md,
        ``POSITIONS_DISCARDED_UNREAD``), no topic auto-creation; by default a
        16 MiB prefetch (:data:`PREFETCH_KIB`) fetched again after 10 ms.

    Raises:
        ValueError: a blank argument, or a user property Parsley owns
            (the message names it).
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "consumer")
    instance = group_instance_id(prefix, process, task, task_count)
    config: dict[str, Any] = {
        "client.id": instance,
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "allow.auto.create.topics": False,
        # Prefetch at most 16 MiB, not librdkafka's 64 MiB: a worker handed a backlog of
        # large records otherwise holds 64 MiB of fetched records it has not fed, and
        # keeps that high-water mark (docs/performance.md, "Memory"). 16 MiB is still a
        # third of a second of 1 KiB records at this worker's fastest.
        "queued.max.messages.kbytes": PREFETCH_KIB,
        # ...and fetch again within 10 ms once it has room (librdkafka's default waits 1 s).
        "fetch.queue.backoff.ms": 10,
    }
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": application_id(prefix, process),
            "group.instance.id": instance,
            "group.protocol": "classic",
            "partition.assignment.strategy": "range",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    return config


def producer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
) -> dict[str, Any]:
    """The transactional producer of task ``task``.

    Arguments as :func:`consumer_config` (``producer.<key>`` overrides).

    Returns:
        A librdkafka config: ``transactional.id = <prefix>-<process>-task-<NNN>``
        (``parsley.declarations.transactional_id``; its
        ``init_transactions`` fences any zombie of the same task),
        idempotence on, ``transaction.timeout.ms=10000``
        (:data:`TRANSACTION_TIMEOUT_MS`) and ``partitioner=murmur2_random``
        (Java's default partitioner, so keys land on the same partitions
        from either implementation); by default ``acks=all`` (idempotence refuses
        any other) and ``delivery.report.only.error=true`` (failures only: a commit
        knows every other record delivered once its flush empties the queue,
        :class:`workers.ledger.DeliveryLedger`).

    Raises:
        ValueError: a blank argument, or a user property Parsley owns.
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "producer")
    name = transactional_id(prefix, process, task, task_count)
    # Failures only: no Python call per delivered record (workers.ledger.DeliveryLedger).
    config: dict[str, Any] = {"client.id": name, "acks": "all",
                              "delivery.report.only.error": True}
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": name,
            "enable.idempotence": True,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "partitioner": "murmur2_random",
        }
    )
    return config


def restore_consumer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
) -> dict[str, Any]:
    """A consumer that reads changelog partitions by ``assign()`` only.

    It never subscribes and never commits, so it never joins or creates a
    group; librdkafka insists on a ``group.id`` all the same, so it gets
    ``<prefix>-<process>-task-<NNN>.restore``, distinct from the application's
    group. Arguments as :func:`consumer_config`.
    ``read_committed`` (aborted changelog writes are not state),
    ``auto.offset.reset=error`` (a changelog position that vanishes mid-read
    is a failure, never a skip), ``enable.partition.eof`` (the reader's end
    signal when the last records are transaction markers).

    Raises:
        ValueError: a blank argument, or a user property Parsley owns.
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "consumer")
    name = group_instance_id(prefix, process, task, task_count)
    config: dict[str, Any] = {
        "client.id": f"{name}.restore",
        "allow.auto.create.topics": False,
        "enable.auto.offset.store": False,
        # Prefetch at most 16 MiB (librdkafka's default is 64 MiB): a restore reads as fast
        # as it decodes, and a worker keeps this consumer (and its high-water mark of
        # memory) for its life (docs/performance.md, "Restore, what limits it").
        "queued.max.messages.kbytes": PREFETCH_KIB,
        # ...and fetch again within 10 ms once it has room (librdkafka waits a whole
        # second by default, which made a 16 MiB restore three times slower).
        "fetch.queue.backoff.ms": 10,
        # A transactional changelog ends in a commit marker, so a read learns it is done
        # from the partition-EOF event, which comes with a fetch that found nothing new:
        # the broker holds that fetch for fetch.wait.max.ms (500 ms by default) on every
        # partition read. The consumer fetches only while a read assigns it a partition.
        "fetch.wait.max.ms": RESTORE_FETCH_WAIT_MS,
    }
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"{name}.restore",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        }
    )
    return config


def admin_config(
    bootstrap_servers: str, kafka_properties: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An AdminClient config: user properties (unprefixed and ``admin.``) over the servers.

    Raises:
        ValueError: blank servers, or a user property Parsley owns.
    """
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ValueError("bootstrap servers must be non-blank")
    config = _select(_check_user_properties(kafka_properties), "admin")
    config["bootstrap.servers"] = bootstrap_servers
    return config


# ---------------------------------------------------------------------------
# Classification
# ---------------------------------------------------------------------------

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
    """A substrate refusal (``SUBSTRATE_MISCONFIGURED``,
    ``POSITIONS_DISCARDED_UNREAD``) or any ``ParsleyFailClosedError``: abort
    the open transaction and stop, failing closed."""
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
    """A newer worker owns this task (producer epoch or static member fenced): stop."""
    FATAL = "fatal"
    """The client is unusable (``KafkaError.fatal()``): stop with a failure detail."""
    SUBSTRATE_TRANSIENT = "substrate_transient"
    """Any other broker, timeout, topic or partition condition: stop with no
    reason; a restart once the cluster is healthy resumes (docs/runbooks.md,
    "The cluster was unreachable")."""
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
    3. a record over a size limit (:data:`RECORD_TOO_LARGE_CODES`) →
       ``REFUSAL``/``SUBSTRATE_MISCONFIGURED`` — checked before the abortable
       flag because an oversize produce inside a transaction surfaces as the
       transaction's abortable error, and aborting and retrying would meet it
       again (docs/failing-closed.md, "Diagnosis": "the two
stops ... that recur identically");
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
    if code in RECORD_TOO_LARGE_CODES:
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
    "a record exceeded a size limit, typically a held message's persisted form against "
    "the ordering changelog's max.message.bytes; raise max.message.bytes on the topic "
    "named (or the producer's message.max.bytes if that is lower), then restart"
)
"""docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``, "A record exceeded a size limit"."""


def to_exception(
    exc_or_err: BaseException | KafkaError, context: str = ""
) -> ParsleyFailClosedError | SubstrateError | BaseException:
    """The exception the worker raises for ``exc_or_err`` (raise it ``from`` the original).

    Args:
        exc_or_err: the error met.
        context: where it was met, e.g. ``"producing to orders[3]"``; goes
            into the detail.

    Returns:
        ``ParsleyFailClosedError(SUBSTRATE_MISCONFIGURED, ...)`` for a record
        over a size limit; the refusal itself for a refusal; a
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
        assert c.reason is not None
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
def map_kafka_errors(context: str) -> Iterator[None]:
    """Re-raise a ``KafkaException`` in the block as its classified exception.

    ``with map_kafka_errors("committing task 3"): producer.commit_transaction()``
    raises ``ParsleyFailClosedError`` or :class:`SubstrateError` ``from`` the
    original (httpcore's ``map_exceptions``). Other exceptions pass unchanged.
    """
    try:
        yield
    except KafkaException as exc:
        raise to_exception(exc, context) from exc


# ---------------------------------------------------------------------------
# Names moved to their own modules, still importable from here
# ---------------------------------------------------------------------------

_MOVED: Final = {
    "OffsetResetVerdict": "workers.offsets",
    "offset_reset_refusal": "workers.offsets",
    "offset_reset_verdict": "workers.offsets",
    "resolve_offset_reset": "workers.offsets",
    "PURGE_CODES": "workers.ledger",
    "DeliveryLedger": "workers.ledger",
}


def __getattr__(name: str) -> Any:
    """Lazily re-export the names moved to :mod:`workers.offsets` and :mod:`workers.ledger`
    (lazy: those modules import this one)."""
    module = _MOVED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
