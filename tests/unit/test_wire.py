"""The ``parsley.causes`` codec against the Java implementation's vectors.

One swept catalogue (family, label, hex, expected) holds every vector of
docs/wire-format.md, "Examples", plus one per diagnosis string of Java's ``CausesCodec``; expected
is either the decoded causes or the exact
diagnosis. Placement rules (``causes_from_headers``) have their own table.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import pytest

from parsley import wire
from parsley.engine.channel import ChannelId, Header
from parsley.native import BUILT
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.codec_impls import NATIVE, Codecs

# Every test runs on both codec implementations (tests/conftest.py, "codecs").
pytestmark = pytest.mark.usefixtures("codecs")

A = UUID("0102030405060708090a0b0c0d0e0f10")
B = UUID("f102030405060708090a0b0c0d0e0f10")
C = UUID("00000000000000010000000000000001")
CH = C.hex  # 16-byte topic id of C, as hex

Causes = dict[ChannelId, int]


def ch(topic: UUID, partition: int) -> ChannelId:
    return ChannelId(topic, partition)


# (family, label, hex, expected): expected is a dict for a valid value, a
# diagnosis string for a refused one.
CATALOGUE: list[tuple[str, str, str, Causes | str]] = [
    # --- docs/wire-format.md "Examples", valid
    ("valid", "no causes", "0100", {}),
    (
        "valid",
        "two topics, three channels (wire-format.md Examples)",
        "0102" + A.hex + "02" + "02" + "0000000000000029" + "05" + "0000000000000007"
        + B.hex + "01" + "00" + "0000000000000009",
        {ch(A, 2): 41, ch(A, 5): 7, ch(B, 0): 9},
    ),
    (
        "valid",
        "two-byte partition varint 300 (wire-format.md Examples)",
        "01010000000000000001000000000000000101ac020000000000000007",
        {ch(C, 300): 7},
    ),
    # --- extra valid edges
    ("valid", "position zero", "0101" + CH + "0100" + "0000000000000000", {ch(C, 0): 0}),
    (
        "valid",
        "largest legal position 2^63-2",
        "0101" + CH + "0100" + "7ffffffffffffffe",
        {ch(C, 0): 2**63 - 2},
    ),
    (
        "valid",
        "largest partition 2^31-1, five-byte varint ending 07",
        "0101" + CH + "01ffffffff07" + "0000000000000001",
        {ch(C, 2**31 - 1): 1},
    ),
    (
        "valid",
        "partition 127 is one byte, 128 two",
        "0101" + CH + "027f00000000000000018001" + "0000000000000002",
        {ch(C, 127): 1, ch(C, 128): 2},
    ),
    # --- docs/wire-format.md "Examples", refused: version (constraint 1)
    ("version", "00", "0000", "unknown causes format version 0"),
    ("version", "02", "0200", "unknown causes format version 2"),
    ("version", "ff printed unsigned", "ff00", "unknown causes format version 255"),
    # --- docs/wire-format.md "Examples", refused: truncated
    ("truncated", "empty value", "", "truncated causes header"),
    ("truncated", "version only", "01", "truncated causes header"),
    ("truncated", "topic count varint cut", "01ac", "truncated causes header"),
    (
        "truncated",
        "second topic id cut (wire-format.md Examples)",
        "01020000000000000001000000000000000101000000000000000029000000000000",
        "truncated causes header",
    ),
    ("truncated", "partition count missing", "0101" + CH, "truncated causes header"),
    ("truncated", "partition missing", "0101" + CH + "01", "truncated causes header"),
    ("truncated", "position cut", "0101" + CH + "0100" + "00000000000000",
     "truncated causes header"),
    ("truncated", "pair missing", "0101" + CH + "0200" + "0000000000000001",
     "truncated causes header"),
    ("truncated", "partition varint cut", "0101" + CH + "0180", "truncated causes header"),
    ("truncated", "group missing", "0102" + CH + "0100" + "0000000000000001",
     "truncated causes header"),
    # --- constraint 6, 7
    (
        "position",
        "negative (wire-format.md Examples)",
        "0101000000000000000100000000000000010100fffffffffffffffb",
        f"negative position -5 on {C}-0",
    ),
    (
        "position",
        "Long.MIN_VALUE",
        "0101" + CH + "0103" + "8000000000000000",
        f"negative position -9223372036854775808 on {C}-3",
    ),
    (
        "position",
        "reserved maximum 2^63-1",
        "0101" + CH + "0100" + "7fffffffffffffff",
        f"position 9223372036854775807 on {C}-0 is beyond any position a channel can assign",
    ),
    # --- constraint 5
    (
        "topic",
        "zero topic id (wire-format.md Examples)",
        "01010000000000000000000000000000000001000000000000000007",
        "zero topic id at group 0; the substrate never assigns it to a channel",
    ),
    (
        "topic",
        "zero topic id in the second group",
        "0102" + CH + "0100" + "0000000000000001" + "00" * 16 + "0100" + "0000000000000001",
        "zero topic id at group 1; the substrate never assigns it to a channel",
    ),
    # --- constraint 3
    (
        "topic",
        "same topic twice",
        "0102" + CH + "0100" + "0000000000000001" + CH + "0101" + "0000000000000001",
        f"topics not strictly ascending at {C}",
    ),
    (
        "topic",
        "topics descending (unsigned compare: f1.. before 01..)",
        "0102" + B.hex + "0100" + "0000000000000001" + A.hex + "0100" + "0000000000000001",
        f"topics not strictly ascending at {A}",
    ),
    # --- constraint 4
    (
        "partition",
        "not ascending (wire-format.md Examples)",
        "01010000000000000001000000000000000102050000000000000001020000000000000002",
        f"partitions not strictly ascending at {C}-2",
    ),
    (
        "partition",
        "repeated",
        "0101" + CH + "02" + "03" + "0000000000000001" + "03" + "0000000000000002",
        f"partitions not strictly ascending at {C}-3",
    ),
    (
        "partition",
        "topic naming zero partitions (wire-format.md Examples)",
        "01010000000000000001000000000000000100",
        f"topic {C} names zero partitions",
    ),
    # --- varints
    (
        "varint",
        "non-minimal topic count (wire-format.md Examples)",
        "0181000000000000000001000000000000000101000000000000000001",
        "non-minimal varint in topic count",
    ),
    ("varint", "non-minimal topic count 80 00", "018000", "non-minimal varint in topic count"),
    (
        "varint",
        "non-minimal partition count",
        "0101" + CH + "8100" + "00" + "0000000000000001",
        "non-minimal varint in partition count",
    ),
    (
        "varint",
        "non-minimal partition",
        "0101" + CH + "01" + "8000" + "0000000000000001",
        "non-minimal varint in partition",
    ),
    (
        "varint",
        "five-byte non-minimal (terminal 00 on byte five)",
        "0101" + CH + "01" + "8080808000" + "0000000000000001",
        "non-minimal varint in partition",
    ),
    (
        "varint",
        "fifth byte 10 would alias 05 on a 32-bit reader",
        "0101" + CH + "01" + "8580808010" + "0000000000000001",
        "partition varint exceeds the non-negative int range",
    ),
    (
        "varint",
        "fifth byte 08 is past 2^31-1",
        "0101" + CH + "01" + "ffffffff08" + "0000000000000001",
        "partition varint exceeds the non-negative int range",
    ),
    (
        "varint",
        "six-byte varint refused at its fifth byte",
        "0101" + CH + "01" + "808080808001" + "0000000000000001",
        "partition varint exceeds the non-negative int range",
    ),
    ("varint", "topic count too wide", "01ffffffff0f",
     "topic count varint exceeds the non-negative int range"),
    (
        "varint",
        "partition count too wide",
        "0101" + CH + "ffffffff7f",
        "partition count varint exceeds the non-negative int range",
    ),
    # --- constraint 2
    ("trailing", "one byte after zero groups", "010000", "1 trailing bytes after 0 topic groups"),
    (
        "trailing",
        "three bytes after one group",
        "0101" + CH + "0100" + "0000000000000001" + "aabbcc",
        "3 trailing bytes after 1 topic groups",
    ),
    # --- check order: the earlier check wins
    (
        "order",
        "zero id is checked before order",
        "0102" + CH + "0100" + "0000000000000001" + "00" * 16 + "00",
        "zero topic id at group 1; the substrate never assigns it to a channel",
    ),
    (
        "order",
        "topic order before partition count",
        "0102" + CH + "0100" + "0000000000000001" + CH + "00",
        f"topics not strictly ascending at {C}",
    ),
    (
        "order",
        "partition order before reading the position",
        "0101" + CH + "02" + "05" + "0000000000000001" + "04",
        f"partitions not strictly ascending at {C}-4",
    ),
    (
        "order",
        "negative position before later trailing bytes",
        "0101" + CH + "0100" + "ffffffffffffffff" + "00",
        f"negative position -1 on {C}-0",
    ),
]


@pytest.mark.parametrize(
    ("family", "label", "hexvalue", "expected"),
    CATALOGUE,
    ids=[f"{f}: {label}" for f, label, _, _ in CATALOGUE],
)
def test_catalogue(family: str, label: str, hexvalue: str, expected: Causes | str) -> None:
    value = bytes.fromhex(hexvalue)
    if isinstance(expected, dict):
        decoded = wire.decode_causes(value)
        assert decoded == expected, f"{family}/{label}: decoded {decoded}"
        assert list(decoded) == sorted(decoded), f"{family}/{label}: not in channel order"
        assert wire.encode_causes(decoded) == value, f"{family}/{label}: not re-encoded verbatim"
        assert wire.encoded_size(decoded) == len(value), f"{family}/{label}: size formula"
    else:
        with pytest.raises(ParsleyFailClosedError) as caught:
            wire.decode_causes(value)
        assert caught.value.reason is Reason.UNDECODABLE_METADATA, f"{family}/{label}"
        assert caught.value.detail == expected, f"{family}/{label}: wrong diagnosis"


def test_catalogue_covers_every_java_diagnosis() -> None:
    refused = [e for _, _, _, e in CATALOGUE if isinstance(e, str)]
    shapes = [
        "unknown causes format version",
        "truncated causes header",
        "trailing bytes after",
        "zero topic id at group",
        "topics not strictly ascending at",
        "names zero partitions",
        "partitions not strictly ascending at",
        "negative position",
        "is beyond any position a channel can assign",
        "non-minimal varint in topic count",
        "non-minimal varint in partition count",
        "non-minimal varint in partition",
        "topic count varint exceeds",
        "partition count varint exceeds",
        "partition varint exceeds",
    ]
    missing = [s for s in shapes if not any(s in r for r in refused)]
    assert not missing, f"catalogue lacks a vector for: {missing}"


def test_null_value_is_refused() -> None:
    with pytest.raises(ParsleyFailClosedError) as caught:
        wire.decode_causes(None)
    assert caught.value.reason is Reason.UNDECODABLE_METADATA
    assert caught.value.detail == "causes header present with null value"


def test_bytearray_and_memoryview_accepted() -> None:
    value = bytes.fromhex("01010000000000000001000000000000000101ac020000000000000007")
    assert wire.decode_causes(bytearray(value)) == {ch(C, 300): 7}
    assert wire.decode_causes(memoryview(value)) == {ch(C, 300): 7}


def test_encode_sorts_and_groups() -> None:
    causes = {ch(B, 0): 9, ch(A, 5): 7, ch(A, 2): 41}
    assert wire.encode_causes(causes).hex() == CATALOGUE[1][2]
    assert wire.encode_causes({}) == b"\x01\x00" == wire.EMPTY_CAUSES


@pytest.mark.parametrize(
    ("causes", "message"),
    [
        ({ch(C, 0): -1}, "position -1"),
        ({ch(C, 0): 2**63 - 1}, "position 9223372036854775807"),
        ({ch(UUID(int=0), 0): 1}, "zero topic id"),
    ],
)
def test_encode_refuses_what_readers_refuse(causes: Causes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        wire.encode_causes(causes)
    with pytest.raises(ValueError, match=message):
        wire.encoded_size(causes)


def test_size_formula_small_ids() -> None:
    # 2 + sum_t (17 + 9 n_t): 26 bytes for a topic's first channel, 9 per further one.
    causes = {ch(A, p): p for p in range(5)} | {ch(B, 0): 1}
    assert wire.encoded_size(causes) == 2 + (17 + 9 * 5) + (17 + 9 * 1)
    assert len(wire.encode_causes(causes)) == wire.encoded_size(causes)
    assert wire.encoded_size({}) == 2


def test_varint_size_bounds() -> None:
    widths = {0: 1, 127: 1, 128: 2, 16383: 2, 16384: 3, 2**21: 4, 2**28 - 1: 4, 2**28: 5,
              2**31 - 1: 5}
    for value, width in widths.items():
        assert wire.varint_size(value) == width, f"varint_size({value})"
    for bad in (-1, 2**31):
        with pytest.raises(ValueError):
            wire.varint_size(bad)


# ---------------------------------------------------------------- placement

GOOD = bytes.fromhex("01010000000000000001000000000000000101ac020000000000000007")


@pytest.mark.parametrize(
    ("label", "headers", "budget", "expected"),
    [
        ("absent: no causes", [("trace", b"x")], 100, None),
        ("no headers at all", [], 100, None),
        ("present and valid", [("a", None), (wire.CAUSES_HEADER, GOOD)], 100, {ch(C, 300): 7}),
        ("empty causes", [(wire.CAUSES_HEADER, b"\x01\x00")], 100, {}),
        ("length equal to the budget is allowed", [(wire.CAUSES_HEADER, GOOD)], len(GOOD),
         {ch(C, 300): 7}),
        ("similar key is not the header", [("parsley.causes2", b"junk"), ("Parsley.causes", b"")],
         100, None),
        (
            "duplicate",
            [(wire.CAUSES_HEADER, GOOD), (wire.CAUSES_HEADER, GOOD)],
            100,
            (Reason.UNDECODABLE_METADATA, "duplicate parsley.causes headers"),
        ),
        (
            "duplicate wins over the budget",
            [(wire.CAUSES_HEADER, b"x" * 50), (wire.CAUSES_HEADER, None)],
            10,
            (Reason.UNDECODABLE_METADATA, "duplicate parsley.causes headers"),
        ),
        (
            "null value is present, not absent",
            [(wire.CAUSES_HEADER, None)],
            100,
            (Reason.UNDECODABLE_METADATA, "causes header present with null value"),
        ),
        (
            "empty value is present, not absent",
            [(wire.CAUSES_HEADER, b"")],
            100,
            (Reason.UNDECODABLE_METADATA, "truncated causes header"),
        ),
        (
            "over budget refused before decoding (garbage never decoded)",
            [(wire.CAUSES_HEADER, b"\xff" * 11)],
            10,
            (
                Reason.METADATA_BUDGET_EXCEEDED,
                "carries 11 bytes of causal metadata; the configured budget is 10 bytes",
            ),
        ),
        (
            "within budget, then decoded and refused",
            [(wire.CAUSES_HEADER, b"\x02\x00")],
            10,
            (Reason.UNDECODABLE_METADATA, "unknown causes format version 2"),
        ),
    ],
)
def test_placement(
    label: str,
    headers: list[tuple[str, bytes | None]],
    budget: int,
    expected: Causes | tuple[Reason, str] | None,
) -> None:
    if isinstance(expected, tuple):
        with pytest.raises(ParsleyFailClosedError) as caught:
            wire.causes_from_headers(headers, budget)
        assert (caught.value.reason, caught.value.detail) == expected, label
    else:
        assert wire.causes_from_headers(headers, budget) == expected, label


def test_strip_reserved() -> None:
    headers = [("a", b"1"), (wire.CAUSES_HEADER, b"\x01\x00"), ("parsley.other", None),
               ("b", None), ("parsley", b"2"), ("Parsley.x", b"3")]
    assert wire.strip_reserved(headers) == (("a", b"1"), ("b", None), ("parsley", b"2"),
                                            ("Parsley.x", b"3"))
    assert wire.is_reserved("parsley.causes") and not wire.is_reserved("parsley")


@pytest.mark.parametrize(
    ("label", "headers", "expected"),
    [
        ("no headers", (), (False, None, ())),
        ("only the causes header", ((wire.CAUSES_HEADER, b"\x00"),), (True, b"\x00", ())),
        ("null causes value", ((wire.CAUSES_HEADER, None),), (True, None, ())),
        ("application headers only", (("a", b"1"), ("b", None)),
         (False, None, (("a", b"1"), ("b", None)))),
        ("causes among others", (("a", b"1"), (wire.CAUSES_HEADER, b"\x00"), ("b", None)),
         (True, b"\x00", (("a", b"1"), ("b", None)))),
        ("other reserved only", (("parsley.x", b"1"), ("a", None)), (False, None, (("a", None),))),
        ("a list is returned as a tuple", [("a", b"1")], (False, None, (("a", b"1"),))),
        ("prefix is case-sensitive", (("Parsley.causes", b"1"),),
         (False, None, (("Parsley.causes", b"1"),))),
    ],
)
def test_split_causes_header(
    label: str, headers: Sequence[Header], expected: tuple[bool, bytes | None, tuple[Header, ...]]
) -> None:
    found, raw, app = wire.split_causes_header(headers)
    assert (found, raw, app) == expected, label
    assert type(app) is tuple, label


@pytest.mark.parametrize(
    "headers",
    [((wire.CAUSES_HEADER, b"\x00"), (wire.CAUSES_HEADER, b"\x00")),
     (("a", None), (wire.CAUSES_HEADER, None), ("parsley.x", None), (wire.CAUSES_HEADER, b""))],
)
def test_split_causes_header_refuses_duplicates(headers: Sequence[Header]) -> None:
    with pytest.raises(ParsleyFailClosedError) as caught:
        wire.split_causes_header(headers)
    assert caught.value.reason is Reason.UNDECODABLE_METADATA
    assert caught.value.detail == "duplicate parsley.causes headers"


def _cached() -> int:
    return sum(len(entry[1]) for entry in wire._channel_cache.values())


def _sizes(codecs: Codecs) -> tuple[int, int, int]:
    """(topics, channels, reverse entries) in the codec's channel cache."""
    if codecs is NATIVE:
        return BUILT.channel_cache_size()  # type: ignore[union-attr,no-any-return]
    assert wire._cached_channels == _cached(), "the channel count drifted"
    return len(wire._channel_cache), _cached(), 0


@pytest.mark.slow
def test_cache_stays_bounded(codecs: Codecs) -> None:
    # Many distinct topics: the decoder's channel cache must not grow without bound.
    for n in range(1, 5000):
        value = wire.encode_causes({ch(UUID(int=n), 0): 1})
        assert wire.decode_causes(value) == {ch(UUID(int=n), 0): 1}
        assert _sizes(codecs)[0] <= wire._CACHE_TOPICS, "topic level unbounded"
    # Many partitions: the channel total is bounded too, and decoding stays right
    # across a clear in the middle of a group.
    many = {ch(UUID(int=7), p): p for p in range(wire._CACHE_CHANNELS + 1000)}
    assert wire.decode_causes(wire.encode_causes(many)) == many
    _topics, channels, reverse = _sizes(codecs)
    assert channels <= wire._CACHE_CHANNELS, "channel level unbounded"
    assert reverse <= wire._CACHE_CHANNELS, "reverse level unbounded"


@pytest.mark.slow
def test_threads_share_the_cache_safely() -> None:
    # Four threads decode and encode at once while the cache fills and clears (many
    # topics): every result stays right and nothing deadlocks (the native cache's lock is
    # never held across a call into Python).
    import threading

    values = [wire.encode_causes({ch(UUID(int=n * 64 + k), k % 3): n for k in range(1, 9)})
              for n in range(1, 700)]
    expected = [wire.decode_causes(v) for v in values]
    failures: list[str] = []

    def work(offset: int) -> None:
        for i in range(len(values)):
            j = (i + offset * 97) % len(values)
            got = wire.decode_causes(values[j])
            if got != expected[j] or wire.encode_causes(got) != values[j]:
                failures.append(f"value {j}")

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a decoding thread is stuck"
    assert not failures, failures[:5]
