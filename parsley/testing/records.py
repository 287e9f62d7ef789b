"""What the test driver shows: records in its in-memory topics, and held messages.

A :class:`Record` is one record of a topic as a ``read_committed`` consumer would
read it: its partition and offset, the raw key, value and headers, which process
and task sent it (``None`` for a piped record), and, decoded on access, its key
and value (by the serdes its writer declared) and its ``parsley.causes``
(docs/wire-format.md) by topic name. A :class:`HeldMessage` is one message a task
holds back, with what its channel's head waits for (docs/failing-closed.md,
"Diagnosis").
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from parsley.channels import Channel
from parsley.engine.channel import Header
from parsley.status import Blocker
from parsley.wire import CAUSES_HEADER, decode_causes, is_reserved

__all__ = ["Cause", "HeldMessage", "Record", "TopicLog"]

Cause = tuple[str, int]
"""A cause's channel as the driver names it: ``(topic name, partition)``; a topic id
no declared topic has is named by its UUID string."""


@dataclass(frozen=True, slots=True)
class Record:
    """One record in a driver topic.

    Attributes:
        topic: the topic name.
        partition: its partition.
        offset: its offset in the partition (a sent record's offsets skip one after
            each transaction, for its commit marker, as on a broker).
        timestamp_ms: the record timestamp, ms since the epoch.
        key_bytes: the raw key, or ``None``.
        value_bytes: the raw value, or ``None`` (a tombstone).
        raw_headers: every header as written, ``parsley.causes`` included.
        sender: the process that sent it, or ``None`` for a piped record.
        task: the sending task, or ``None`` for a piped record.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key_bytes: bytes | None
    value_bytes: bytes | None
    raw_headers: tuple[Header, ...]
    sender: str | None
    task: int | None
    channel: Channel[Any, Any] = field(repr=False, compare=False)
    """The declaration whose serdes decode :attr:`key` and :attr:`value`: the sender's
    declared send channel, or for a piped record the first declaration of the topic."""
    topic_names: Mapping[UUID, str] = field(repr=False, compare=False)
    """Topic id -> name, for :attr:`causes`."""

    @property
    def key(self) -> Any:
        """The key, decoded by the declared key serde (``None`` for a null key).

        Raises:
            Whatever the serde raises for bytes it cannot decode.
        """
        return None if self.key_bytes is None else self.channel.key_serde.deserialize(
            self.key_bytes)

    @property
    def value(self) -> Any:
        """The value, decoded by the declared value serde (``None`` for a tombstone).

        Raises:
            Whatever the serde raises for bytes it cannot decode.
        """
        return None if self.value_bytes is None else self.channel.value_serde.deserialize(
            self.value_bytes)

    @property
    def headers(self) -> tuple[Header, ...]:
        """Application headers: :attr:`raw_headers` without ``parsley.*`` ones, as a
        handler's ``Delivery.headers`` shows them."""
        return tuple(h for h in self.raw_headers if not is_reserved(h[0]))

    @property
    def causes_header(self) -> bytes | None:
        """The raw ``parsley.causes`` value (the first, if several), or ``None`` when
        the record has none."""
        return next((v for k, v in self.raw_headers if k == CAUSES_HEADER), None)

    @property
    def causes(self) -> dict[Cause, int]:
        """The ``parsley.causes`` header decoded: ``{(topic, partition): offset}``, the
        highest position per channel of what led to this record (docs/model.md);
        empty when the record has no header.

        Raises:
            ParsleyFailClosedError: ``UNDECODABLE_METADATA`` for a header that is not
                a valid encoding (docs/wire-format.md).
        """
        if not any(k == CAUSES_HEADER for k, _ in self.raw_headers):
            return {}
        decoded = decode_causes(self.causes_header)
        names = self.topic_names
        return {(names.get(ch.topic_id, str(ch.topic_id)), ch.partition): position
                for ch, position in decoded.items()}


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """A message a task holds back: fed, not yet delivered (docs/model.md, "Hold-back").

    Attributes:
        process: the process name.
        task: the task number.
        record: the held record.
        head: whether it is the head of its channel's hold-back buffer, the only
            message the delivery rule decides on; the others wait behind it in
            offset order.
        blockers: for a head, every cause it waits for (topic, partition, the
            offset required and the offset the channel has settled to, ``None`` when
            nothing is settled yet); empty for a message behind the head.
    """

    process: str
    task: int
    record: Record
    head: bool
    blockers: tuple[Blocker, ...]

    @property
    def topic(self) -> str:
        """The held record's topic."""
        return self.record.topic

    @property
    def partition(self) -> int:
        """The held record's partition."""
        return self.record.partition

    @property
    def offset(self) -> int:
        """The held record's offset (its position)."""
        return self.record.offset


class TopicLog:
    """One partition's records in offset order, and its next offset.

    Offsets start at 0 and rise by one per record; :meth:`mark` leaves a gap of one,
    as a transaction's commit marker takes an offset on a broker.
    """

    __slots__ = ("_offsets", "next_offset", "records")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self._offsets: list[int] = []
        self.next_offset = 0

    def append(self, record: Record) -> None:
        """Add ``record``, whose offset must be :attr:`next_offset`."""
        if record.offset != self.next_offset:
            raise ValueError(f"offset {record.offset} appended where {self.next_offset} is next")
        self.records.append(record)
        self._offsets.append(record.offset)
        self.next_offset += 1

    def mark(self) -> None:
        """Take one offset for a transaction's commit marker (never read as a record)."""
        self.next_offset += 1

    def from_offset(self, position: int) -> list[Record]:
        """The records at offsets ``>= position``, in offset order."""
        return self.records[bisect.bisect_left(self._offsets, position):]

    def at(self, offset: int) -> Record:
        """The record at ``offset``.

        Raises:
            KeyError: no record there (a marker's offset, or past the end).
        """
        i = bisect.bisect_left(self._offsets, offset)
        if i == len(self._offsets) or self._offsets[i] != offset:
            raise KeyError(offset)
        return self.records[i]
