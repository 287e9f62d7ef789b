"""Hypothesis properties of ``parsley.session`` (docs/session.md).

* ``merge`` is a join: commutative, associative, idempotent, an upper bound of both sides,
  and equal to a plain pointwise-max model.
* Coverage is monotone: a recorded past that grows never loses coverage, a token that
  shrinks never gains a gap; ``r.coverage_of(t).covers`` exactly when ``t`` is below ``r``;
  its gaps are the reference model's.
* ``CausalPast.decode`` agrees with ``parsley.wire`` on every input of the decoder's fuzz
  corpus (``tests/wire_corpus.py``) and its seeded mutations, under both codecs.
* A token opens to the past it was minted from, and no one-character alteration opens to
  anything.
"""

from __future__ import annotations

import os
import random
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley import wire
from parsley.engine.channel import ChannelId
from parsley.engine.deliverability import Blocker
from parsley.refusals import ParsleyFailClosedError
from parsley.session import CausalPast, InvalidToken, TokenSigner
from tests.wire_corpus import SEED, corpus, mutate

MAX_POSITION = 2**63 - 2

# Few topics and partitions, so that pasts drawn independently share channels.
channels = st.builds(ChannelId, st.sampled_from([UUID(int=1), UUID(int=2**127), UUID(int=7)]),
                     st.integers(0, 3))
positions = st.one_of(st.integers(0, 20), st.sampled_from([0, 2**31, MAX_POSITION]))
pasts = st.dictionaries(channels, positions, max_size=8).map(CausalPast.of)


def _model_merge(a: CausalPast, b: CausalPast) -> dict[ChannelId, int]:
    out = dict(a.causes)
    for channel, position in b.causes.items():
        out[channel] = max(out.get(channel, -1), position)
    return out


@given(pasts, pasts)
def test_merge_is_commutative_and_the_pointwise_max(a: CausalPast, b: CausalPast) -> None:
    assert a.merge(b) == b.merge(a)
    assert dict(a.merge(b).causes) == _model_merge(a, b)
    assert list(a.merge(b).causes) == sorted(a.merge(b).causes), "channel order"


@given(pasts, pasts, pasts)
def test_merge_is_associative(a: CausalPast, b: CausalPast, c: CausalPast) -> None:
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@given(pasts)
def test_merge_is_idempotent(a: CausalPast) -> None:
    assert a.merge(a) is a
    for channel, position in a.causes.items():
        assert a.merge(channel, position) is a


@given(pasts, pasts)
def test_merge_is_an_upper_bound_and_the_least(a: CausalPast, b: CausalPast) -> None:
    joined = a.merge(b)
    assert joined.coverage_of(a).covers and joined.coverage_of(b).covers
    # And no more than both: every entry of the join is one side's.
    for channel, position in joined.causes.items():
        assert position in (a.causes.get(channel), b.causes.get(channel))


@given(pasts, channels, positions)
def test_merging_a_coordinate_is_merging_its_past(
    a: CausalPast, channel: ChannelId, position: int
) -> None:
    assert a.merge(channel, position) == a.merge(CausalPast.of({channel: position}))


@given(pasts, pasts)
def test_covers_exactly_when_the_token_is_below(recorded: CausalPast, token: CausalPast) -> None:
    covers = recorded.coverage_of(token).covers
    assert covers == (recorded.merge(token) == recorded)
    expected = tuple(Blocker(c, p, recorded.causes.get(c)) for c, p in token.causes.items()
                     if recorded.causes.get(c, -1) < p)
    assert recorded.coverage_of(token).gaps == expected


@given(pasts, pasts, pasts)
def test_coverage_is_monotone(recorded: CausalPast, token: CausalPast, more: CausalPast) -> None:
    grown = recorded.merge(more)
    before, after = recorded.coverage_of(token), grown.coverage_of(token)
    if before.covers:
        assert after.covers, "a recorded past that grew lost coverage"
    assert {g.channel for g in after.gaps} <= {g.channel for g in before.gaps}
    wider = token.merge(more)
    if recorded.coverage_of(wider).covers:
        assert recorded.coverage_of(token).covers, "a smaller token gained a gap"


@given(pasts)
def test_encode_decode_round_trip(a: CausalPast) -> None:
    data = a.encode()
    assert CausalPast.decode(data) == a and CausalPast.decode(data).encode() == data


AGREEMENT_SIZE = int(os.environ.get("PARSLEY_FUZZ_SIZE", str(50_000)))
"""Mutations judged per codec; the corpus itself is always judged whole."""


def _outcome(decode: object, value: bytes) -> dict[ChannelId, int] | tuple[str, str]:
    try:
        result = decode(value)  # type: ignore[operator]
    except ParsleyFailClosedError as exc:
        return (exc.reason.name, exc.detail)
    return dict(result.causes) if isinstance(result, CausalPast) else dict(result)


@pytest.mark.slow
@pytest.mark.usefixtures("codecs")
def test_decode_agrees_with_the_wire_decoder_on_the_fuzz_corpus() -> None:
    rnd = random.Random(SEED)
    values = corpus(rnd)
    inputs = [*values, *(mutate(rnd, values) for _ in range(AGREEMENT_SIZE))]
    refused = 0
    for i, value in enumerate(inputs):
        ours, engines = _outcome(CausalPast.decode, value), _outcome(wire.decode_causes, value)
        assert ours == engines, f"seed {SEED} input {i} {value.hex()}: {ours} != {engines}"
        if isinstance(ours, tuple):
            refused += 1
        else:
            assert CausalPast.decode(value).encode() == value, f"input {i}: not verbatim"
    # Both outcomes must occur, or the inputs are not exercising the decoder.
    assert 0 < refused < len(inputs), refused


SIGNER = TokenSigner(bytes(32), ttl_s=60)
URL_SAFE = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@given(pasts)
def test_a_token_opens_to_its_past(a: CausalPast) -> None:
    assert SIGNER.open(SIGNER.mint(a, now=1_000.0), now=1_001.0) == a


@settings(max_examples=300)
@given(pasts, st.data())
def test_no_altered_token_opens(a: CausalPast, data: st.DataObject) -> None:
    token = SIGNER.mint(a, now=1_000.0)
    i = data.draw(st.integers(0, len(token) - 1))
    char = data.draw(st.sampled_from(URL_SAFE).filter(lambda c: c != token[i]))
    with pytest.raises(InvalidToken):
        SIGNER.open(token[:i] + char + token[i + 1:], now=1_000.0)
