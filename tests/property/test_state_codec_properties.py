"""Hypothesis properties of the ordering-state codec (docs/model.md, "The stored form").

Held blobs round-trip byte for byte; any mutation of a blob decodes to a
message that re-encodes to the same bytes or refuses with
UNKNOWN_ORDERING_STATE_FORMAT; an image written from a random state loads back
to that state. Every property runs against both implementations (``codec``: the
Python reference and the Rust codec, tests/codec_impls.py).
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.codec_impls import ALL, Codecs

both = pytest.mark.parametrize("codec", ALL, ids=str)

INT64 = st.integers(-(2**63), 2**63 - 1)
channels = st.builds(
    ChannelId,
    st.integers(1, 2**128 - 1).map(lambda n: UUID(int=n)),
    st.integers(0, 2**31 - 1),
)
blobs_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=16))), max_size=6
).map(tuple)
causes = st.lists(st.tuples(channels, st.integers(0, 2**63 - 2)), max_size=6).map(tuple)
messages = st.builds(sc.HeldMessage, INT64, blobs_bytes, blobs_bytes, headers, causes)


@both
@given(messages)
def test_held_round_trip(codec: Codecs, m: sc.HeldMessage) -> None:
    blob = codec.encode_held(m)
    assert codec.decode_held(blob) == m
    codec.validate_held(blob)


@pytest.mark.slow
@both
@settings(max_examples=400)
@given(messages, st.sampled_from(["replace", "truncate", "insert", "delete"]),
       st.integers(0, 2**16), st.integers(0, 255))
def test_held_mutation_decodes_or_refuses(codec: Codecs, m: sc.HeldMessage, kind: str,
                                          where: int, byte: int) -> None:
    blob = codec.encode_held(m)
    i = where % (len(blob) + (1 if kind == "insert" else 0))
    if kind == "replace":
        mutated = blob[:i] + bytes((byte,)) + blob[i + 1:]
    elif kind == "truncate":
        mutated = blob[:i]
    elif kind == "insert":
        mutated = blob[:i] + bytes((byte,)) + blob[i:]
    else:
        mutated = blob[:i] + blob[i + 1:]
    try:
        decoded = codec.decode_held(mutated)
    except ParsleyFailClosedError as exc:
        assert exc.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
        try:
            codec.validate_held(mutated)
        except ParsleyFailClosedError as again:
            assert again.detail == exc.detail, "validate_held and decode_held disagree"
        else:
            raise AssertionError("validate_held accepted what decode_held refused") from None
    else:
        codec.validate_held(mutated)
        assert codec.encode_held(decoded) == mutated, "a decodable blob did not re-encode verbatim"


positions = st.integers(0, 2**63 - 2)


@both
@given(
    st.dictionaries(channels, st.one_of(positions, st.just(FED_TO_END)), max_size=5),
    st.dictionaries(channels, positions, max_size=5),
    st.dictionaries(channels, positions, max_size=5),
    st.dictionaries(st.text(min_size=1, max_size=10), channels.map(lambda c: c.topic_id),
                    max_size=4),
    st.dictionaries(channels, st.sets(positions, min_size=1, max_size=4), max_size=3),
)
def test_image_round_trip(
    codec: Codecs,
    fed: dict[ChannelId, int],
    frontier: dict[ChannelId, int],
    past: dict[ChannelId, int],
    names: dict[str, UUID],
    held: dict[ChannelId, set[int]],
) -> None:
    # A hold sits within its channel's live coverage; cover every held channel.
    for c, ps in held.items():
        if fed.get(c, -1) in (-1, FED_TO_END) or fed[c] < max(ps):
            fed[c] = max(ps)
    store = {sc.VERSION_KEY: sc.VERSION_VALUE}
    store |= {sc.fed_key(c): sc.encode_long(p) for c, p in fed.items()}
    store |= {sc.frontier_key(c): sc.encode_long(p) for c, p in frontier.items()}
    store |= {sc.past_key(c): sc.encode_long(p) for c, p in past.items()}
    store |= {sc.name_key(n): sc.encode_binding(t) for n, t in names.items()}
    blob = codec.encode_held(sc.HeldMessage(1, b"k", None))
    store |= {sc.held_key(c, p): blob for c, ps in held.items() for p in ps}
    image = codec.load_image(sorted(store.items()))
    assert image.has_version
    assert (image.fed, image.frontier, image.past, image.names) == (fed, frontier, past, names)
    assert image.held == {c: sorted(ps) for c, ps in held.items()}


@both
@given(channels, st.sets(positions, min_size=1, max_size=4),
       st.one_of(st.none(), positions, st.just(FED_TO_END)))
def test_a_hold_outside_live_coverage_is_refused(
    codec: Codecs, ch: ChannelId, held: set[int], fed: int | None
) -> None:
    store = {sc.VERSION_KEY: sc.VERSION_VALUE}
    if fed is not None:
        store[sc.fed_key(ch)] = sc.encode_long(fed)
    blob = codec.encode_held(sc.HeldMessage(1, b"k", None))
    store |= {sc.held_key(ch, p): blob for p in held}
    within = fed is not None and fed != FED_TO_END and max(held) <= fed
    if within:
        assert codec.load_image(sorted(store.items())).held == {ch: sorted(held)}
        return
    with pytest.raises(ParsleyFailClosedError) as caught:
        codec.load_image(sorted(store.items()))
    assert caught.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert caught.value.detail.startswith(
        "held messages restored out of position order: held message at "), caught.value.detail
