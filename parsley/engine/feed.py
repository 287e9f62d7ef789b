"""The feed's outcome and the batch forms of the engine's feed and delivery.

:class:`FeedOutcome` is what ``receive`` makes of one record. :class:`BatchForms` gives
the reference engine (:class:`parsley.engine.engine.ProcessEngine`) its batch calls,
:meth:`~BatchForms.feed_records` (one fetched batch, :class:`RecordLike` records) and
:meth:`~BatchForms.deliver_batch` (:data:`Delivered` entries), written over its
single-record ``receive``, ``deliver_next`` and ``causes_header``; the native core
implements both in Rust without a ``ReceivedMessage`` per record (docs/performance.md,
"Engine").

Pure: standard library only.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from parsley.engine.channel import ChannelId, DeliverableMessage, Header, ReceivedMessage

__all__ = ["BatchForms", "Delivered", "FeedOutcome", "RecordLike"]


class FeedOutcome(enum.Enum):
    """What became of a fed record (Java ``ReceiveOutcome``)."""

    ACCEPTED = "ACCEPTED"
    """Taken into the hold-back buffer (possibly deliverable at once)."""
    DUPLICATE_DROPPED = "DUPLICATE_DROPPED"
    """A replay at or below the session floor: already handled by a committed step."""



class RecordLike(Protocol):
    """What :meth:`BatchForms.feed_records` reads of a fetched record: the
    accessor methods of ``confluent_kafka.Message``."""

    def topic(self) -> Any: ...
    def offset(self) -> Any: ...
    def timestamp(self) -> Any: ...
    def key(self) -> Any: ...
    def value(self) -> Any: ...
    def headers(self) -> Any: ...


Delivered = tuple[ChannelId, int, int, bytes | None, bytes | None, tuple[Header, ...], bytes]
"""One entry of :meth:`BatchForms.deliver_batch`: ``(channel, position, timestamp_ms,
key, value, application headers, causes header after this delivery)``."""


class BatchForms:
    """The batch calls, over the single-record ones the engine defines."""

    if TYPE_CHECKING:
        def receive(self, msg: ReceivedMessage) -> FeedOutcome: ...
        def deliver_next(self) -> DeliverableMessage | None: ...
        def causes_header(self) -> bytes: ...

    def feed_records(
        self, records: Sequence[RecordLike], channels: Mapping[str, ChannelId],
    ) -> tuple[int, int, dict[str, int]]:
        """Feed a fetched batch in one call: :meth:`receive` for each record, in order.

        The batch form of ``receive`` that the worker loop calls once per ``consume()``
        (docs/performance.md, "Engine"); the native engine implements it without a
        ``ReceivedMessage`` per record.

        Args:
            records: fetched records without errors, in fetch order, each with the
                methods of ``confluent_kafka.Message`` the feed reads: ``topic()``,
                ``offset()``, ``timestamp()`` (``(type, ms)``), ``key()``, ``value()``,
                ``headers()`` (a list of ``(key, bytes)`` pairs or ``None``).
            channels: the received channel of each topic name in ``records``.

        Returns:
            ``(fed, duplicates, last)``: how many records were fed, how many of them
            were dropped as duplicates (``FeedOutcome.DUPLICATE_DROPPED``), and the
            last offset fed per topic name.

        Raises:
            ParsleyFailClosedError: the refusals of :meth:`receive`, for the first
                record that draws one; records before it are fed, and the host must
                abort the open transaction (as for ``receive``).
            ValueError: a topic missing from ``channels`` or a channel not received.
        """
        receive = self.receive
        dropped = FeedOutcome.DUPLICATE_DROPPED
        last: dict[str, int] = {}
        count = duplicates = 0
        for msg in records:
            topic = msg.topic()
            offset = msg.offset()
            headers = msg.headers()
            if receive(ReceivedMessage(
                channels[topic], offset, msg.timestamp()[1], msg.key(), msg.value(),
                tuple(headers) if headers else (),
            )) is dropped:
                duplicates += 1
            last[topic] = offset
            count += 1
        return count, duplicates, last

    def deliver_batch(self, limit: int) -> list[Delivered]:
        """Deliver up to ``limit`` deliverable heads in one call: :meth:`deliver_next`
        until it returns ``None`` or ``limit`` are taken.

        Each entry carries the ``parsley.causes`` header to stamp on what the handler
        sends for it: :meth:`causes_header` as it stands right after that delivery
        (docs/wire-format.md), so a batch sends the same bytes as one-by-one delivery.
        Every taken head counts as delivered in the next :meth:`take_deltas`: the host
        must hand every entry to its handler before it commits.

        Args:
            limit: at most this many (>= 1).

        Returns:
            ``[(channel, position, timestamp_ms, key, value, headers, causes_header)]``
            in delivery order; ``headers`` are application headers only; empty when
            nothing is deliverable.

        Raises:
            ParsleyFailClosedError: as :meth:`deliver_next`; entries taken before the
                refusal are lost with the batch, and the host aborts.
        """
        out: list[Delivered] = []
        deliver_next = self.deliver_next
        causes_header = self.causes_header
        while len(out) < limit:
            msg = deliver_next()
            if msg is None:
                break
            out.append((msg.channel, msg.position, msg.timestamp_ms, msg.key, msg.value,
                        msg.headers, causes_header()))
        return out
