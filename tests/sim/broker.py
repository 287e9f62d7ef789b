"""A simulated broker: per-channel logs whose offsets are not contiguous.

Each channel's log assigns offsets the way Kafka's does under transactions:
every record takes one offset, every transaction marker (commit or abort)
takes one offset on each channel the transaction touched, and the records of
an aborted transaction keep their offsets but stay invisible to a
``read_committed`` reader. A reader therefore sees gaps, which is what
obligation V4 asks of a simulator ("markers and aborts never wedge the
frontier", README.md, "The verification kit"). Steps are atomic in the
simulation, so no transaction is
ever open while someone reads; the last stable offset is the log end.

Topic deletion removes a topic from fetches and from identity answers; the
records stay here only so that the simulation can report on them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from uuid import UUID

from parsley.engine.channel import ChannelId, Header, ReceivedMessage

from .generator import TopicSpec

__all__ = ["Broker", "ChannelLog", "Outgoing", "Record", "at"]


def at(channel: ChannelId, position: int) -> str:
    """Short trace label ``<first 4 hex of topic id>-<partition>@<offset>``."""
    return f"{channel.topic_id.hex[:4]}-{channel.partition}@{position}"


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record before the broker gives it an offset (a producer's send)."""

    channel: ChannelId
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class Record:
    """A record in a log with its offset. ``committed`` is False for aborted records."""

    channel: ChannelId
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    committed: bool

    def as_received(self) -> ReceivedMessage:
        """What a consumer hands the engine for this record."""
        return ReceivedMessage(self.channel, self.offset, self.timestamp_ms, self.key,
                               self.value, self.headers)


class ChannelLog:
    """One channel's log: offsets, markers, and the read_committed view.

    Args:
        base_offset: the first offset the log assigns (a log whose earlier
            segments are long gone starts high; positions are int64).
    """

    __slots__ = ("base_offset", "kinds", "log_start", "visible", "visible_offsets")

    def __init__(self, base_offset: int = 0) -> None:
        self.base_offset = base_offset
        self.log_start = base_offset  # earliest retained offset (delete-records moves it)
        self.kinds: list[str] = []  # per offset from base_offset: "D", "A" aborted, "M" marker
        self.visible: list[Record] = []  # committed data records in offset order
        self.visible_offsets: list[int] = []

    @property
    def end_offset(self) -> int:
        """The next offset the log will assign (Kafka's log-end offset)."""
        return self.base_offset + len(self.kinds)

    def append(self, out: Outgoing, committed: bool) -> Record:
        """Give ``out`` the next offset; visible only when ``committed``."""
        record = Record(out.channel, self.end_offset, out.timestamp_ms, out.key, out.value,
                        out.headers, committed)
        self.kinds.append("D" if committed else "A")
        if committed:
            self.visible.append(record)
            self.visible_offsets.append(record.offset)
        return record

    def marker(self) -> None:
        """A transaction marker: it takes an offset and is never delivered."""
        self.kinds.append("M")

    def next_visible(self, position: int) -> Record | None:
        """The first committed data record at or after ``position`` (read_committed fetch).

        Raises:
            AssertionError: ``position`` is below the log start: the substrate
                refuses such reads (SPEC assumption 15), so a host must never ask.
        """
        assert position >= self.log_start, (
            f"fetch at {position} below the log start {self.log_start} (retention outran a reader)")
        i = bisect.bisect_left(self.visible_offsets, position)
        return self.visible[i] if i < len(self.visible) else None

    def last_visible_offset(self) -> int:
        """Offset of the last committed data record, or -1 when there is none."""
        return self.visible_offsets[-1] if self.visible_offsets else -1

    def layout(self) -> str:
        """The log as one letter per offset from the base (D/A/M), for failure messages."""
        return "".join(self.kinds)


class Broker:
    """Every channel's log, plus which topics still exist.

    Args:
        topics: the topics to create, each with its partitions.
    """

    def __init__(self, topics: Iterable[TopicSpec],
                 base_offsets: Mapping[ChannelId, int] | None = None) -> None:
        self.topics = {t.name: t for t in topics}
        bases = base_offsets or {}
        self.logs: dict[ChannelId, ChannelLog] = {
            ch: ChannelLog(bases.get(ch, 0)) for t in self.topics.values() for ch in t.channels()
        }
        self.deleted: set[UUID] = set()

    def exists(self, topic_id: UUID) -> bool:
        """Whether a topic with this id exists (an identity answer, SPEC assumption 15)."""
        return topic_id not in self.deleted and any(
            t.topic_id == topic_id for t in self.topics.values())

    def live_names(self) -> dict[str, UUID]:
        """Name -> id of every topic that still exists."""
        return {n: t.topic_id for n, t in self.topics.items() if t.topic_id not in self.deleted}

    def transaction(self, sends: Iterable[Outgoing], *, commit: bool) -> list[Record]:
        """Append ``sends`` as one transaction, then a marker on each channel touched.

        Returns:
            The records with their offsets, in send order (aborted ones too).
        """
        records = [self.logs[s.channel].append(s, committed=commit) for s in sends]
        for ch in dict.fromkeys(r.channel for r in records):
            self.logs[ch].marker()
        return records

    def produce(self, out: Outgoing) -> Record:
        """A plain (idempotent, non-transactional) send: contiguous offsets, no marker."""
        return self.logs[out.channel].append(out, committed=True)

    def fetch(self, channel: ChannelId, position: int) -> Record | None:
        """read_committed fetch of one record at or after ``position``; None if none or deleted."""
        if channel.topic_id in self.deleted:
            return None
        return self.logs[channel].next_visible(position)

    def end_offset(self, channel: ChannelId) -> int:
        """The channel's log-end offset (also its last stable offset here)."""
        return self.logs[channel].end_offset

    def log_start(self, channel: ChannelId) -> int:
        """The channel's earliest retained offset (Kafka's log-start offset)."""
        return self.logs[channel].log_start

    def truncate(self, channel: ChannelId, offset: int) -> None:
        """``kafka-delete-records``: raise the log start to ``offset`` (never lowers it)."""
        log = self.logs[channel]
        log.log_start = max(log.log_start, min(offset, log.end_offset))

    def delete_topic(self, name: str) -> None:
        """Delete a topic: its channels stop answering fetches and identity checks."""
        self.deleted.add(self.topics[name].topic_id)
