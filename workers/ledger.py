"""Delivery accounting: the producer delivered everything it was given.

:class:`DeliveryLedger` counts produce calls and delivery reports so a
transaction's commit (and a changelog write) can check every record arrived;
the reports of records purged because another failure ended the transaction
(:data:`workers.kafka_errors.PURGE_CODES`) are kept apart.
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Message

from workers.authorization import Grant
from workers.kafka_errors import ErrorKind, SubstrateError, purged, to_exception

__all__ = ["DeliveryLedger"]


class DeliveryLedger:
    """Counts produce calls and delivery reports, so a commit can check that
    the producer delivered everything it was given (docs/model.md, "Restart").

    Pass :meth:`on_delivery` as ``producer.produce(..., on_delivery=...)`` (the native fast
    path passes it by position, as ``callback``) and
    call :meth:`sent` once per successful ``produce()``. Delivery reports
    arrive from ``poll()``/``flush()``/``commit_transaction()``.

    The task's producer reports failures only (``delivery.report.only.error``,
    :func:`workers.kafka_config.producer_config`): confluent-kafka-python handles that setting
    itself (``confluent_kafka.c``, ``Producer.c``'s ``dr_msg_cb``), serving every report
    in C and calling back into Python for failed ones only. A record is then known
    delivered once the producer's queue is empty (``flush()`` returned 0: librdkafka's
    ``rd_kafka_outq_len`` counts queued and in-flight records and unserved reports)
    and it has no error report; :meth:`check` takes that as
    ``queue_empty``. A producer that reports successes too counts them in
    :attr:`delivered`.

    Attributes:
        produced: successful ``produce()`` calls in this transaction.
        delivered: reports without an error (none under ``delivery.report.only.error``).
        failed: reports with an error (purges included).
        first_error: the first failed report whose error is not a purge
            (:data:`workers.kafka_errors.PURGE_CODES`), else ``None``: the cause to classify.
        first_purge: the first purge report, else ``None`` (reported only when
            no other error explains it).

    Args:
        cause: returns the open transaction's own error, if it failed (for records
            purged with no failed delivery of their own: a partition the principal may
            not write fails the transaction when it is added, and its records are only
            purged), else ``None``.
    """

    def __init__(self, cause: Callable[[], KafkaError | None] | None = None) -> None:
        self._cause = cause
        self.produced = 0
        self.delivered = 0
        self.failed = 0
        self.first_error: KafkaError | None = None
        self.first_error_where = ""
        self.first_purge: KafkaError | None = None
        self.first_purge_where = ""
        self.first_error_topic = ""
        self.purged_topics: dict[str, None] = {}

    def sent(self, n: int = 1) -> None:
        """Record ``n`` successful ``produce()`` calls."""
        self.produced += n

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        """librdkafka's delivery callback."""
        if err is None:
            self.delivered += 1
            return
        self.failed += 1
        if purged(err):
            self.purged_topics[msg.topic() or ""] = None
            if self.first_purge is None:
                self.first_purge = err
                self.first_purge_where = f"{msg.topic()}[{msg.partition()}]"
        elif self.first_error is None:
            self.first_error = err
            self.first_error_where = f"{msg.topic()}[{msg.partition()}]"
            self.first_error_topic = msg.topic() or ""

    @property
    def outstanding(self) -> int:
        """Messages produced whose report has not arrived or reported an error."""
        return self.produced - self.delivered

    @property
    def unreported(self) -> int:
        """Messages produced whose delivery report has not arrived yet."""
        return self.produced - self.delivered - self.failed

    @property
    def any_error(self) -> bool:
        """Whether some delivery failed (a purge included)."""
        return self.first_error is not None or self.first_purge is not None

    def check(self, context: str = "", *, queue_empty: bool = False) -> None:
        """Raise unless every produced message was delivered.

        The error classified is the first report's that is not a purge
        (:data:`workers.kafka_errors.PURGE_CODES`); with purges alone, the transaction's
        own error (the ``cause`` given at construction) when it has one, else the purge.
        A topic the principal may not write is named with the grant that fixes it.

        Args:
            context: prefixed to the error's detail.
            queue_empty: the producer's queue is empty (``flush()`` returned 0), so every
                record without an error report was delivered; otherwise a record counts
                as delivered only by its success report.

        Raises:
            ParsleyFailClosedError: a delivery failed with a record too large
                (``SUBSTRATE_MISCONFIGURED``, docs/failing-closed.md, "Diagnosis").
            SubstrateError: another delivery failure, or reports missing.
        """
        err, where_to = self.first_error, self.first_error_where
        topics: tuple[str, ...] = (self.first_error_topic,)
        if err is None:
            err, where_to = self.first_purge, self.first_purge_where
            cause = self._cause() if err is not None and self._cause is not None else None
            if cause is not None:
                # Which partition failed to join the transaction is not said: every
                # topic whose records were purged is a candidate.
                err, topics = cause, tuple(t for t in self.purged_topics if t)
                where_to = ", ".join(topics)
        if err is not None:
            where = f"{context}: " if context else ""
            grant = Grant("Topic", topics[0] if len(topics) == 1 else None, ("Write",))
            exc = to_exception(err, f"{where}delivering to {where_to}", grant=grant,
                               candidates=topics)
            raise exc from KafkaException(err)
        if self.outstanding and not queue_empty:
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"{context}: {self.outstanding} of {self.produced} messages not delivered",
            )

    def reset(self) -> None:
        """Start a new transaction's account."""
        self.produced = self.delivered = self.failed = 0
        self.first_error = None
        self.first_error_where = ""
        self.first_purge = None
        self.first_purge_where = ""
        self.first_error_topic = ""
        self.purged_topics = {}
