"""Ordering-state keys and values, in the Java implementation's layout.

One task's ordering state is a key/value image: the store ``__parsley.ordering``, logged to a
compacted changelog whose records carry these exact bytes. Every key starts with a one-byte
ASCII tag; ``channel`` is the 20-byte form of :meth:`ChannelId.to_bytes`::

    b"v"                          -> b"\\x01"            store format version
    b"f" + channel                -> int64 BE           covered (fedUpTo); 2^63-1 = fed to end
    b"c" + channel                -> int64 BE           frontier position
    b"p" + channel                -> int64 BE           delivered causal past
    b"n" + UTF-8 topic name       -> channel (20 bytes) name binding, partition 0
    b"h" + channel + int64 BE pos -> held blob          one held message

The held blob, its examples and the checks on restore: docs/model.md, "The stored form"
(source: Java ``OrderingStateCodec``, ``ProcessEngine`` restore). Every corruption raises
``ParsleyFailClosedError(UNKNOWN_ORDERING_STATE_FORMAT, diagnosis)``; the engine may prefix
``process <name>: ``. ``decode_held``, ``encode_held``, ``validate_held``, ``load_image``:
the Rust codec (``native/src/state_codec/``) or the reference here (``reference_*``), as
:mod:`parsley.native` chose, with the same values, bytes and refusals. Pure: stdlib + ``_native``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

from parsley.engine.channel import CHANNEL_BYTES, FED_TO_END, ChannelId, Header
from parsley.engine.store import OrderingStore
from parsley.native import NATIVE
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import cached_channel

__all__ = [
    "CHANNEL_KEY_BYTES",
    "HELD_BLOB_VERSION",
    "HELD_KEY_BYTES",
    "STATE_TAGS",
    "TAG_FED",
    "TAG_FRONTIER",
    "TAG_HELD",
    "TAG_NAME",
    "TAG_PAST",
    "TAG_VERSION",
    "VALIDATED_HELD",
    "VERSION_KEY",
    "VERSION_VALUE",
    "HeldMessage",
    "OrderingImage",
    "channel_of_key",
    "decode_binding",
    "decode_coverage",
    "decode_held",
    "decode_long",
    "encode_binding",
    "encode_held",
    "encode_long",
    "fed_key",
    "frontier_key",
    "held_key",
    "held_key_parts",
    "held_prefix",
    "image_items",
    "load_image",
    "name_key",
    "name_of_key",
    "past_key",
    "reference_decode_held",
    "reference_encode_held",
    "reference_load_image",
    "reference_validate_held",
    "validate_held",
]

TAG_VERSION: Final = 0x76  # 'v'
TAG_FED: Final = 0x66  # 'f'
TAG_FRONTIER: Final = 0x63  # 'c'
TAG_PAST: Final = 0x70  # 'p'
TAG_NAME: Final = 0x6E  # 'n'
TAG_HELD: Final = 0x68  # 'h'
STATE_TAGS: Final = frozenset({TAG_FED, TAG_FRONTIER, TAG_PAST, TAG_NAME, TAG_HELD})
"""Every tag but the version's: any of them without ``v`` means a lost changelog head."""

VERSION_KEY: Final = b"v"
VERSION_VALUE: Final = b"\x01"
HELD_BLOB_VERSION: Final = 1
CHANNEL_KEY_BYTES: Final = 1 + CHANNEL_BYTES  # 21
HELD_KEY_BYTES: Final = 1 + CHANNEL_BYTES + 8  # 29

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_CAUSE = struct.Struct(">16siq")  # flat cause: topic id, int32 partition, int64 position
_FLAG_KEY_NULL: Final = 1
_FLAG_VALUE_NULL: Final = 2
_ZERO_PARTITION: Final = b"\x00\x00\x00\x00"
_CORRUPT_HELD: Final = "corrupt held blob: "


def _refuse(diagnosis: str) -> ParsleyFailClosedError:
    return ParsleyFailClosedError(Reason.UNKNOWN_ORDERING_STATE_FORMAT, diagnosis)


# ------------------------------------------------------------------ keys


def fed_key(ch: ChannelId) -> bytes:
    """Key of a channel's covered position (``fedUpTo``): ``b"f"`` + channel, 21 bytes."""
    return b"f" + ch.to_bytes()


def frontier_key(ch: ChannelId) -> bytes:
    """Key of a channel's frontier position: ``b"c"`` + channel, 21 bytes."""
    return b"c" + ch.to_bytes()


def past_key(ch: ChannelId) -> bytes:
    """Key of a channel's delivered-past position: ``b"p"`` + channel, 21 bytes."""
    return b"p" + ch.to_bytes()


def name_key(topic: str) -> bytes:
    """Key binding a topic name to its identity: ``b"n"`` + the UTF-8 name."""
    return b"n" + topic.encode("utf-8")


def held_key(ch: ChannelId, position: int) -> bytes:
    """Key of one held message: ``b"h"`` + channel + int64 BE position, 29 bytes.

    Keys of one channel sort by position (non-negative int64 BE), so a scan of
    :func:`held_prefix` returns the hold-back buffer in FIFO order.

    Raises:
        ValueError: ``position`` outside 0..2^63-2.
    """
    if not 0 <= position < FED_TO_END:
        raise ValueError(f"held position must be in 0..2^63-2, got {position}")
    return b"h" + ch.to_bytes() + _LONG.pack(position)


def held_prefix(ch: ChannelId) -> bytes:
    """Prefix of every held key on ``ch``: ``b"h"`` + channel, 21 bytes."""
    return b"h" + ch.to_bytes()


def channel_of_key(key: bytes) -> ChannelId:
    """The channel named by an ``f``/``c``/``p`` key.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT``, ``corrupt
            ordering key: length N for tag 'x'`` when the key is not 21 bytes,
            or ``corrupt ordering key: negative partition P for tag 'x'``.
    """
    if len(key) != CHANNEL_KEY_BYTES:
        raise _refuse(f"corrupt ordering key: length {len(key)} for tag {_tag_text(key)}")
    return _channel_at(key, 1, key)


def held_key_parts(key: bytes) -> tuple[ChannelId, int]:
    """The (channel, position) named by a held key.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT``, ``corrupt held
            key: length N`` when not 29 bytes; ``corrupt held key: position P on
            <ch>, which no channel can assign`` for a negative position or 2^63-1.
    """
    if len(key) != HELD_KEY_BYTES:
        raise _refuse(f"corrupt held key: length {len(key)}")
    ch = _channel_at(key, 1, key)
    (position,) = _LONG.unpack_from(key, 1 + CHANNEL_BYTES)
    if not 0 <= position < FED_TO_END:
        raise _refuse(f"corrupt held key: position {position} on {ch}, which no channel can assign")
    return ch, position


def name_of_key(key: bytes) -> str:
    """The topic name of an ``n`` key.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` when the name
            is empty or not UTF-8.
    """
    if len(key) < 2:
        raise _refuse("corrupt ordering key: empty topic name for tag 'n'")
    try:
        return key[1:].decode("utf-8")
    except UnicodeDecodeError:
        raise _refuse("corrupt ordering key: topic name is not UTF-8 for tag 'n'") from None


def _tag_text(key: bytes) -> str:
    if not key:
        return "(empty key)"
    tag = key[0]
    return f"'{chr(tag)}'" if 0x20 < tag < 0x7F else f"0x{tag:02x}"


def _channel_at(data: bytes, offset: int, key: bytes) -> ChannelId:
    (partition,) = _INT.unpack_from(data, offset + 16)
    if partition < 0:
        raise _refuse(
            f"corrupt ordering key: negative partition {partition} for tag {_tag_text(key)}"
        )
    return ChannelId(UUID(bytes=bytes(data[offset : offset + 16])), partition)


# ------------------------------------------------------------------ values


def encode_long(v: int) -> bytes:
    """An ``f``/``c``/``p`` value: int64 big-endian, 8 bytes.

    Raises:
        ValueError: ``v`` outside the int64 range.
    """
    try:
        return _LONG.pack(v)
    except struct.error:
        raise ValueError(f"{v} does not fit an int64") from None


def decode_long(value: bytes) -> int:
    """Read an ``f``/``c``/``p`` value.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT``, ``corrupt
            ordering value: length N where 8 bytes were written``.
    """
    if len(value) != 8:
        raise _refuse(f"corrupt ordering value: length {len(value)} where 8 bytes were written")
    return int(_LONG.unpack(value)[0])


def encode_binding(topic_id: UUID) -> bytes:
    """An ``n`` value: the topic's channel form with partition 0, 20 bytes."""
    return topic_id.bytes + _ZERO_PARTITION


def decode_binding(value: bytes, topic: str = "") -> UUID:
    """The topic id in an ``n`` value (readers use only the id, docs/model.md, "The stored form").

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` when the value
            is not 20 bytes.
    """
    if len(value) != CHANNEL_BYTES:
        raise _refuse(
            f"corrupt ordering value: name binding for '{topic}' has length {len(value)} "
            f"where {CHANNEL_BYTES} bytes were written"
        )
    return UUID(bytes=bytes(value[:16]))


@dataclass(frozen=True, slots=True)
class HeldMessage:
    """One held message, everything needed to deliver it after a restart.

    Attributes:
        timestamp_ms: record timestamp, ms since the epoch (int64).
        key: raw key, ``None`` distinct from ``b""``.
        value: raw value, ``None`` distinct from ``b""``.
        headers: the application's headers, (key, value-or-None), in received
            order. The engine persists them with every ``parsley.*`` header
            (``parsley.causes`` included) already stripped, as it delivers
            them; the causes are kept decoded in ``causes``. The codec itself
            writes whatever headers it is given.
        causes: the causes the message expressed, (channel, position) pairs,
            written in the given order (pass channel order, as
            :func:`parsley.wire.decode_causes` yields, to match Java's bytes).
    """

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    causes: tuple[tuple[ChannelId, int], ...] = ()


def reference_encode_held(m: HeldMessage) -> bytes:
    """Encode a held message as a version-1 blob; the pure-Python reference of :func:`encode_held`.

    Layout: docs/model.md, "The stored form", "Held blob".

    Raises:
        ValueError: a timestamp or cause position outside int64.

    Source: docs/model.md, "The stored form"; the two examples there are byte-exact test vectors.
    """
    parts: list[bytes] = [bytes((HELD_BLOB_VERSION,))]
    try:
        parts.append(_LONG.pack(m.timestamp_ms))
    except struct.error:
        raise ValueError(f"timestamp {m.timestamp_ms} does not fit an int64") from None
    flags = (_FLAG_KEY_NULL if m.key is None else 0) | (_FLAG_VALUE_NULL if m.value is None else 0)
    parts.append(bytes((flags,)))
    pack_int = _INT.pack
    if m.key is not None:
        parts += (pack_int(len(m.key)), bytes(m.key))
    if m.value is not None:
        parts += (pack_int(len(m.value)), bytes(m.value))
    parts.append(pack_int(len(m.headers)))
    for hkey, hvalue in m.headers:
        raw = hkey.encode("utf-8")
        parts += (pack_int(len(raw)), raw)
        if hvalue is None:
            parts.append(pack_int(-1))
        else:
            parts += (pack_int(len(hvalue)), bytes(hvalue))
    parts.append(pack_int(len(m.causes)))
    pack_cause = _CAUSE.pack
    try:
        for ch, position in m.causes:
            parts.append(pack_cause(ch.topic_id.bytes, ch.partition, position))
    except struct.error:
        raise ValueError("a cause position does not fit an int64") from None
    return b"".join(parts)


def _parse_held(blob: bytes, keep: bool) -> HeldMessage | None:
    n = len(blob)
    if n < 10:
        if n and blob[0] != HELD_BLOB_VERSION:
            raise _refuse(f"{_CORRUPT_HELD}version {blob[0]}")
        raise _refuse(f"{_CORRUPT_HELD}truncated at {n} bytes")
    if blob[0] != HELD_BLOB_VERSION:
        raise _refuse(f"{_CORRUPT_HELD}version {blob[0]}")
    (timestamp,) = _LONG.unpack_from(blob, 1)
    flags = blob[9]
    if flags & ~(_FLAG_KEY_NULL | _FLAG_VALUE_NULL):
        raise _refuse(f"{_CORRUPT_HELD}flags 0x{flags:02x} carry unknown bits")
    unpack_int = _INT.unpack_from
    i = 10

    def sized(what: str) -> bytes:
        nonlocal i
        if i + 4 > n:
            raise _refuse(f"{_CORRUPT_HELD}truncated at {what} length")
        (length,) = unpack_int(blob, i)
        i += 4
        if length < 0 or length > n - i:
            raise _refuse(f"{_CORRUPT_HELD}{what} length {length} with {n - i} bytes remaining")
        start = i
        i += length
        return blob[start:i]

    key = None if flags & _FLAG_KEY_NULL else sized("key")
    value = None if flags & _FLAG_VALUE_NULL else sized("value")
    if i + 4 > n:
        raise _refuse(f"{_CORRUPT_HELD}truncated at header count")
    (count,) = unpack_int(blob, i)
    i += 4
    if count < 0 or count > (n - i) // 8:
        raise _refuse(f"{_CORRUPT_HELD}header count {count} with {n - i} bytes remaining")
    headers: list[Header] = []
    for _ in range(count):
        raw_key = sized("header key")
        if i + 4 > n:
            raise _refuse(f"{_CORRUPT_HELD}truncated at header value length")
        (length,) = unpack_int(blob, i)
        i += 4
        hvalue: bytes | None = None
        if length != -1:
            if length < 0 or length > n - i:
                raise _refuse(
                    f"{_CORRUPT_HELD}header value length {length} with {n - i} bytes remaining"
                )
            hvalue = blob[i : i + length]
            i += length
        try:
            hkey = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise _refuse(f"{_CORRUPT_HELD}header key is not UTF-8") from None
        if keep:
            headers.append((hkey, hvalue))
    if i + 4 > n:
        raise _refuse(f"{_CORRUPT_HELD}truncated at cause count")
    (count,) = unpack_int(blob, i)
    i += 4
    if count < 0 or n - i != count * _CAUSE.size:
        raise _refuse(f"{_CORRUPT_HELD}cause count {count} does not match {n - i} bytes remaining")
    causes: list[tuple[ChannelId, int]] = []
    for raw_id, partition, position in _CAUSE.iter_unpack(blob[i:]):
        if partition < 0:
            raise _refuse(f"{_CORRUPT_HELD}cause names negative partition {partition}")
        if keep:
            causes.append((cached_channel(raw_id, partition), position))
    if not keep:
        return None
    return HeldMessage(timestamp, key, value, tuple(headers), tuple(causes))


def reference_decode_held(blob: bytes) -> HeldMessage:
    """Decode a held-message blob; the pure-Python reference of :func:`decode_held`.

    Args:
        blob: bytes written by :func:`encode_held` (or Java's ``encodeHeld``).

    Returns:
        The message, byte for byte as it was held.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` with a
            ``corrupt held blob: ...`` diagnosis: ``version N`` (not 1),
            ``flags 0xNN carry unknown bits``, ``key|value|header key length L
            with R bytes remaining`` (negative or oversized), ``header count H
            with R bytes remaining`` (negative or more than R/8), ``header value
            length L with R bytes remaining`` (below -1 or oversized), ``header
            key is not UTF-8``, ``cause count C does not match R bytes
            remaining`` (miscounted causes, trailing bytes), ``cause names
            negative partition P``, ``truncated at ...``.

    Source: docs/model.md, "The stored form"; Java ``OrderingStateCodec.decodeHeld``.
    Unlike Java, unknown flag bits are refused rather than ignored: Java never
    writes them, so reading them means something else wrote the blob.
    """
    result = _parse_held(bytes(blob), keep=True)
    assert result is not None
    return result


def reference_validate_held(blob: bytes) -> None:
    """Run every :func:`decode_held` check without keeping the body; the pure-Python
    reference of :func:`validate_held`.

    Raises:
        ParsleyFailClosedError: as :func:`decode_held`.
    """
    _parse_held(bytes(blob), keep=False)


# ------------------------------------------------------------------ image


@dataclass
class OrderingImage:
    """One task's decoded, validated ordering state (held bodies not kept).

    Attributes:
        has_version: the ``v`` entry was present (and was ``01``).
        fed: covered position per channel (inclusive offset; ``FED_TO_END``
            verbatim for a channel fed to its end).
        frontier: frontier position per channel (inclusive offset).
        past: delivered causal past per channel (inclusive offset).
        names: topic name -> topic id it was bound to.
        held: per channel, the held positions, ascending.
    """

    has_version: bool = False
    fed: dict[ChannelId, int] = field(default_factory=dict)
    frontier: dict[ChannelId, int] = field(default_factory=dict)
    past: dict[ChannelId, int] = field(default_factory=dict)
    names: dict[str, UUID] = field(default_factory=dict)
    held: dict[ChannelId, list[int]] = field(default_factory=dict)

    def is_empty(self) -> bool:
        """True when no state entry (besides the version) was present."""
        return not (self.fed or self.frontier or self.past or self.names or self.held)


_FORGED = (
    "this state absorbed a forged causes header before receipt refused it "
    "(wire-format constraint {}). Reset the process's state and group offsets "
    "deliberately to proceed."
)
_CORRUPT_ROW = (
    "receipt refuses negative positions, so this row is corrupt ordering state. "
    "Reset the process's state and group offsets deliberately to proceed."
)
_RESET = "Reset the process's state and group offsets deliberately to proceed."
_OUT_OF_ORDER = "held messages restored out of position order: "
"""How a held row inconsistent with its channel's coverage opens: the runbook's corrupt
entry it is (docs/runbooks.md, UNKNOWN_ORDERING_STATE_FORMAT)."""
_HELD_UNFED = (
    "every held message is fed before it is held, so this row is corrupt ordering state. "
    + _RESET
)
_LOST_HEAD = (
    "ordering state present without its format version entry; the earliest records of "
    "the ordering changelog have been lost, so this state is incomplete and cannot be "
    "trusted. Check the changelog topic's cleanup.policy, then reset the process's state "
    "and group offsets deliberately to proceed."
)
_UNKNOWN_VERSION = "ordering store format not understood by this build"


def _assignable(ch: ChannelId, position: int, what: str) -> int:
    if position == FED_TO_END:
        raise _refuse(
            f"restored {what} names position {position} on {ch}, which no channel can assign; "
            + _FORGED.format(7)
        )
    if position < 0:
        raise _refuse(
            f"restored {what} names position {position} on {ch}, which no channel can assign; "
            + _CORRUPT_ROW
        )
    return position


def decode_coverage(ch: ChannelId, value: bytes) -> int:
    """Read an ``f`` (coverage, ``fedUpTo``) value of channel ``ch``.

    Coverage is any position the channel can have been fed up to, or the
    fed-to-end sentinel :data:`FED_TO_END` (2^63-1), returned verbatim. It is
    never negative: the engine only records a fed position or ``start - 1``
    for a start above 0.

    Returns:
        The covered position (offset, inclusive), ``0 <= covered <= 2^63-1``.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT``, ``corrupt
            ordering value: length N where 8 bytes were written``, or
            ``restored coverage names position P on <ch>, which no channel can
            assign; receipt refuses negative positions, ...`` for ``P < 0``.

    Source: docs/model.md, "The stored form" ("Checks when state is restored") (the range checks the
    frontier and delivered past get, applied to coverage minus the sentinel).
    """
    position = decode_long(value)
    if position < 0:
        raise _refuse(
            f"restored coverage names position {position} on {ch}, which no channel can "
            "assign; " + _CORRUPT_ROW
        )
    return position


def reference_load_image(items: Iterable[tuple[bytes, bytes]]) -> OrderingImage:
    """Parse and validate every entry of one task's ordering state; the pure-Python
    reference of :func:`load_image`.

    Args:
        items: (key, value) for every live key (latest value per key, no
            tombstones), in ascending key order as ``OrderingStore.scan()``
            yields them.

    Returns:
        The decoded image. An empty input gives an empty image with
        ``has_version=False`` (a fresh store, which the engine stamps).

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` with:
            ``ordering store format not understood by this build`` (``v`` value
            not exactly ``01``); ``ordering state present without its format
            version entry; ...`` (state tags without ``v``: the changelog head
            was lost); ``corrupt ordering key: ...`` (empty key, unknown tag,
            channel key not 21 bytes, negative partition, bad topic name);
            ``corrupt held key: ...`` (not 29 bytes, position negative or
            2^63-1); ``corrupt ordering value: ...`` (long not 8 bytes, binding
            not 20 bytes); ``restored frontier names the reserved zero topic
            id; ...``; ``restored frontier|delivered past names position P on
            <ch>, which no channel can assign; ...`` (negative or 2^63-1);
            ``held messages restored out of position order on <ch> (a before
            b); ...``; any :func:`decode_held` diagnosis. A hold not within its
            channel's live coverage would deliver ahead of lower positions fed
            later, so each of these refuses too: ``held message at <ch>@P above
            its channel's coverage (fedUpTo=F); ...``, ``... on a channel with no
            coverage row; ...``, ``... on a channel recorded as no longer existing
            (fedUpTo=2^63-1); ...``.

    Source: docs/model.md, "The stored form" (version entry; "Checks when state is restored"); Java
    ``ProcessEngine`` constructor and ``OrderingStateCodec``.
    """
    # One pass, streaming: each held blob is validated as it arrives and only its
    # position is kept (a deep hold-back is never in memory at once). The version
    # still decides whether anything else can be read, so it is judged first (as
    # Java's constructor does), whatever order the keys arrive in ('v' sorts after
    # every state tag): the first entry's refusal is kept while the rest of the input
    # is scanned for the version entry only, and raised after the version verdict.
    image = OrderingImage()
    version: bytes | None = None
    state_seen = False
    failed: ParsleyFailClosedError | None = None
    channels: dict[bytes, ChannelId] = {}
    decode = decode_long
    entries = iter(items)
    key = b""
    try:
        for key, value in entries:
            _one_entry(image, channels, decode, key, value)
            if key == VERSION_KEY:
                version = bytes(value)
    except ParsleyFailClosedError as exc:
        failed = exc
        state_seen = bool(key) and key[0] in STATE_TAGS
        for key, value in entries:
            if key == VERSION_KEY:
                version = bytes(value)
            elif key and key[0] in STATE_TAGS:
                state_seen = True
    if version is not None:
        if version != VERSION_VALUE:
            raise _refuse(_UNKNOWN_VERSION)
        image.has_version = True
    elif state_seen or image.fed or image.frontier or image.past or image.names or image.held:
        raise _refuse(_LOST_HEAD)
    if failed is not None:
        raise failed
    for ch, positions in image.held.items():
        _check_held_within_coverage(ch, positions, image.fed.get(ch))
    return image


def _one_entry(image: OrderingImage, channels: dict[bytes, ChannelId],
               decode: Callable[[bytes], int], key: bytes, value: bytes) -> None:
    """Parse one (key, value) of :func:`load_image` into ``image`` (refusals as documented
    there); ``channels`` caches the channel of each 20-byte raw channel key."""
    if not key:
        raise _refuse("corrupt ordering key: length 0")
    tag = key[0]
    if tag == TAG_HELD:
        if len(key) != HELD_KEY_BYTES:
            raise _refuse(f"corrupt held key: length {len(key)}")
        raw = key[1:CHANNEL_KEY_BYTES]
        ch = channels.get(raw)
        if ch is None:
            ch = _channel_at(key, 1, key)
            channels[raw] = ch
        (position,) = _LONG.unpack_from(key, CHANNEL_KEY_BYTES)
        if not 0 <= position < FED_TO_END:
            raise _refuse(
                f"corrupt held key: position {position} on {ch}, which no channel can assign"
            )
        positions = image.held.get(ch)
        if positions is None:
            image.held[ch] = [position]
        else:
            if positions[-1] >= position:
                raise _refuse(
                    f"held messages restored out of position order on {ch} "
                    f"({positions[-1]} before {position}); the store's scan broke its "
                    "ordering contract"
                )
            positions.append(position)
        reference_validate_held(value)
    elif tag in (TAG_FED, TAG_FRONTIER, TAG_PAST):
        if len(key) != CHANNEL_KEY_BYTES:
            raise _refuse(f"corrupt ordering key: length {len(key)} for tag '{chr(tag)}'")
        raw = key[1:]
        ch = channels.get(raw)
        if ch is None:
            ch = _channel_at(key, 1, key)
            channels[raw] = ch
        if tag == TAG_FED:
            image.fed[ch] = decode_coverage(ch, value)
            return
        position = decode(value)
        if tag == TAG_FRONTIER:
            if ch.topic_id.int == 0:
                raise _refuse(
                    "restored frontier names the reserved zero topic id; " + _FORGED.format(5)
                )
            image.frontier[ch] = _assignable(ch, position, "frontier")
        else:
            image.past[ch] = _assignable(ch, position, "delivered past")
    elif tag == TAG_NAME:
        name = name_of_key(key)
        image.names[name] = decode_binding(value, name)
    elif tag == TAG_VERSION:
        if len(key) != 1:
            raise _refuse(f"corrupt ordering key: length {len(key)} for tag 'v'")
    else:
        raise _refuse(f"corrupt ordering key: unknown tag {_tag_text(key)}")


def _check_held_within_coverage(ch: ChannelId, positions: list[int], fed: int | None) -> None:
    # A message is fed (coverage raised to its position) before it is held, and a
    # channel is fed to its end only with nothing held. A hold above coverage would
    # restore ahead of a lower position fed later and deliver out of order.
    if fed is None:
        raise _refuse(
            f"{_OUT_OF_ORDER}held message at {ch}@{positions[0]} on a channel with no "
            "coverage row; "
            + _HELD_UNFED
        )
    if fed == FED_TO_END:
        raise _refuse(
            f"{_OUT_OF_ORDER}held message at {ch}@{positions[0]} on a channel recorded as no "
            f"longer existing (fedUpTo={fed}); a channel is fed to its end only with nothing held, "
            "so this row is corrupt ordering state. " + _RESET
        )
    if positions[-1] > fed:
        above = next(p for p in positions if p > fed)
        raise _refuse(
            f"{_OUT_OF_ORDER}held message at {ch}@{above} above its channel's coverage "
            f"(fedUpTo={fed}); "
            + _HELD_UNFED
        )


# ------------------------------------------------------------------ the chosen engine


def _native_or(name: str, reference: Callable[..., object]) -> object:
    return reference if NATIVE is None else getattr(NATIVE, name)


encode_held: Callable[[HeldMessage], bytes] = _native_or(  # type: ignore[assignment]
    "encode_held", reference_encode_held
)
"""Encode a held message: the engine :mod:`parsley.native` chose (see
:func:`reference_encode_held` for the layout and errors)."""

decode_held: Callable[[bytes], HeldMessage] = _native_or(  # type: ignore[assignment]
    "decode_held", reference_decode_held
)
"""Decode a held-message blob: the chosen engine's (see :func:`reference_decode_held` for
the refusals, ``UNKNOWN_ORDERING_STATE_FORMAT``)."""

validate_held: Callable[[bytes], None] = _native_or(  # type: ignore[assignment]
    "validate_held", reference_validate_held
)
"""Check a held blob without building it: the chosen engine's (see
:func:`reference_validate_held`)."""

load_image: Callable[[Iterable[tuple[bytes, bytes]]], OrderingImage] = _native_or(  # type: ignore[assignment]
    "load_image", reference_load_image
)
"""Parse and validate one task's ordering state: the chosen engine's (see
:func:`reference_load_image` for the image and every refusal)."""

VALIDATED_HELD: Final = reference_encode_held(HeldMessage(timestamp_ms=0, key=None, value=None))
"""A valid held blob (18 bytes) that a store's ``image_scan`` yields in place of a held
body it has already validated (see :func:`image_items`)."""


def image_items(store: OrderingStore) -> Iterable[tuple[bytes, bytes]]:
    """What an engine restores from: ``store.image_scan()`` when the store has one, else
    ``store.scan()``.

    A store's ``image_scan`` yields what ``scan`` yields, in the same order, except that it
    may give :data:`VALIDATED_HELD` for a held message's value that it has validated itself
    (``workers.ordering_store.SqliteOrderingStore`` does so after a changelog rebuild): the
    image keeps only the positions of held messages, so the result and every refusal are
    those of ``load_image(store.scan())``, without reading every held body again.
    """
    scan: Callable[[], Iterable[tuple[bytes, bytes]]] | None = getattr(store, "image_scan", None)
    return store.scan() if scan is None else scan()
