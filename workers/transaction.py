"""One task's transactional producer: begin lazily, write, send offsets, verify, commit or abort.

One transaction per commit interval, none while idle: the
step calls :meth:`TaskTransaction.begin` whenever it is about to write, which
opens a transaction only if none is open; :meth:`TaskTransaction.commit`
sends the read positions with ``send_offsets_to_transaction(...,
consumer_group_metadata())``, flushes, checks that every produced record was
delivered (:class:`workers.ledger.DeliveryLedger`), and commits.

Every Kafka error is classified by :mod:`workers.kafka_errors` and re-raised as a
:class:`~parsley.refusals.ParsleyFailClosedError` (a record over a size limit:
``SUBSTRATE_MISCONFIGURED``) or a :class:`workers.kafka_errors.SubstrateError` whose
``kind`` tells the caller what to do (``ABORTABLE``: abort and rebuild; ``FENCED``/``FATAL``:
a fresh producer unless a successor owns the task: :func:`workers.verdicts.in_place_verdict`).
A call past its bound raises :class:`workers.calls.CallStalled` (:mod:`workers.calls`).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from parsley.engine.channel import Header
from parsley.refusals import ParsleyFailClosedError
from workers.authorization import NotAuthorized
from workers.calls import call
from workers.changelog import write_records
from workers.histogram import TRANSACTION_BUCKETS_S, BucketCounts
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    fatal,
    kafka_error_of,
    map_kafka_errors,
    to_exception,
)
from workers.ledger import DeliveryLedger
from workers.positions import TASK_METADATA

__all__ = ["TaskTransaction"]

_QUEUE_FULL_TIMEOUT_S = 30.0
_CAUSE_WAIT_S = 5.0
"""How long a failed transaction waits for its records' missing delivery reports, s."""
FATAL_ERROR_BOUND_S = 2.0
"""The bound on each of :meth:`TaskTransaction.fatal_error`'s (at most two) calls, s, the
client's own timeout argument half of it: the client answers from its own state, without a
request to the broker, and two tries stay inside the watchdog's stop grace (5 s)."""


_UNJOINED = "Failed to add partition"
"""How librdkafka's error begins when a partition could not join the transaction
(AddPartitionsToTxn refused; its ``rdkafka_txnmgr.c``)."""


class TaskTransaction:
    """The transactional producer of one task and the account of its open transaction.

    Args:
        producer: built from :func:`workers.kafka_config.producer_config`; this
            object calls ``init_transactions`` (which fences any zombie with the
            same ``transactional.id``).
        timeout_s: the client's timeout argument on ``send_offsets``/``flush``/``commit``/
            ``abort``, s; ``init_transactions`` gets ``init_timeout_s``. Each call is also
            bounded by the worker itself (:func:`workers.calls.call`), which does not
            trust the client to honour these (docs/operations.md, "Bounded client calls").
        init_timeout_s: the client's timeout argument on ``init_transactions``, s.

    Attributes:
        open: whether a transaction is open.
        commits: transactions committed.
        aborts: transactions aborted (an abort that found none open is not counted).
        last_commit_ms: duration of the last commit (offsets + flush + commit), ms.
        durations: each committed transaction's duration, from its begin to its
            commit's return, s (:mod:`workers.histogram`; docs/operations.md, "Metrics").
        initialised: whether :meth:`init` completed (the worker sets it false again when it
            retires this account for a fresh one), so :meth:`fatal_error` may ask.
    """

    def __init__(self, producer: Producer, *, timeout_s: float = 20.0,
                 init_timeout_s: float = 30.0) -> None:
        self.producer = producer
        self.timeout_s = timeout_s
        self.init_timeout_s = init_timeout_s
        # The ledger asks this account for the transaction's error through a weak
        # reference: a bound method would make a cycle, and a retired account (with its
        # producer) would then wait for the cyclic collector instead of going with its last
        # reference (workers.clients.retire).
        account = weakref.ref(self)

        def cause() -> KafkaError | None:
            txn = account()
            return None if txn is None else txn._transaction_error()

        self.ledger = DeliveryLedger(cause)
        self._produce = producer.produce
        self._on_delivery = self.ledger.on_delivery
        self.open = False
        self.commits = 0
        self.aborts = 0
        self.last_commit_ms: float | None = None
        self.durations = BucketCounts(TRANSACTION_BUCKETS_S)
        self.opened_at = 0.0
        self.initialised = False

    def renewed(self, producer: Producer) -> TaskTransaction:
        """An account over ``producer``, a fresh client with the same ``transactional.id``,
        carrying this one's counters (an open transaction counts as aborted: the fresh
        producer's :meth:`init` fences this one and aborts it). This one is not used again.
        """
        new = TaskTransaction(producer, timeout_s=self.timeout_s,
                              init_timeout_s=self.init_timeout_s)
        new.commits, new.last_commit_ms, new.durations = (
            self.commits, self.last_commit_ms, self.durations)
        new.aborts = self.aborts + (1 if self.open else 0)
        return new

    def init(self) -> None:
        """``init_transactions``: fences the previous producer of this task, aborting its
        open transaction (docs/operations.md, "Fenced: a successor or a timeout").

        Raises:
            SubstrateError: classified failure.
        """
        with map_kafka_errors("initialising the task's transactions"):
            call("init_transactions", self.producer.init_transactions, self.init_timeout_s)
        self.initialised = True

    def fatal_error(self) -> ParsleyFailClosedError | SubstrateError | None:
        """The fatal error the producer holds, asked without acting.

        confluent-kafka can raise a producer's fatal error as some other exception
        (docs/architecture.md, "Recovery in place"); the producer still holds it. On a
        producer whose ``init_transactions`` completed, another refuses without acting or
        sending anything: with the fatal error in the fatal state, ``_STATE`` (or the
        abortable error) in any other, and ``_CONFLICT`` or ``_PREV_IN_PROGRESS`` while
        another transactional call is pending, when a fatal error is not seen (librdkafka
        ``rdkafka_txnmgr.c``: ``rd_kafka_txn_curr_api_begin``,
        ``rd_kafka_txn_require_states0``).

        Returns:
            The error as the worker raises it (:func:`workers.kafka_errors.to_exception`:
            a :class:`SubstrateError` of kind ``FENCED`` or ``FATAL``, or the refusal it
            names), or ``None``: none held or none seen, the producer never initialised or
            retired (a first ``init_transactions`` would fence the task's other producers),
            or no answer in two tries of :data:`FATAL_ERROR_BOUND_S`. After no answer the
            call stays pending and the producer's next transactional calls are refused
            ``_CONFLICT``; that is safe because a caller that gets ``None`` judges the
            exception it had, which stops the worker or renews its producer.
        """
        err = None
        for _ in range(2 if self.initialised else 0):  # again after the client's own timeout
            try:
                call("init_transactions (fatal error probe)", self.producer.init_transactions,
                     FATAL_ERROR_BOUND_S / 2, bound_s=FATAL_ERROR_BOUND_S)
                return None
            except KafkaException as exc:
                err = kafka_error_of(exc)
            except Exception:  # a probe that fails (CallStalled) tells nothing
                return None
            if err is None or err.code() != KafkaError._TIMED_OUT:
                break
        if err is None or not fatal(err):
            return None
        held = to_exception(err, "the task's producer holds a fatal error")
        assert isinstance(held, ParsleyFailClosedError | SubstrateError)  # a Kafka error's
        held.__cause__ = KafkaException(err)  # no traceback: no frame holds the producer
        return held

    def begin(self) -> None:
        """Open a transaction unless one is open (lazy: none while idle)."""
        if self.open:
            return
        with map_kafka_errors("beginning a transaction"):
            self.producer.begin_transaction()
        self.ledger.reset()
        self.open = True
        self.opened_at = time.monotonic()

    def _transaction_error(self) -> KafkaError | None:
        """The open transaction's own error if it failed, else ``None``. librdkafka keeps
        it and answers it to any call the failed state does not allow: a
        ``begin_transaction`` while one is open, which changes nothing (``_STATE``, not
        an error of the transaction, otherwise)."""
        if not self.open:
            return None
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            return None if err is None or err.code() == KafkaError._STATE else err
        return None

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header],
        timestamp_ms: int,
    ) -> None:
        """Produce one emission in the open transaction (partitioned by the key, murmur2_random).

        Raises:
            ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` for a record over
                the producer's size limit.
            SubstrateError: any other produce failure, or a local queue full for 30 s.
        """
        self.send_counted(topic, key, value, list(headers), timestamp_ms)
        self.ledger.sent()

    def send_counted(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[Header],
        timestamp_ms: int,
    ) -> None:
        """:meth:`send` for a caller that counts its sends itself (``ledger.sent(n)``
        once per batch, in a ``finally`` so that a failure is still counted).

        ``headers`` is handed to the producer as it is (a list, not copied).

        Raises:
            As :meth:`send`.
        """
        # librdkafka's stub types header values as str | bytes | None; ours are bytes | None.
        kafka_headers = cast("list[tuple[str, str | bytes | None]]", headers)
        try:
            self._produce(topic, value=value, key=key, headers=kafka_headers,
                          timestamp=timestamp_ms, on_delivery=self._on_delivery)
            return
        except BufferError:
            pass
        except KafkaException as exc:
            self._delivery_failure_first()
            raise to_exception(exc, f"sending to {topic} ({len(value or b'')} bytes)") from exc
        deadline: float | None = None
        while True:
            try:
                self._produce(topic, value=value, key=key, headers=kafka_headers,
                              timestamp=timestamp_ms, on_delivery=self._on_delivery)
                return
            except BufferError:
                now = time.monotonic()
                deadline = deadline if deadline is not None else now + _QUEUE_FULL_TIMEOUT_S
                if now > deadline:
                    raise SubstrateError(
                        ErrorKind.SUBSTRATE_TRANSIENT,
                        f"sending to {topic}: the producer queue stayed full for "
                        f"{_QUEUE_FULL_TIMEOUT_S:g} s",
                    ) from None
                self.producer.poll(0.05)
            except KafkaException as exc:
                self._delivery_failure_first()
                raise to_exception(
                    exc, f"sending to {topic} ({len(value or b'')} bytes)"
                ) from exc

    def _delivery_failure_first(self) -> None:
        """Raise the first failed delivery's classification, if any (purges last).

        A failed delivery (a record over the topic's size limit) puts the
        transaction into an abortable state, after which every call fails with
        ``_STATE``; the delivery's own error is the cause to report (docs/failing-closed.md,
        "Diagnosis": a record too large is ``SUBSTRATE_MISCONFIGURED``, not a retry).
        """
        ledger = self.ledger
        self.producer.poll(0)
        # Other records' purge reports (_PURGE_QUEUE) can arrive before the failed
        # record's own: wait (bounded) for the cause while reports are missing
        # (len(producer): records still queued or in flight, i.e. without a report;
        # exact even while a drain has not yet counted its sends into the ledger).
        deadline = time.monotonic() + _CAUSE_WAIT_S
        while (ledger.first_error is None and ledger.first_purge is not None
               and len(self.producer) > 0 and time.monotonic() < deadline):
            self.producer.poll(0.05)
        if ledger.any_error:
            ledger.check("in the task's transaction")

    def write_changelog(
        self, topic: str, partition: int, records: Iterable[tuple[bytes, bytes | None]]
    ) -> int:
        """Write merged changelog records to ``topic[partition]`` explicitly (see
        :func:`workers.changelog.write_records`). Returns the count written."""
        try:
            return write_records(self.producer, topic, partition, records, ledger=self.ledger)
        except SubstrateError:
            self._delivery_failure_first()
            raise

    def commit(self, offsets: Mapping[tuple[str, int], int], group_metadata: Any) -> None:
        """Send the read positions, verify every record was delivered, and commit.

        Args:
            offsets: ``(topic, partition) -> next offset to read`` (last fed + 1, or
                past trailing transaction markers); committed with the metadata
                ``workers.positions.TASK_METADATA``, which marks them as Parsley's.
            group_metadata: ``consumer.consumer_group_metadata()``.

        Raises:
            ParsleyFailClosedError: a delivery failed with a record too large.
            SubstrateError: classified; the transaction is then still open
                (``ABORTABLE``: call :meth:`abort`) or the producer is unusable.
        """
        if not self.open:
            return
        started = time.monotonic()
        tps = [TopicPartition(t, p, o, metadata=TASK_METADATA)
               for (t, p), o in offsets.items()]
        try:
            try:
                with map_kafka_errors("sending the read positions to the transaction"):
                    if tps:
                        call("send_offsets_to_transaction",
                             self.producer.send_offsets_to_transaction, tps, group_metadata,
                             self.timeout_s)
            except NotAuthorized as exc:
                if (exc.grant.resource == "Topic" and exc.grant.name is None
                        and exc.text.startswith(_UNJOINED)):
                    # A partition of this transaction's records could not join it, and this
                    # call's error came first: it names no topic, the purged records'
                    # reports do (the ledger's candidates), as a flush's error would. (An
                    # offset commit refused for want of Read on an input topic says "Failed
                    # to commit offsets" and keeps its own words.)
                    self._delivery_failure_first()
                raise
            with map_kafka_errors("flushing the transaction's records"):
                try:
                    remaining = call("flush", self.producer.flush, self.timeout_s)
                except SystemError as exc:
                    # confluent-kafka can lose the exception of a callback it served in
                    # flush ("returned NULL without setting an exception", seen once as a
                    # successor fenced this producer): the first failed delivery, which
                    # the ledger has, is the cause to classify.
                    self._delivery_failure_first()
                    raise SubstrateError(
                        ErrorKind.ABORTABLE,
                        f"flushing the transaction's records failed in the client: {exc}",
                    ) from exc
        except SubstrateError:
            self._delivery_failure_first()
            raise
        if remaining:
            raise SubstrateError(
                ErrorKind.ABORTABLE,
                f"{remaining} records still queued {self.timeout_s:g} s into the commit's flush",
            )
        self.ledger.check("committing the task's transaction", queue_empty=True)
        try:
            with map_kafka_errors("committing the task's transaction"):
                call("commit_transaction", self.producer.commit_transaction, self.timeout_s)
        except SubstrateError:
            self._delivery_failure_first()
            raise
        self.open = False
        self.commits += 1
        ended = time.monotonic()
        self.last_commit_ms = (ended - started) * 1000.0
        self.durations.observe(ended - self.opened_at)

    def abort(self) -> None:
        """Abort the open transaction, if any (nothing written in it becomes visible).

        Raises:
            SubstrateError: classified. A retriable failure (a timeout) leaves
                :attr:`open` true, so a later abort retries it; fenced or fatal:
                the producer is unusable.
        """
        if not self.open:
            return
        with map_kafka_errors("aborting the task's transaction"):
            call("abort_transaction", self.producer.abort_transaction, self.timeout_s)
        self.open = False
        self.aborts += 1
        self.ledger.reset()
