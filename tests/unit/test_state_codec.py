"""Ordering-state layout (docs/model.md, "The stored form"): keys, values, held blobs, restore
checks.

The two held-blob examples of docs/model.md, "The stored form" are byte-exact vectors; every
corruption
shape lives in one swept catalogue (family, label, bytes, expected diagnosis).
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.seed_shapes import assert_seed_shape

# Every test runs on both codec implementations (tests/conftest.py, "codecs").
pytestmark = pytest.mark.usefixtures("codecs")

T1 = UUID(int=(1 << 64) | 2)  # MSB 1, LSB 2: the facts' channel "(1,2)"
CH0 = ChannelId(T1, 0)
A = ChannelId(UUID("0102030405060708090a0b0c0d0e0f10"), 3)
B = ChannelId(UUID("f102030405060708090a0b0c0d0e0f10"), 0)
D = ChannelId(UUID("d102030405060708090a0b0c0d0e0f10"), 2)

EXAMPLE_1 = bytes.fromhex(
    "01000000000000000700000000016b000000017600000001000000016800000001010000000100000000000000"
    "010000000000000002000000000000000000000003"
)
MESSAGE_1 = sc.HeldMessage(7, b"k", b"v", (("h", b"\x01"),), ((CH0, 3),))
EXAMPLE_2 = bytes.fromhex("010000000000000000010000000000000001000000016effffffff00000000")
MESSAGE_2 = sc.HeldMessage(0, None, b"", (("n", None),), ())


def refused(exc: pytest.ExceptionInfo[ParsleyFailClosedError]) -> str:
    assert exc.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT, exc.value
    return exc.value.detail


# ------------------------------------------------------------------ keys and values


def test_key_layout() -> None:
    raw = A.to_bytes()
    assert len(raw) == 20
    assert sc.fed_key(A) == b"f" + raw
    assert sc.frontier_key(A) == b"c" + raw
    assert sc.past_key(A) == b"p" + raw
    assert sc.held_key(A, 5) == b"h" + raw + (5).to_bytes(8, "big")
    assert sc.held_prefix(A) == b"h" + raw
    assert sc.name_key("orders") == b"norders"
    assert sc.name_key("é") == b"n\xc3\xa9"
    assert sc.VERSION_KEY == b"v" and sc.VERSION_VALUE == b"\x01"
    assert len(sc.held_key(A, 1)) == sc.HELD_KEY_BYTES == 29
    assert len(sc.fed_key(A)) == sc.CHANNEL_KEY_BYTES == 21


def test_held_keys_sort_by_position() -> None:
    positions = [0, 1, 255, 256, 70000, 2**40, 2**63 - 2]
    keys = [sc.held_key(A, p) for p in reversed(positions)]
    assert [sc.held_key_parts(k)[1] for k in sorted(keys)] == positions


def test_key_parsers_round_trip() -> None:
    assert sc.channel_of_key(sc.frontier_key(B)) == B
    assert sc.held_key_parts(sc.held_key(B, 9)) == (B, 9)
    assert sc.name_of_key(sc.name_key("t.1")) == "t.1"


def test_long_and_binding_values() -> None:
    assert sc.encode_long(41) == bytes.fromhex("0000000000000029")
    assert sc.encode_long(FED_TO_END) == bytes.fromhex("7fffffffffffffff")
    assert sc.encode_long(-1) == b"\xff" * 8
    for v in (0, 1, -1, 2**62, FED_TO_END, -(2**63)):
        assert sc.decode_long(sc.encode_long(v)) == v
    with pytest.raises(ValueError):
        sc.encode_long(2**63)
    assert sc.encode_binding(A.topic_id) == A.topic_id.bytes + b"\x00\x00\x00\x00"
    assert sc.decode_binding(sc.encode_binding(B.topic_id)) == B.topic_id
    # readers use only the topic id: a nonzero partition in the binding is accepted
    assert sc.decode_binding(A.to_bytes()) == A.topic_id


def test_held_key_refuses_unassignable_positions() -> None:
    for bad in (-1, FED_TO_END):
        with pytest.raises(ValueError):
            sc.held_key(A, bad)


# ------------------------------------------------------------------ held blobs


@pytest.mark.parametrize(
    ("label", "blob", "message"),
    [("facts example 1 (66 bytes)", EXAMPLE_1, MESSAGE_1),
     ("facts example 2 (31 bytes)", EXAMPLE_2, MESSAGE_2)],
)
def test_held_blob_vectors(label: str, blob: bytes, message: sc.HeldMessage) -> None:
    assert sc.encode_held(message) == blob, f"{label}: encoding differs from Java's bytes"
    assert sc.decode_held(blob) == message, f"{label}: decoding differs"
    sc.validate_held(blob)


def test_held_blob_lengths() -> None:
    assert len(EXAMPLE_1) == 66 and len(EXAMPLE_2) == 31


def test_held_round_trip_variety() -> None:
    messages = [
        sc.HeldMessage(-(2**63), None, None),
        sc.HeldMessage(2**63 - 1, b"", b"", (("", b""), ("ü", None), ("x", b"\x00" * 300))),
        sc.HeldMessage(5, b"\xff" * 1000, None, (), ((A, 0), (B, 2**63 - 2), (CH0, 7))),
    ]
    for m in messages:
        assert sc.decode_held(sc.encode_held(m)) == m


def _patch(blob: bytes, offset: int, hexbytes: str) -> bytes:
    raw = bytes.fromhex(hexbytes)
    return blob[:offset] + raw + blob[offset + len(raw):]


# Offsets in EXAMPLE_1: 0 version, 1 timestamp, 9 flags, 10 key length, 14 key,
# 15 value length, 19 value, 20 header count, 24 header key length, 28 key 'h',
# 29 header value length, 33 value, 34 cause count, 38 cause (28 bytes) .. 66.
HELD_CORRUPTIONS: list[tuple[str, str, bytes, str]] = [
    ("version", "02", _patch(EXAMPLE_1, 0, "02"), "corrupt held blob: version 2"),
    ("version", "00 on a short blob", b"\x00", "corrupt held blob: version 0"),
    ("flags", "unknown bit 0x04", _patch(EXAMPLE_1, 9, "04"),
     "corrupt held blob: flags 0x04 carry unknown bits"),
    ("key", "length -2 (the facts' example)", _patch(EXAMPLE_1, 10, "fffffffe"),
     "corrupt held blob: key length -2 with 52 bytes remaining"),
    ("key", "oversized", _patch(EXAMPLE_1, 10, "00000035"),
     "corrupt held blob: key length 53 with 52 bytes remaining"),
    ("value", "length -1 is not a null spelling", _patch(EXAMPLE_1, 15, "ffffffff"),
     "corrupt held blob: value length -1 with 47 bytes remaining"),
    ("value", "oversized", _patch(EXAMPLE_1, 15, "7fffffff"),
     "corrupt held blob: value length 2147483647 with 47 bytes remaining"),
    ("headers", "count negative", _patch(EXAMPLE_1, 20, "ffffffff"),
     "corrupt held blob: header count -1 with 42 bytes remaining"),
    ("headers", "count beyond remaining/8", _patch(EXAMPLE_1, 20, "00000006"),
     "corrupt held blob: header count 6 with 42 bytes remaining"),
    ("headers", "key length negative", _patch(EXAMPLE_1, 24, "fffffff0"),
     "corrupt held blob: header key length -16 with 38 bytes remaining"),
    ("headers", "value length -2", _patch(EXAMPLE_1, 29, "fffffffe"),
     "corrupt held blob: header value length -2 with 33 bytes remaining"),
    ("headers", "value length oversized", _patch(EXAMPLE_1, 29, "00000022"),
     "corrupt held blob: header value length 34 with 33 bytes remaining"),
    ("headers", "key not UTF-8", _patch(EXAMPLE_1, 28, "ff"),
     "corrupt held blob: header key is not UTF-8"),
    ("causes", "miscounted high", _patch(EXAMPLE_1, 34, "00000002"),
     "corrupt held blob: cause count 2 does not match 28 bytes remaining"),
    ("causes", "miscounted low", _patch(EXAMPLE_1, 34, "00000000"),
     "corrupt held blob: cause count 0 does not match 28 bytes remaining"),
    ("causes", "negative", _patch(EXAMPLE_1, 34, "ffffffff"),
     "corrupt held blob: cause count -1 does not match 28 bytes remaining"),
    ("causes", "negative partition", _patch(EXAMPLE_1, 54, "ffffffff"),
     "corrupt held blob: cause names negative partition -1"),
    ("trailing", "one byte more", EXAMPLE_1 + b"\x00",
     "corrupt held blob: cause count 1 does not match 29 bytes remaining"),
    ("truncated", "last byte cut", EXAMPLE_1[:-1],
     "corrupt held blob: cause count 1 does not match 27 bytes remaining"),
    ("truncated", "empty", b"", "corrupt held blob: truncated at 0 bytes"),
    ("truncated", "inside the timestamp", EXAMPLE_1[:5], "corrupt held blob: truncated at 5 bytes"),
    ("truncated", "at key length", EXAMPLE_1[:12], "corrupt held blob: truncated at key length"),
    ("truncated", "at header count", EXAMPLE_1[:21],
     "corrupt held blob: truncated at header count"),
    ("truncated", "at header count check", EXAMPLE_1[:30],
     "corrupt held blob: header count 1 with 6 bytes remaining"),
    ("truncated", "at header value length", EXAMPLE_1[:24] + bytes.fromhex("0000000468686868"),
     "corrupt held blob: truncated at header value length"),
    ("truncated", "at cause count", EXAMPLE_1[:35], "corrupt held blob: truncated at cause count"),
    ("truncated", "example 2 without cause count", EXAMPLE_2[:-4],
     "corrupt held blob: truncated at cause count"),
]


@pytest.mark.parametrize(
    ("family", "label", "blob", "expected"),
    HELD_CORRUPTIONS,
    ids=[f"{f}: {label}" for f, label, _, _ in HELD_CORRUPTIONS],
)
def test_held_corruption(family: str, label: str, blob: bytes, expected: str) -> None:
    for parse in (sc.decode_held, sc.validate_held):
        with pytest.raises(ParsleyFailClosedError) as caught:
            parse(blob)
        assert refused(caught) == expected, f"{family}/{label} via {parse.__name__}"
        assert_seed_shape(Reason.UNKNOWN_ORDERING_STATE_FORMAT, caught.value.detail)


def test_every_truncation_and_byte_flip_fails_closed() -> None:
    """Any prefix of a blob, and any single-byte change, decodes or refuses cleanly."""
    for blob in (EXAMPLE_1, EXAMPLE_2):
        for cut in range(len(blob)):
            with pytest.raises(ParsleyFailClosedError) as caught:
                sc.decode_held(blob[:cut])
            refused(caught)
        for i in range(len(blob)):
            for b in (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF):
                mutated = blob[:i] + bytes((b,)) + blob[i + 1:]
                try:
                    m = sc.decode_held(mutated)
                except ParsleyFailClosedError as exc:
                    assert exc.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
                else:
                    assert sc.encode_held(m) == mutated, f"byte {i}={b:02x} decoded non-canonically"


# ------------------------------------------------------------------ load_image


def _valid_items() -> list[tuple[bytes, bytes]]:
    items = {
        sc.VERSION_KEY: sc.VERSION_VALUE,
        sc.fed_key(A): sc.encode_long(13),
        sc.fed_key(B): sc.encode_long(2),
        sc.fed_key(D): sc.encode_long(FED_TO_END),
        sc.frontier_key(A): sc.encode_long(9),
        sc.frontier_key(CH0): sc.encode_long(0),
        sc.past_key(A): sc.encode_long(4),
        sc.name_key("orders"): sc.encode_binding(A.topic_id),
        sc.name_key("payments"): sc.encode_binding(B.topic_id),
        sc.held_key(A, 11): EXAMPLE_1,
        sc.held_key(A, 13): EXAMPLE_2,
        sc.held_key(B, 2): EXAMPLE_2,
    }
    return sorted(items.items())


def test_load_image_valid() -> None:
    image = sc.load_image(_valid_items())
    assert image.has_version
    assert image.fed == {A: 13, B: 2, D: FED_TO_END}
    assert image.frontier == {A: 9, CH0: 0}
    assert image.past == {A: 4}
    assert image.names == {"orders": A.topic_id, "payments": B.topic_id}
    assert image.held == {A: [11, 13], B: [2]}
    assert not image.is_empty()


def test_load_image_empty_store_is_fresh() -> None:
    image = sc.load_image([])
    assert not image.has_version and image.is_empty()
    version_only = sc.load_image([(b"v", b"\x01")])
    assert version_only.has_version and version_only.is_empty()


def _with(key: bytes, value: bytes, *, drop: bytes | None = None) -> list[tuple[bytes, bytes]]:
    items = dict(_valid_items())
    if drop is not None:
        del items[drop]
    items[key] = value
    return sorted(items.items())


LOST = (
    "ordering state present without its format version entry; the earliest records of the "
    "ordering changelog have been lost, so this state is incomplete and cannot be trusted. "
    "Check the changelog topic's cleanup.policy, then reset the process's state and group "
    "offsets deliberately to proceed."
)
FORGED_7 = (
    "which no channel can assign; this state absorbed a forged causes header before receipt "
    "refused it (wire-format constraint 7). Reset the process's state and group offsets "
    "deliberately to proceed."
)
CORRUPT_ROW = (
    "which no channel can assign; receipt refuses negative positions, so this row is corrupt "
    "ordering state. Reset the process's state and group offsets deliberately to proceed."
)
OUT_OF_ORDER = "held messages restored out of position order: "
HELD_UNFED = (
    "every held message is fed before it is held, so this row is corrupt ordering state. "
    "Reset the process's state and group offsets deliberately to proceed."
)
ZERO = ChannelId(UUID(int=0), 1)

IMAGE_CORRUPTIONS: list[tuple[str, str, list[tuple[bytes, bytes]], str]] = [
    ("version", "value 02", _with(b"v", b"\x02"),
     "ordering store format not understood by this build"),
    ("version", "value 01 01", _with(b"v", b"\x01\x01"),
     "ordering store format not understood by this build"),
    ("version", "empty value", _with(b"v", b""),
     "ordering store format not understood by this build"),
    ("version", "judged before corrupt keys", [(b"f", b""), (b"v", b"\x02")],
     "ordering store format not understood by this build"),
    ("version", "missing with state present",
     [kv for kv in _valid_items() if kv[0] != b"v"], LOST),
    ("version", "missing with only a name binding",
     [(sc.name_key("x"), sc.encode_binding(A.topic_id))], LOST),
    ("version", "missing with only a held row", [(sc.held_key(A, 1), EXAMPLE_2)], LOST),
    ("key", "empty key", _with(b"", b"x"), "corrupt ordering key: length 0"),
    ("key", "unknown tag", _with(b"z\x00", b"x"), "corrupt ordering key: unknown tag 'z'"),
    ("key", "unknown non-printable tag", _with(b"\x01", b"x"),
     "corrupt ordering key: unknown tag 0x01"),
    ("key", "version key with a suffix", _with(b"vv", b"\x01"),
     "corrupt ordering key: length 2 for tag 'v'"),
    ("key", "fed key 20 bytes", _with(sc.fed_key(A)[:-1], sc.encode_long(1)),
     "corrupt ordering key: length 20 for tag 'f'"),
    ("key", "frontier key 22 bytes", _with(sc.frontier_key(A) + b"\x00", sc.encode_long(1)),
     "corrupt ordering key: length 22 for tag 'c'"),
    ("key", "past key 1 byte", _with(b"p", sc.encode_long(1)),
     "corrupt ordering key: length 1 for tag 'p'"),
    ("key", "negative partition", _with(b"f" + A.topic_id.bytes + b"\xff\xff\xff\xff",
                                        sc.encode_long(1)),
     "corrupt ordering key: negative partition -1 for tag 'f'"),
    ("key", "held key 28 bytes", _with(sc.held_key(A, 20)[:-1], EXAMPLE_2),
     "corrupt held key: length 28"),
    ("key", "held key 30 bytes", _with(sc.held_key(A, 20) + b"\x00", EXAMPLE_2),
     "corrupt held key: length 30"),
    ("key", "held position negative", _with(sc.held_prefix(B) + b"\xff" * 8, EXAMPLE_2),
     f"corrupt held key: position -1 on {B}, which no channel can assign"),
    ("key", "held position 2^63-1", _with(sc.held_prefix(B) + sc.encode_long(FED_TO_END),
                                          EXAMPLE_2),
     f"corrupt held key: position {FED_TO_END} on {B}, which no channel can assign"),
    ("key", "empty topic name", _with(b"n", sc.encode_binding(A.topic_id)),
     "corrupt ordering key: empty topic name for tag 'n'"),
    ("key", "topic name not UTF-8", _with(b"n\xff", sc.encode_binding(A.topic_id)),
     "corrupt ordering key: topic name is not UTF-8 for tag 'n'"),
    ("value", "fed value 7 bytes", _with(sc.fed_key(A), b"\x00" * 7),
     "corrupt ordering value: length 7 where 8 bytes were written"),
    ("value", "frontier value 9 bytes", _with(sc.frontier_key(A), b"\x00" * 9),
     "corrupt ordering value: length 9 where 8 bytes were written"),
    ("value", "past value empty", _with(sc.past_key(A), b""),
     "corrupt ordering value: length 0 where 8 bytes were written"),
    ("value", "binding 16 bytes", _with(sc.name_key("orders"), A.topic_id.bytes),
     "corrupt ordering value: name binding for 'orders' has length 16 where 20 bytes were "
     "written"),
    ("value", "corrupt held blob", _with(sc.held_key(A, 11), _patch(EXAMPLE_1, 10, "fffffffe")),
     "corrupt held blob: key length -2 with 52 bytes remaining"),
    ("restore", "frontier names the zero topic id", _with(sc.frontier_key(ZERO), sc.encode_long(1)),
     "restored frontier names the reserved zero topic id; this state absorbed a forged causes "
     "header before receipt refused it (wire-format constraint 5). Reset the process's state "
     "and group offsets deliberately to proceed."),
    ("restore", "frontier 2^63-1", _with(sc.frontier_key(A), sc.encode_long(FED_TO_END)),
     f"restored frontier names position {FED_TO_END} on {A}, {FORGED_7}"),
    ("restore", "frontier negative", _with(sc.frontier_key(A), sc.encode_long(-3)),
     f"restored frontier names position -3 on {A}, {CORRUPT_ROW}"),
    ("restore", "delivered past 2^63-1", _with(sc.past_key(B), sc.encode_long(FED_TO_END)),
     f"restored delivered past names position {FED_TO_END} on {B}, {FORGED_7}"),
    ("restore", "delivered past negative", _with(sc.past_key(B), sc.encode_long(-1)),
     f"restored delivered past names position -1 on {B}, {CORRUPT_ROW}"),
    ("restore", "coverage negative", _with(sc.fed_key(A), sc.encode_long(-2)),
     f"restored coverage names position -2 on {A}, {CORRUPT_ROW}"),
    ("restore", "coverage -1", _with(sc.fed_key(CH0), sc.encode_long(-1)),
     f"restored coverage names position -1 on {CH0}, {CORRUPT_ROW}"),
    ("restore", "held above its channel's coverage", _with(sc.held_key(A, 14), EXAMPLE_2),
     f"{OUT_OF_ORDER}held message at {A}@14 above its channel's coverage (fedUpTo=13); "
     f"{HELD_UNFED}"),
    ("restore", "held far above a low coverage",
     [(b"v", b"\x01"), (sc.fed_key(A), sc.encode_long(5)), (sc.held_key(A, 10), EXAMPLE_2)],
     f"{OUT_OF_ORDER}held message at {A}@10 above its channel's coverage (fedUpTo=5); "
     f"{HELD_UNFED}"),
    ("restore", "held on a channel with no coverage row",
     _with(sc.held_key(B, 2), EXAMPLE_2, drop=sc.fed_key(B)),
     f"{OUT_OF_ORDER}held message at {B}@2 on a channel with no coverage row; {HELD_UNFED}"),
    ("restore", "held on a fed-to-end channel", _with(sc.held_key(D, 1), EXAMPLE_2),
     f"{OUT_OF_ORDER}held message at {D}@1 on a channel recorded as no longer existing "
     f"(fedUpTo={FED_TO_END}); a channel is fed to its end only with nothing held, so "
     "this row is corrupt ordering state. Reset the process's state and group offsets "
     "deliberately to proceed."),
    ("restore", "held rows out of position order",
     [(b"v", b"\x01"), (sc.held_key(A, 5), EXAMPLE_2), (sc.held_key(A, 4), EXAMPLE_2)],
     f"held messages restored out of position order on {A} (5 before 4); the store's scan "
     "broke its ordering contract"),
    ("restore", "held row repeated",
     [(b"v", b"\x01"), (sc.held_key(A, 5), EXAMPLE_2), (sc.held_key(A, 5), EXAMPLE_2)],
     f"held messages restored out of position order on {A} (5 before 5); the store's scan "
     "broke its ordering contract"),
]


@pytest.mark.parametrize(
    ("family", "label", "items", "expected"),
    IMAGE_CORRUPTIONS,
    ids=[f"{f}: {label}" for f, label, _, _ in IMAGE_CORRUPTIONS],
)
def test_load_image_corruption(
    family: str, label: str, items: list[tuple[bytes, bytes]], expected: str
) -> None:
    with pytest.raises(ParsleyFailClosedError) as caught:
        sc.load_image(items)
    assert refused(caught) == expected, f"{family}/{label}"
    assert_seed_shape(Reason.UNKNOWN_ORDERING_STATE_FORMAT, caught.value.detail)


def test_fed_rows_keep_the_sentinel_and_allow_any_position() -> None:
    # fedUpTo is not a wire position: 2^63-1 is the fed-to-end sentinel, stored verbatim.
    image = sc.load_image(_with(sc.fed_key(CH0), sc.encode_long(FED_TO_END)))
    assert image.fed[CH0] == FED_TO_END


def test_load_image_accepts_a_generator() -> None:
    image = sc.load_image(iter(_valid_items()))
    assert image.held == {A: [11, 13], B: [2]}
