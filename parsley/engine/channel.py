"""Channels, positions and the messages the engine is fed.

A *channel* is one partition of one topic, named by the topic's Kafka topic
id (a UUID, brokers 3.7.0+) and the partition number, so a topic deleted and
recreated under its name is a different channel. A *position* is a Kafka
offset on that channel.

Pure: standard library only (see ``tests/unit/test_purity.py``).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

__all__ = [
    "CHANNEL_BYTES",
    "FED_TO_END",
    "MAX_PARTITION",
    "ChannelId",
    "DeliverableMessage",
    "Header",
    "ReceivedMessage",
    "describe_channel",
    "describe_key",
    "kafka_topic_id",
]

FED_TO_END: Final = 2**63 - 1
"""The "fed to its end" sentinel (Java ``Long.MAX_VALUE``): a channel whose
topic is confirmed deleted covers every position. Never a legal wire position
(wire constraint 7)."""

MAX_PARTITION: Final = 2**31 - 1
"""Largest partition number a channel can have (Java ``int``; wire varints hold 0..2^31-1)."""

CHANNEL_BYTES: Final = 20
"""Size of a channel's flat encoding: 16-byte topic id, then int32 big-endian partition."""

_PARTITION = struct.Struct(">i")

Header = tuple[str, bytes | None]
"""One Kafka record header: (key, value); a value may be ``None`` (a null header)."""


@dataclass(frozen=True, slots=True, order=True)
class ChannelId:
    """One topic-partition, identified by topic id (docs/model.md terms: a channel).

    Ordered as on the wire (docs/wire-format.md, "Constraints", 4): topic
    id compared as 16 unsigned bytes, then partition numerically.
    ``uuid.UUID`` compares by its 128-bit integer, which is exactly the
    unsigned big-endian byte order, so the dataclass ordering is the wire's.

    Attributes:
        topic_id: Kafka topic id; never the all-zero UUID for a real topic.
        partition: partition number, 0 .. 2^31-1.

    Raises:
        ValueError: partition out of range.
        TypeError: topic_id is not a ``uuid.UUID``.
    """

    topic_id: UUID
    partition: int
    # The hash, computed once: channels key every engine map, and hashing a UUID runs
    # Python code (uuid.UUID.__hash__), which dominated the engine's hot path.
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.topic_id, UUID):
            raise TypeError(f"topic_id must be a uuid.UUID, got {type(self.topic_id).__name__}")
        if not 0 <= self.partition <= MAX_PARTITION:
            raise ValueError(f"partition must be in 0..2^31-1, got {self.partition}")
        object.__setattr__(self, "_hash", hash((self.topic_id, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        # Java's Channel renders as <topicId>-<partition>; details use this form.
        return f"{self.topic_id}-{self.partition}"

    def to_bytes(self) -> bytes:
        """The 20-byte flat form: topic id (MSB 8, LSB 8), then int32 BE partition.

        Source: docs/model.md, "The stored form" (a channel is 20 bytes).
        """
        return self.topic_id.bytes + _PARTITION.pack(self.partition)

    @classmethod
    def from_bytes(cls, data: bytes) -> ChannelId:
        """Parse the 20-byte flat form.

        Raises:
            ValueError: ``data`` is not exactly 20 bytes, or the partition is negative.
        """
        if len(data) != CHANNEL_BYTES:
            raise ValueError(f"a channel is {CHANNEL_BYTES} bytes, got {len(data)}")
        (partition,) = _PARTITION.unpack_from(data, 16)
        return cls(UUID(bytes=bytes(data[:16])), partition)


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A record as the worker fetched it, before the engine decides anything.

    Attributes:
        channel: the channel it was fetched from.
        position: its Kafka offset on that channel (inclusive; the record's own offset).
        timestamp_ms: the record timestamp, ms since the epoch.
        key: raw key bytes, or ``None``.
        value: raw value bytes, or ``None``.
        headers: every header as fetched, in order, ``parsley.causes`` included;
            the engine extracts the causes and strips every ``parsley.*`` header
            before anything reaches application code.
    """

    channel: ChannelId
    position: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()


@dataclass(frozen=True, slots=True)
class DeliverableMessage:
    """A message the engine has decided to deliver: what the handler frame gets.

    Returned by ``ProcessEngine.deliver_next()``, which has already applied
    the delivery to the engine's state (frontier and delivered past).

    Attributes:
        channel: the channel it arrived on.
        position: its offset on that channel (inclusive; the record's own offset).
        timestamp_ms: the record timestamp, ms since the epoch.
        key: raw key bytes, or ``None``.
        value: raw value bytes, or ``None``.
        headers: application headers only, in arrival order; every header
            whose key starts with ``parsley.`` is stripped (docs/wire-format.md,
            "Placement").
        causes: the causes its ``parsley.causes`` header carried, as
            ``(channel, position)`` pairs in channel order; empty when the
            header was absent or empty.
    """

    channel: ChannelId
    position: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    causes: tuple[tuple[ChannelId, int], ...]


def kafka_topic_id(topic_id: UUID) -> str:
    """A topic id as Kafka's tools print it: the 16 bytes in URL-safe base64 without
    padding (Java ``org.apache.kafka.common.Uuid.toString``), the ``TopicId`` that
    ``kafka-topics --describe`` shows, e.g. ``Iv8Irqw9RYmUoxJaXCaJow``."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def describe_channel(ch: ChannelId, names: Mapping[UUID, str], position: int | None = None) -> str:
    """A channel (and optionally a position on it) as a refusal detail names it.

    Args:
        ch: the channel.
        names: topic id -> topic name, for the ids whose name the task knows.
        position: an offset on the channel, or ``None`` to name the channel only.

    Returns:
        ``topic 'shop.orders' partition 1 offset 12 (topic id Iv8Irqw9RYmUoxJaXCaJow)``,
        or, for an id whose name the task does not know, ``topic id
        Iv8Irqw9RYmUoxJaXCaJow (name not known to this task) partition 1 offset 12``:
        every part an operator needs for ``kafka-console-consumer --topic --partition
        --offset`` or ``kafka-topics --describe`` (docs/failing-closed.md, "Naming a
        channel").
    """
    at = "" if position is None else f" offset {position}"
    name = names.get(ch.topic_id)
    if name is None:
        return (f"topic id {kafka_topic_id(ch.topic_id)} (name not known to this task) "
                f"partition {ch.partition}{at}")
    return f"topic '{name}' partition {ch.partition}{at} (topic id {kafka_topic_id(ch.topic_id)})"


def describe_key(key: bytes | None) -> str:
    """A record key as a refusal detail names it: ``no key (null)``, ``key 'abc'`` for
    printable UTF-8, else ``key 0x<hex>`` (the first 64 bytes, then ``...``)."""
    if key is None:
        return "no key (null)"
    try:
        text = key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and len(text) <= 200:
        return f"key {text!r}"
    shown = key[:64].hex()
    return f"key 0x{shown}{'...' if len(key) > 64 else ''}"
