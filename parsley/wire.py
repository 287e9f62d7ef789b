"""The ``parsley.causes`` header: encode, decode, size, placement.

Every record a Parsley process sends carries exactly one ``parsley.causes`` header naming,
per channel, the highest position among its causes. The format is version 1 of the Java
implementation's frozen grammar, byte for byte, so Java and Python processes read each
other's records. The grammar, its constraints (one cause set has exactly one encoding) and
the size formula are in docs/wire-format.md, "Grammar", "Constraints" and "Size"; the source
is Java's ``CausesCodec``.

Decoding is strict and fails closed: a malformed value raises
:class:`~parsley.refusals.ParsleyFailClosedError` with reason ``UNDECODABLE_METADATA`` and
the Java implementation's diagnosis text. The engine, which knows the record, re-raises it
with ``<channel>@<position>: `` in front.

``decode_causes``, ``encode_causes`` and ``encoded_size`` are the implementation
:mod:`parsley.native` chose: the Rust codec (``native/src/wire.rs``) or the pure-Python
reference here (``reference_*``), with the same values and errors (docs/operations.md,
"Choosing the engine"). Each keeps its own bounded channel cache. Pure: standard library
only, plus the extension module (``tests/unit/test_purity.py``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final
from uuid import UUID

from parsley.engine.channel import FED_TO_END, MAX_PARTITION, ChannelId, Header
from parsley.native import BUILT, NATIVE
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "CAUSES_HEADER",
    "EMPTY_CAUSES",
    "FORMAT_VERSION",
    "RESERVED_PREFIX",
    "cached_channel",
    "causes_from_headers",
    "decode_causes",
    "encode_causes",
    "encoded_size",
    "is_reserved",
    "reference_decode_causes",
    "reference_encode_causes",
    "reference_encoded_size",
    "split_causes_header",
    "strip_reserved",
    "varint_size",
]

CAUSES_HEADER: Final = "parsley.causes"
"""The one header key carrying causes (docs/wire-format.md, "Placement")."""

RESERVED_PREFIX: Final = "parsley."
"""Header-key prefix reserved for Parsley; application headers may not use it."""

FORMAT_VERSION: Final = 1
"""The version byte leading every value (constraint 1)."""

EMPTY_CAUSES: Final = b"\x01\x00"
"""The value of a header carrying no causes: version 1, zero topics."""

_MAX_VARINT: Final = MAX_PARTITION  # 2^31 - 1, Java's non-negative int range
_ZERO_ID: Final = bytes(16)
_POSITION = struct.Struct(">q")
_UNSIGNED_POSITION = struct.Struct(">Q")
_TRUNCATED: Final = "truncated causes header"

# A bounded cache of immutable values. Topic ids and channels repeat from header
# to header (a frontier is mostly the same channels every time), and building a
# UUID and a validated ChannelId costs ~1.1 us per entry against ~40 ns for a
# dict hit; perf/bench_wire.py measures the difference. The whole cache is
# cleared when it holds 4,096 topics or 65,536 channels (a few MB), so memory
# stays bounded whatever a sender writes.
_CACHE_TOPICS: Final = 4096
_CACHE_CHANNELS: Final = 65_536
_Topic = tuple[UUID, dict[int, ChannelId], bytes]  # (id, partition -> channel, raw id)
_channel_cache: dict[bytes, _Topic] = {}
_cached_channels = 0


def _undecodable(diagnosis: str) -> ParsleyFailClosedError:
    return ParsleyFailClosedError(Reason.UNDECODABLE_METADATA, diagnosis)


def _clear_cache() -> None:
    """Empty the channel caches (this module's and, when built, the native codec's)."""
    global _cached_channels
    _channel_cache.clear()
    _cached_channels = 0
    if BUILT is not None:
        BUILT.clear_channel_cache()


def _topic_entry(raw_id: bytes) -> _Topic:
    entry = _channel_cache.get(raw_id)
    if entry is None:
        if len(_channel_cache) >= _CACHE_TOPICS:
            _clear_cache()
        entry = (UUID(bytes=raw_id), {}, raw_id)
        _channel_cache[raw_id] = entry
    return entry


def _channel(topic: _Topic, partition: int) -> ChannelId:
    global _cached_channels
    by_partition = topic[1]
    channel = by_partition.get(partition)
    if channel is None:
        if _cached_channels >= _CACHE_CHANNELS:
            _clear_cache()
            # keep the topic being decoded attached, emptied, so the count stays exact
            by_partition.clear()
            _channel_cache[topic[2]] = topic
        channel = ChannelId(topic[0], partition)
        by_partition[partition] = channel
        _cached_channels += 1
    return channel


def cached_channel(raw_id: bytes, partition: int) -> ChannelId:
    """The channel for a 16-byte topic id and a partition, from the decoder's cache.

    The same (immutable) object is returned for the same channel while it stays
    cached; the cache is bounded (4,096 topics, 65,536 channels, cleared
    wholesale when full). For other flat-form readers (the held-blob codec).

    Raises:
        ValueError: ``raw_id`` is not 16 bytes, or the partition is out of range.
    """
    topic = _channel_cache.get(raw_id)
    if topic is None:
        topic = _topic_entry(bytes(raw_id))
    channel = topic[1].get(partition)
    if channel is None:
        channel = _channel(topic, partition)
    return channel


def _read_varint(data: bytes, i: int, n: int, field: str) -> tuple[int, int]:
    """Read a multi-byte varint starting at ``i``; return (value, next index).

    The one-byte case never reaches here: callers test ``data[i] < 0x80``
    inline. Checks mirror Java's ``readUnsignedVarint``: a fifth byte (shift
    28) must have no bits beyond the low three (mask ``F8``, which also refuses
    a continuation bit there), and a terminal zero byte after the first is a
    non-minimal spelling.
    """
    value = 0
    shift = 0
    while True:
        if i >= n:
            raise _undecodable(_TRUNCATED)
        b = data[i]
        i += 1
        if shift == 28 and b & 0xF8:
            raise _undecodable(f"{field} varint exceeds the non-negative int range")
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if shift and not b & 0x7F:
                raise _undecodable(f"non-minimal varint in {field}")
            return value, i
        shift += 7


def reference_decode_causes(value: bytes | None) -> dict[ChannelId, int]:
    """Decode a ``parsley.causes`` header value (the pure-Python reference of
    :func:`decode_causes`).

    Args:
        value: the raw header value (``bytes``; a ``bytearray`` or
            ``memoryview`` is copied), or ``None`` for a header present with
            a null value. Grammar: docs/wire-format.md, "Grammar".

    Returns:
        Per channel, the highest causal position (a Kafka offset, inclusive:
        the entry stands for every cause on that channel at or below it). The
        dict iterates in channel order. ``{}`` for ``01 00``.

    Raises:
        ParsleyFailClosedError: reason ``UNDECODABLE_METADATA``, detail one of
            (checked in this order, as Java's ``CausesCodec.decode``):
            ``causes header present with null value``;
            ``unknown causes format version N`` (constraint 1);
            ``truncated causes header`` (running out of bytes anywhere);
            ``zero topic id at group G; the substrate never assigns it to a
            channel`` (constraint 5);
            ``topics not strictly ascending at <uuid>`` (constraint 3);
            ``topic <uuid> names zero partitions`` (constraint 4);
            ``partitions not strictly ascending at <uuid>-<p>`` (constraint 4);
            ``negative position P on <uuid>-<p>`` (constraint 6);
            ``position P on <uuid>-<p> is beyond any position a channel can
            assign`` (constraint 7);
            ``N trailing bytes after T topic groups`` (constraint 2);
            ``non-minimal varint in <field>`` and ``<field> varint exceeds the
            non-negative int range`` for ``topic count``, ``partition count``
            and ``partition``.

    Source: docs/wire-format.md ("Grammar", "Constraints" 1-7; Java
    ``CausesCodec.decode``). Constraint 8 (a position names a committed record)
    cannot be decided from bytes and is not checked by any reader.
    """
    if value is None:
        raise _undecodable("causes header present with null value")
    data = value if type(value) is bytes else bytes(value)
    n = len(data)
    if n == 0:
        raise _undecodable(_TRUNCATED)
    if data[0] != FORMAT_VERSION:
        raise _undecodable(f"unknown causes format version {data[0]}")
    out: dict[ChannelId, int] = {}
    if n == 2 and data[1] == 0:
        return out
    unpack = _UNSIGNED_POSITION.unpack_from
    cache_get = _channel_cache.get
    fed_to_end = FED_TO_END
    if n < 2:
        raise _undecodable(_TRUNCATED)
    topics = data[1]
    i = 2
    if topics >= 0x80:
        topics, i = _read_varint(data, 1, n, "topic count")
    previous = b""
    try:
        for group in range(topics):
            j = i + 16
            if j > n:
                raise _undecodable(_TRUNCATED)
            raw_id = data[i:j]
            if raw_id == _ZERO_ID:
                raise _undecodable(
                    f"zero topic id at group {group}; the substrate never assigns it to a channel"
                )
            if raw_id <= previous:
                raise _undecodable(f"topics not strictly ascending at {UUID(bytes=raw_id)}")
            previous = raw_id
            topic = cache_get(raw_id)
            if topic is None:
                topic = _topic_entry(raw_id)
            by_partition = topic[1]
            count = data[j]  # IndexError -> truncated
            i = j + 1
            if count >= 0x80:
                count, i = _read_varint(data, j, n, "partition count")
            elif count == 0:
                raise _undecodable(f"topic {topic[0]} names zero partitions")
            last = -1
            for _ in range(count):
                partition = data[i]
                i += 1
                if partition >= 0x80:
                    partition, i = _read_varint(data, i - 1, n, "partition")
                if partition <= last:
                    raise _undecodable(
                        f"partitions not strictly ascending at {topic[0]}-{partition}"
                    )
                last = partition
                (position,) = unpack(data, i)  # unsigned; struct.error -> truncated
                i += 8
                channel = by_partition.get(partition)
                if channel is None:
                    channel = _channel(topic, partition)
                if position >= fed_to_end:  # one test for both constraints 6 and 7
                    if position > fed_to_end:
                        raise _undecodable(f"negative position {position - 2**64} on {channel}")
                    raise _undecodable(
                        f"position {position} on {channel} "
                        "is beyond any position a channel can assign"
                    )
                out[channel] = position
    except (IndexError, struct.error):
        raise _undecodable(_TRUNCATED) from None
    if i != n:
        raise _undecodable(f"{n - i} trailing bytes after {topics} topic groups")
    return out


def varint_size(value: int) -> int:
    """Width in bytes of ``value`` as a minimal unsigned varint (1..5).

    Raises:
        ValueError: ``value`` outside 0..2^31-1.
    """
    if value < 0x80 and value >= 0:
        return 1
    if not 0 <= value <= _MAX_VARINT:
        raise ValueError(f"varint value must be in 0..2^31-1, got {value}")
    return (value.bit_length() + 6) // 7


def _group(causes: Mapping[ChannelId, int]) -> dict[int, list[tuple[int, int]]]:
    """Group by topic id (as int): {topic: [(partition, position), ...]}, validated.

    Raises ValueError for what every reader refuses (constraints 5-7), so such
    bytes are never written.
    """
    if causes:
        low = min(causes.values())
        high = max(causes.values())
        if low < 0 or high >= FED_TO_END:
            bad = low if low < 0 else high
            channel = next(c for c, p in causes.items() if p == bad)
            raise ValueError(
                f"position {bad} on {channel} cannot be encoded: it must be in 0..2^63-2"
            )
    groups: dict[int, list[tuple[int, int]]] = {}
    get = groups.get
    for channel, position in causes.items():
        topic = channel.topic_id.int
        pairs = get(topic)
        if pairs is None:
            groups[topic] = [(channel.partition, position)]
        else:
            pairs.append((channel.partition, position))
    if 0 in groups:
        raise ValueError(
            f"channel {ChannelId(UUID(int=0), groups[0][0][0])} names the zero topic id, "
            "which no topic can have"
        )
    return groups


def _put_varint(buf: bytearray, value: int) -> None:
    while value >= 0x80:
        buf.append((value & 0x7F) | 0x80)
        value >>= 7
    buf.append(value)


def reference_encode_causes(causes: Mapping[ChannelId, int]) -> bytes:
    """Encode a cause set in its one canonical form (the pure-Python reference of
    :func:`encode_causes`).

    Args:
        causes: per channel, the highest causal position (offset, inclusive).
            Any iteration order; the output sorts by channel order (topic id
            as unsigned bytes, then partition), one group per topic.

    Returns:
        The header value; ``01 00`` for an empty mapping. Equal mappings give
        equal bytes, and the same bytes Java's ``CausesCodec.encode`` gives.
        Its length is :func:`encoded_size`.

    Raises:
        ValueError: a position outside 0..2^63-2 or a zero topic id: bytes
            every reader would refuse (constraints 5-7) are never written.

    Source: docs/wire-format.md, "Grammar".
    """
    if not causes:
        return EMPTY_CAUSES
    pack = _POSITION.pack
    groups = _group(causes)
    buf = bytearray(b"\x01")
    append = buf.append
    _put_varint(buf, len(groups))
    for topic in sorted(groups):
        pairs = groups[topic]
        pairs.sort()
        buf += topic.to_bytes(16, "big")
        count = len(pairs)
        if count < 0x80:
            append(count)
        else:
            _put_varint(buf, count)
        for partition, position in pairs:
            if partition < 0x80:
                append(partition)
            else:
                _put_varint(buf, partition)
            buf += pack(position)
    return bytes(buf)


def reference_encoded_size(causes: Mapping[ChannelId, int]) -> int:
    """Exact length in bytes of :func:`encode_causes` for ``causes`` (the pure-Python
    reference of :func:`encoded_size`).

    ``1 + v(T) + sum over topics [16 + v(n_t) + sum over partitions (v(p) + 8)]``
    where ``v`` is the varint width, ``T`` the number of distinct topics and
    ``n_t`` the partitions of topic ``t``; with ids and counts below 128 that
    is ``2 + sum_t (17 + 9 n_t)``: 26 bytes for a topic's first channel, 9 for
    each further one.

    Raises:
        ValueError: as :func:`encode_causes`.

    Source: docs/wire-format.md, "Size" (Java
    ``CausesCodec.encodedSize``).
    """
    groups = _group(causes)
    size = 1 + varint_size(len(groups)) + 17 * len(groups) + 9 * len(causes)
    for pairs in groups.values():
        if len(pairs) >= 0x80:
            size += varint_size(len(pairs)) - 1
        for partition, _ in pairs:
            if partition >= 0x80:
                size += varint_size(partition) - 1
    return size


def _native_or(name: str, reference: Callable[..., object]) -> object:
    return reference if NATIVE is None else getattr(NATIVE, name)


decode_causes: Callable[[bytes | None], dict[ChannelId, int]] = _native_or(  # type: ignore[assignment]
    "decode_causes", reference_decode_causes
)
"""Decode a ``parsley.causes`` header value: the engine :mod:`parsley.native` chose
(Rust, or :func:`reference_decode_causes`, whose docstring gives the values and the
``UNDECODABLE_METADATA`` diagnoses; both implementations return and raise the same)."""

encode_causes: Callable[[Mapping[ChannelId, int]], bytes] = _native_or(  # type: ignore[assignment]
    "encode_causes", reference_encode_causes
)
"""Encode a cause set canonically: the chosen engine's (see :func:`reference_encode_causes`
for arguments, bytes and ``ValueError``)."""

encoded_size: Callable[[Mapping[ChannelId, int]], int] = _native_or(  # type: ignore[assignment]
    "encoded_size", reference_encoded_size
)
"""Exact encoded length in bytes: the chosen engine's (see :func:`reference_encoded_size`)."""


def is_reserved(key: str) -> bool:
    """Whether a header key uses the reserved ``parsley.`` prefix (docs/wire-format.md,
    "Placement")."""
    return key.startswith(RESERVED_PREFIX)


def strip_reserved(headers: Sequence[Header]) -> tuple[Header, ...]:
    """The application's headers: every header whose key lacks the ``parsley.`` prefix.

    Args:
        headers: (key, value-or-None) pairs in record order.

    Returns:
        The same pairs, order kept, without any ``parsley.*`` header; this is
        what deserializers and handlers see (Java ``withoutReservedHeaders``).
    """
    return tuple([h for h in headers if not h[0].startswith(RESERVED_PREFIX)])


def split_causes_header(
    headers: Sequence[Header],
) -> tuple[bool, bytes | None, tuple[Header, ...]]:
    """Find the ``parsley.causes`` header and the application's headers of a record.

    Args:
        headers: the record's headers as fetched, (key, value-or-None), in order.

    Returns:
        ``(found, raw, app_headers)``: whether ``parsley.causes`` is present;
        its raw value (``None`` when absent *or* present with a null value,
        so test ``found``); and every header without the ``parsley.`` prefix,
        order kept (:func:`strip_reserved`), always a tuple. Nothing is
        decoded or size-checked here.

    Raises:
        ParsleyFailClosedError: ``UNDECODABLE_METADATA``, ``duplicate
            parsley.causes headers``, when the key appears more than once.

    Source: docs/wire-format.md, "Placement" (Java
    ``ProcessEngine.extractCauses``, ``withoutReservedHeaders``). The caller
    prefixes ``<channel>@<position>: `` to the detail.
    """
    # Fast paths: a record carrying only its causes, or no headers at all.
    n = len(headers)
    if n == 1:
        key, value = headers[0]
        if key == CAUSES_HEADER:
            return True, value, ()
    elif n == 0:
        return False, None, ()
    found = False
    raw: bytes | None = None
    reserved = False
    for key, value in headers:
        if key == CAUSES_HEADER:
            if found:
                raise _undecodable(f"duplicate {CAUSES_HEADER} headers")
            found = True
            raw = value
        elif key.startswith(RESERVED_PREFIX):
            reserved = True
    if found or reserved:
        return found, raw, strip_reserved(headers)
    return False, None, headers if type(headers) is tuple else tuple(headers)


def causes_from_headers(
    headers: Sequence[Header], budget_bytes: int
) -> dict[ChannelId, int] | None:
    """Find, size-check and decode the causes of a received record.

    Args:
        headers: the record's headers as fetched, (key, value-or-None), in order.
        budget_bytes: the metadata budget in bytes (default elsewhere 262,144);
            a header value longer than this is refused before it is decoded.

    Returns:
        ``None`` when no ``parsley.causes`` header is present (the record has
        no causes and is immediately deliverable, SPEC Safety 6); otherwise the
        decoded causes as :func:`decode_causes` returns them.

    Raises:
        ParsleyFailClosedError: reason ``UNDECODABLE_METADATA`` with
            ``duplicate parsley.causes headers`` when the key appears twice or
            more, ``causes header present with null value`` for a null value,
            ``truncated causes header`` for an empty one (present is never
            absent), or any :func:`decode_causes` diagnosis; reason
            ``METADATA_BUDGET_EXCEEDED`` with ``carries N bytes of causal
            metadata; the configured budget is B bytes`` when the raw value is
            longer than ``budget_bytes`` (checked before decoding).

    Source: docs/wire-format.md, "Placement" (Java
    ``ProcessEngine.extractCauses``). The caller prefixes
    ``<channel>@<position>: `` to the detail.
    """
    found, raw, _ = split_causes_header(headers)
    if not found:
        return None
    if raw is not None and len(raw) > budget_bytes:
        raise ParsleyFailClosedError(
            Reason.METADATA_BUDGET_EXCEEDED,
            f"carries {len(raw)} bytes of causal metadata; "
            f"the configured budget is {budget_bytes} bytes",
        )
    return decode_causes(raw)
