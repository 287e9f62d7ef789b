"""Load generator for the end-to-end relay benchmarks (docs/performance.md).

Every message value starts with a fixed 18-byte stamp, padded with zeros to the
requested size (100 B or 1 KiB)::

    offset 0   u8    kind     (PLAIN, CAUSE or HELD; see below)
    offset 1   u8    reserved (0)
    offset 2   i64   seq      (the message's sequence number in its run, >= 0)
    offset 10  i64   sent_us  (wall-clock send time, µs since the epoch)

big-endian. The relay copies values verbatim, so the reader recovers the send
time of every output record from its value (microsecond resolution; the record
timestamp of the input, in ms, is the same instant). A ``HELD`` message's
latency is also measured from the send time of its cause, joined by ``seq``.

For the Parsley runs each message carries a ``parsley.causes`` header
(``parsley.wire.encode_causes``) whose 16-entry frontier names two topics the
relay does not receive, eight partitions each, with positions that advance with
``seq`` (an upstream relay's frontier: one entry moves with each of its deliveries). Causes
on channels a process does not receive are ignored by the decision rule
(docs/model.md, "The decision rule"), so such a message is deliverable at once, yet the
worker pays for decoding and merging the whole header.

The diamond: the relay receives topics A and B. Pair ``i`` is message A@i and
message B@i (both topics fresh, single partition, written by one idempotent
non-transactional producer in pair order, so pair ``i`` sits at offset ``i`` of
both topics). For even ``i`` A@i names B@i as a cause and is produced first; for
odd ``i`` B@i names A@i and is produced first. So half the messages arrive
before their cause on the other topic and are held until it is fed.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from uuid import UUID

from parsley import wire
from parsley.engine.channel import ChannelId

__all__ = [
    "CAUSE",
    "HELD",
    "PLAIN",
    "STAMP",
    "Stamp",
    "Unreceived",
    "diamond_pair",
    "frontier_header",
    "make_value",
    "now_us",
    "parse_value",
    "producer_config",
]

PLAIN = 0
"""A message with no cause on a received channel."""
CAUSE = 1
"""The diamond message another one waits for."""
HELD = 2
"""The diamond message produced before its cause (held, then released)."""

STAMP = struct.Struct(">BBqq")
"""The value stamp: kind, reserved, seq, sent_us (18 bytes, big-endian)."""


@dataclass(frozen=True, slots=True)
class Stamp:
    """A parsed value stamp.

    Attributes:
        kind: PLAIN, CAUSE or HELD.
        seq: sequence number in the run (diamond: the pair index).
        sent_us: send time, µs since the epoch.
    """

    kind: int
    seq: int
    sent_us: int


def now_us() -> int:
    """Wall-clock time in µs since the epoch (comparable across processes on one host)."""
    return time.time_ns() // 1000


def make_value(kind: int, seq: int, size: int, sent_us: int | None = None) -> bytes:
    """A message value of exactly ``size`` bytes carrying its stamp.

    Args:
        kind: PLAIN, CAUSE or HELD.
        seq: sequence number (>= 0).
        size: total value length, bytes (>= 18).
        sent_us: the send time to stamp, µs; default now.

    Raises:
        ValueError: ``size`` smaller than the stamp.
    """
    if size < STAMP.size:
        raise ValueError(f"value size {size} B is below the {STAMP.size}-byte stamp")
    stamp = STAMP.pack(kind, 0, seq, now_us() if sent_us is None else sent_us)
    return stamp + bytes(size - STAMP.size)


def parse_value(value: bytes | None) -> Stamp | None:
    """The stamp of a value made by :func:`make_value`, or None when it has none."""
    if value is None or len(value) < STAMP.size:
        return None
    kind, _, seq, sent_us = STAMP.unpack_from(value)
    return Stamp(kind, seq, sent_us)


@dataclass(frozen=True, slots=True)
class Unreceived:
    """The upstream frontier carried by every Parsley-run message: channels not received.

    Attributes:
        topics: topic ids named in the header (none of them received by the relay).
        partitions: partitions per topic; ``len(topics) * partitions`` entries.
    """

    topics: tuple[UUID, ...] = (UUID(int=0xA11CE0001), UUID(int=0xA11CE0002))
    partitions: int = 8

    def channels(self) -> list[ChannelId]:
        """Every named channel, topic-major."""
        return [ChannelId(t, p) for t in self.topics for p in range(self.partitions)]


def frontier_header(
    seq: int,
    channels: Sequence[ChannelId],
    extra: tuple[ChannelId, int] | None = None,
    moving: bool = False,
) -> list[tuple[str, bytes]]:
    """The ``parsley.causes`` header of message ``seq``: positions that move with seq.

    The shape of an upstream relay's frontier: the entry of the channel it relays
    from moves with every message, the other entries (its own upstream) stay put
    between messages. So every header is distinct, but has its predecessor's shape: the
    Python engine decodes and merges each in full, the native engine patches the
    predecessor's decoding (docs/performance.md, item 9); the case ``perf.bench_engine``
    calls realistic ("distinct, 1 entry moves").

    Args:
        seq: the message's sequence number; entry 0 is at ``1_000_000 + seq``, entry
            ``j > 0`` at ``1_000_000 + j`` (``moving=True``: ``1_000_000 + 16 * seq + j``,
            every entry moving, the engine's worst case).
        channels: channels the relay does not receive (settled by the decision rule).
        extra: one more (channel, position) cause, e.g. the diamond's cause on the
            other received topic; replaces the last unreceived channel so the header
            keeps the same entry count.
        moving: move every entry with ``seq``.

    Returns:
        Kafka headers ``[("parsley.causes", bytes)]`` (wire format, docs/wire-format.md).
    """
    if moving:
        causes = {ch: 1_000_000 + 16 * seq + j for j, ch in enumerate(channels)}
    else:
        causes = {ch: 1_000_000 + (seq if j == 0 else j) for j, ch in enumerate(channels)}
    if extra is not None:
        causes.pop(channels[-1], None)
        causes[extra[0]] = extra[1]
    return [(wire.CAUSES_HEADER, wire.encode_causes(causes))]


def diamond_pair(
    i: int, a: ChannelId, b: ChannelId, unreceived: Sequence[ChannelId]
) -> tuple[tuple[str, int, list[tuple[str, bytes]]], tuple[str, int, list[tuple[str, bytes]]]]:
    """The two messages of diamond pair ``i``, in production order.

    Args:
        i: pair index = the offset both messages get on their (fresh) topics.
        a, b: the relay's two received channels (partition 0 of topics A and B).
        unreceived: channels not received, for the rest of each 16-entry header.

    Returns:
        ``((topic, kind, headers), (topic, kind, headers))`` where topic is ``"a"``
        or ``"b"``: the held message first, its cause second.
    """
    if i % 2 == 0:
        held = ("a", HELD, frontier_header(i, unreceived, extra=(b, i)))
        cause = ("b", CAUSE, frontier_header(i, unreceived))
    else:
        held = ("b", HELD, frontier_header(i, unreceived, extra=(a, i)))
        cause = ("a", CAUSE, frontier_header(i, unreceived))
    return held, cause


def producer_config(bootstrap_servers: str) -> dict[str, object]:
    """The load producer: idempotent (contiguous offsets), acks=all, small linger."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
    }


def paced(count: int, rate_per_s: float, send: Callable[[int], None],
          poll: Callable[[], object]) -> float:
    """Call ``send(i)`` for i in range(count) at ``rate_per_s``; returns the seconds taken.

    Sleeps between sends (never busy-waits, the machine is shared); ``poll`` is
    called after each send to serve delivery callbacks.
    """
    start = time.monotonic()
    for i in range(count):
        due = start + i / rate_per_s
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        send(i)
        poll()
    return time.monotonic() - start
