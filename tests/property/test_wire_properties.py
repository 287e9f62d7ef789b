"""Hypothesis properties of the ``parsley.causes`` codec (docs/wire-format.md).

The oracle is :func:`reference_decode`, written here from the grammar alone and
differently from ``parsley.wire``: a byte cursor that raises on exhaustion,
varints summed from their 7-bit groups and judged minimal by comparing their
width with the value's minimal width, positions read as signed big-endian
integers, order checked on (int, int) tuples. It returns the causes or the
diagnosis, following the documented check order, so the two decoders must
agree on every input, valid or not. Every property runs against both
implementations of the codec (``codec``: the Python reference and the Rust codec,
tests/codec_impls.py).
"""

from __future__ import annotations

import random
from uuid import UUID

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from parsley.engine.channel import ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.codec_impls import ALL, Codecs

both = pytest.mark.parametrize("codec", ALL, ids=str)

MAX_POSITION = 2**63 - 2


class _Short(Exception):
    pass


class _Cursor:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise _Short
        chunk = self.data[self.at:self.at + n]
        self.at += n
        return chunk

    def varint(self, field: str) -> int:
        groups: list[int] = []
        while True:
            (b,) = self.take(1)
            if len(groups) == 4 and b >> 3:
                raise _Refused(f"{field} varint exceeds the non-negative int range")
            groups.append(b & 0x7F)
            if b < 0x80:
                break
        value = sum(g << (7 * k) for k, g in enumerate(groups))
        minimal_width = max(1, -(-value.bit_length() // 7))
        if len(groups) != minimal_width:
            raise _Refused(f"non-minimal varint in {field}")
        return value


class _Refused(Exception):
    pass


def reference_decode(value: bytes | None) -> dict[ChannelId, int] | str:
    """Decode from the grammar alone; return the causes or the diagnosis."""
    if value is None:
        return "causes header present with null value"
    cur = _Cursor(value)
    try:
        (version,) = cur.take(1)
        if version != 1:
            return f"unknown causes format version {version}"
        topics = cur.varint("topic count")
        out: dict[ChannelId, int] = {}
        previous_topic = -1
        for group in range(topics):
            topic = int.from_bytes(cur.take(16), "big")
            uuid = UUID(int=topic)
            if topic == 0:
                return (f"zero topic id at group {group}; "
                        "the substrate never assigns it to a channel")
            if topic <= previous_topic:
                return f"topics not strictly ascending at {uuid}"
            previous_topic = topic
            count = cur.varint("partition count")
            if count == 0:
                return f"topic {uuid} names zero partitions"
            previous_partition = -1
            for _ in range(count):
                partition = cur.varint("partition")
                if partition <= previous_partition:
                    return f"partitions not strictly ascending at {uuid}-{partition}"
                previous_partition = partition
                position = int.from_bytes(cur.take(8), "big", signed=True)
                if position < 0:
                    return f"negative position {position} on {uuid}-{partition}"
                if position > MAX_POSITION:
                    return (f"position {position} on {uuid}-{partition} "
                            "is beyond any position a channel can assign")
                out[ChannelId(uuid, partition)] = position
        rest = len(value) - cur.at
        if rest:
            return f"{rest} trailing bytes after {topics} topic groups"
        return out
    except _Short:
        return "truncated causes header"
    except _Refused as refused:
        return str(refused)


def production(codec: Codecs, value: bytes | None) -> dict[ChannelId, int] | str:
    try:
        return codec.decode_causes(value)
    except ParsleyFailClosedError as exc:
        assert exc.reason is Reason.UNDECODABLE_METADATA, f"wrong reason {exc.reason}"
        return exc.detail


# ------------------------------------------------------------------ strategies

topic_ids = st.one_of(
    st.sampled_from([UUID(int=1), UUID(int=2**127), UUID(int=2**128 - 1),
                     UUID("0102030405060708090a0b0c0d0e0f10")]),
    st.integers(1, 2**128 - 1).map(lambda n: UUID(int=n)),
)
partitions = st.one_of(
    st.integers(0, 3),
    st.sampled_from([127, 128, 16383, 16384, 2**21 - 1, 2**21, 2**28 - 1, 2**28, 2**31 - 1]),
    st.integers(0, 2**31 - 1),
)
positions = st.one_of(st.integers(0, 1000), st.sampled_from([0, 2**31, 2**62, MAX_POSITION]),
                      st.integers(0, MAX_POSITION))
channels = st.builds(ChannelId, topic_ids, partitions)
cause_sets = st.one_of(
    st.dictionaries(channels, positions, max_size=40),
    # many partitions of few topics, to grow partition counts past one varint byte
    st.builds(
        lambda topic, count, pos: {ChannelId(topic, p): pos for p in range(count)},
        topic_ids, st.integers(1, 300), positions,
    ),
)


# ------------------------------------------------------------------ properties


@both
@given(cause_sets)
def test_decode_inverts_encode(codec: Codecs, causes: dict[ChannelId, int]) -> None:
    value = codec.encode_causes(causes)
    assert codec.decode_causes(value) == causes
    assert reference_decode(value) == causes, "the reference decoder disagrees"
    assert list(codec.decode_causes(value)) == sorted(causes), "decoded out of channel order"


@both
@given(cause_sets)
def test_encoded_size_is_the_length(codec: Codecs, causes: dict[ChannelId, int]) -> None:
    assert codec.encoded_size(causes) == len(codec.encode_causes(causes))


@both
@given(cause_sets, st.randoms(use_true_random=False))
def test_canonical_bytes_whatever_the_order(
    codec: Codecs, causes: dict[ChannelId, int], rnd: random.Random
) -> None:
    items = list(causes.items())
    rnd.shuffle(items)
    assert codec.encode_causes(dict(items)) == codec.encode_causes(causes)


@both
@given(cause_sets, cause_sets)
def test_distinct_sets_distinct_bytes(
    codec: Codecs, a: dict[ChannelId, int], b: dict[ChannelId, int]
) -> None:
    assume(a != b)
    assert codec.encode_causes(a) != codec.encode_causes(b)


MUTATIONS = st.sampled_from(["replace", "truncate", "insert", "delete", "flip"])


@pytest.mark.slow
@both
@settings(max_examples=400)
@given(cause_sets, MUTATIONS, st.integers(0, 2**16), st.integers(0, 255))
def test_any_mutation_decodes_or_is_undecodable(
    codec: Codecs, causes: dict[ChannelId, int], kind: str, where: int, byte: int
) -> None:
    value = codec.encode_causes(causes)
    i = where % (len(value) + (1 if kind == "insert" else 0))
    if kind == "replace":
        mutated = value[:i] + bytes((byte,)) + value[i + 1:]
    elif kind == "truncate":
        mutated = value[:i]
    elif kind == "insert":
        mutated = value[:i] + bytes((byte,)) + value[i:]
    elif kind == "delete":
        mutated = value[:i] + value[i + 1:]
    else:
        mutated = value[:i] + bytes((value[i] ^ (1 << (byte % 8)),)) + value[i + 1:]
    got = production(codec, mutated)  # raises on anything but UNDECODABLE_METADATA
    assert got == reference_decode(mutated), f"decoders disagree on {mutated.hex()}"
    if isinstance(got, dict):
        assert codec.encode_causes(got) == mutated, "a decodable value was not canonical"


@both
@given(st.binary(max_size=64))
def test_arbitrary_bytes(codec: Codecs, value: bytes) -> None:
    got = production(codec, value)
    assert got == reference_decode(value), f"decoders disagree on {value.hex()}"


@both
@given(st.binary(max_size=40).map(lambda b: b"\x01" + b))
def test_arbitrary_bodies(codec: Codecs, value: bytes) -> None:
    got = production(codec, value)
    assert got == reference_decode(value), f"decoders disagree on {value.hex()}"
    if isinstance(got, dict):
        assert codec.encode_causes(got) == value


@both
def test_reference_decoder_agrees_on_the_null_value(codec: Codecs) -> None:
    assert (production(codec, None) == reference_decode(None)
            == "causes header present with null value")
