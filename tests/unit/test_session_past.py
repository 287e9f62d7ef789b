"""``parsley.session.CausalPast``: construction, the wire form, merge and coverage.

The wire form is the frozen grammar, so ``decode`` must agree with ``parsley.wire`` on the
whole malformation catalogue of ``tests/unit/test_wire.py`` (same refusal, same detail),
under both codec implementations (the ``codecs`` fixture). Coverage is the engine's
``decide`` with the token's channels as the received set: a channel the past never recorded
is a gap, where the delivery gate would skip it (docs/session.md, "Coverage fails closed").
"""

from __future__ import annotations

import pickle
from uuid import UUID

import pytest

from parsley import wire
from parsley.engine.channel import ChannelId
from parsley.engine.deliverability import DELIVERABLE, Blocker, decide
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.session import DEFAULT_MAX_ENTRIES, CausalPast, Coverage
from parsley.session.past import max_encoded_bytes
from tests.unit.test_wire import CATALOGUE

pytestmark = pytest.mark.usefixtures("codecs")

A = UUID("0102030405060708090a0b0c0d0e0f10")
B = UUID("f102030405060708090a0b0c0d0e0f10")
A0, A1, B0 = ChannelId(A, 0), ChannelId(A, 1), ChannelId(B, 0)


def test_none_is_one_empty_instance() -> None:
    assert CausalPast.none() is CausalPast.none()
    assert len(CausalPast.none()) == 0 and dict(CausalPast.none().causes) == {}
    assert CausalPast.of({}) is CausalPast.none()
    assert CausalPast.none().encode() == wire.EMPTY_CAUSES
    assert CausalPast.decode(wire.EMPTY_CAUSES) is CausalPast.none()


def test_of_copies_and_keeps_channel_order() -> None:
    source = {B0: 9, A1: 7, A0: 41}
    past = CausalPast.of(source)
    source[A0] = 0
    assert list(past.causes.items()) == [(A0, 41), (A1, 7), (B0, 9)]
    assert len(past) == 3


def test_the_constructor_is_not_public() -> None:
    with pytest.raises(TypeError, match=r"CausalPast.none\(\), .of\(mapping\) or .decode"):
        CausalPast()


def test_it_is_immutable() -> None:
    past = CausalPast.of({A0: 1})
    with pytest.raises(AttributeError, match="immutable"):
        past._causes = {}  # type: ignore[misc]
    with pytest.raises(TypeError):
        past.causes[A0] = 5  # type: ignore[index]
    assert past.causes == {A0: 1}


@pytest.mark.parametrize(
    ("causes", "error", "message"),
    [
        ([(A0, 1)], TypeError, "causes must be a mapping"),
        ({"A-0": 1}, TypeError, "keyed by ChannelId, got str"),
        ({A0: True}, TypeError, "must be an int offset, got bool"),
        ({A0: 1.0}, TypeError, "must be an int offset, got float"),
        ({A0: -1}, ValueError, f"position -1 on {A0} cannot be carried: it must be in 0..2"),
        ({A0: 2**63 - 1}, ValueError, "cannot be carried: it must be in 0..2\\^63-2"),
        ({ChannelId(UUID(int=0), 0): 1}, ValueError, "names the zero topic id"),
    ],
)
def test_of_refuses_what_the_grammar_cannot_carry(
    causes: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        CausalPast.of(causes)  # type: ignore[arg-type]


def test_encode_round_trips_byte_for_byte() -> None:
    past = CausalPast.of({A0: 41, ChannelId(A, 300): 7, B0: 2**63 - 2})
    data = past.encode()
    assert data == wire.encode_causes(dict(past.causes))
    again = CausalPast.decode(data)
    assert again == past and hash(again) == hash(past)
    assert again.encode() == data


@pytest.mark.parametrize(
    ("family", "label", "hexvalue", "expected"),
    CATALOGUE,
    ids=[f"{f}: {label}" for f, label, _, _ in CATALOGUE],
)
def test_decode_is_exactly_as_strict_as_the_engine(
    family: str, label: str, hexvalue: str, expected: dict[ChannelId, int] | str
) -> None:
    value = bytes.fromhex(hexvalue)
    if isinstance(expected, dict):
        past = CausalPast.decode(value)
        assert dict(past.causes) == expected, f"{family}/{label}"
        assert past.encode() == value, f"{family}/{label}: not re-encoded verbatim"
        return
    with pytest.raises(ParsleyFailClosedError) as caught:
        CausalPast.decode(value)
    assert caught.value.reason is Reason.UNDECODABLE_METADATA, f"{family}/{label}"
    assert caught.value.detail == expected, f"{family}/{label}: not the engine's diagnosis"


def test_decode_refuses_a_null_value_as_the_engine_does() -> None:
    with pytest.raises(ParsleyFailClosedError) as caught:
        CausalPast.decode(None)
    assert caught.value.reason is Reason.UNDECODABLE_METADATA
    assert caught.value.detail == "causes header present with null value"


def test_decode_accepts_a_buffer() -> None:
    data = CausalPast.of({A0: 3}).encode()
    assert CausalPast.decode(bytearray(data)) == CausalPast.decode(memoryview(data))


def test_an_over_broad_token_is_refused_by_count() -> None:
    wide = CausalPast.of({ChannelId(A, p): p for p in range(3)})
    assert CausalPast.decode(wide.encode(), max_entries=3) == wide
    with pytest.raises(ParsleyFailClosedError) as caught:
        CausalPast.decode(wide.encode(), max_entries=2)
    assert caught.value.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert caught.value.detail == "names 3 channels; at most 2 are accepted"


def test_an_over_broad_token_is_refused_by_length_before_it_is_decoded() -> None:
    # Longer than any two-channel encoding, and malformed too: the length is judged first,
    # as the engine judges a received header's length against its budget before decoding.
    data = b"\x02" + bytes(max_encoded_bytes(2))
    with pytest.raises(ParsleyFailClosedError) as caught:
        CausalPast.decode(data, max_entries=2)
    assert caught.value.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert caught.value.detail == (f"carries {len(data)} bytes; a past of at most 2 channels "
                                   f"takes at most {max_encoded_bytes(2)} bytes")
    assert max_encoded_bytes(2) == 66


def test_the_length_bound_is_never_below_a_real_encoding() -> None:
    # Worst case per channel: its own topic and a five-byte partition varint.
    worst = CausalPast.of({ChannelId(UUID(int=n + 1), 2**31 - 1): 2**63 - 2 for n in range(200)})
    assert len(worst.encode()) <= max_encoded_bytes(200)
    assert CausalPast.decode(worst.encode(), max_entries=200) == worst
    assert DEFAULT_MAX_ENTRIES == 1024
    with pytest.raises(ValueError, match="max_entries must be >= 0"):
        CausalPast.decode(wire.EMPTY_CAUSES, max_entries=-1)


def test_merge_one_coordinate() -> None:
    past = CausalPast.of({A1: 5})
    assert past.merge(A1, 5) is past and past.merge(A1, 2) is past
    higher = past.merge(A1, 6)
    assert higher.causes == {A1: 6} and past.causes == {A1: 5}
    added = past.merge(A0, 0)
    assert list(added.causes.items()) == [(A0, 0), (A1, 5)]


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((A0, -1), ValueError, "position -1 on .* cannot be carried"),
        ((A0, 2**63 - 1), ValueError, "cannot be carried"),
        ((A0,), TypeError, "merge needs a CausalPast, or a ChannelId and a position"),
        ((None, 3), TypeError, "keyed by ChannelId, got NoneType"),
        ((CausalPast.none(), 3), TypeError, "merge\\(past\\) takes no position"),
        ((A0, "3"), TypeError, "must be an int offset, got str"),
    ],
)
def test_merge_refuses(args: tuple[object, ...], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        CausalPast.of({A0: 1}).merge(*args)  # type: ignore[call-overload]


def test_merge_another_past_is_pointwise_max_and_returns_a_side_when_it_can() -> None:
    left = CausalPast.of({A0: 5, A1: 1})
    right = CausalPast.of({A1: 4, B0: 2})
    assert left.merge(right).causes == {A0: 5, A1: 4, B0: 2}
    assert left.merge(CausalPast.none()) is left
    assert CausalPast.none().merge(right) is right
    below = CausalPast.of({A0: 3})
    assert left.merge(below) is left, "nothing changes: the same object back"
    assert below.merge(left) is left, "the other side already covers this one"


def test_coverage_names_every_gap_in_channel_order() -> None:
    recorded = CausalPast.of({A0: 10, A1: 3})
    token = CausalPast.of({B0: 1, A1: 4, A0: 10})
    coverage = recorded.coverage_of(token)
    assert not coverage.covers
    assert coverage.gaps == (Blocker(A1, 4, 3), Blocker(B0, 1, None))
    assert recorded.coverage_of(CausalPast.of({A0: 9, A1: 3})).covers
    assert recorded.coverage_of(CausalPast.none()) == Coverage(())
    assert CausalPast.none().coverage_of(CausalPast.none()).covers


def test_coverage_fails_closed_where_the_delivery_gate_skips() -> None:
    token = CausalPast.of({B0: 1})
    # The delivery gate ignores a cause on a channel outside the received set...
    assert decide(token.causes, received={A0}, settled={}) is DELIVERABLE
    # ... a read tier must not: the past never recorded B0, so it cannot vouch for it.
    assert CausalPast.of({A0: 100}).coverage_of(token).gaps == (Blocker(B0, 1, None),)


def test_coverage_of_refuses_a_non_past() -> None:
    with pytest.raises(TypeError, match="coverage_of needs a CausalPast, got dict"):
        CausalPast.none().coverage_of({A0: 1})  # type: ignore[arg-type]


def test_equality_hash_repr_and_pickle() -> None:
    past = CausalPast.of({A0: 1, B0: 2})
    assert past == CausalPast.of({B0: 2, A0: 1}) and past != CausalPast.of({A0: 1})
    assert past != {A0: 1, B0: 2}
    assert len({past, CausalPast.of({B0: 2, A0: 1})}) == 1
    assert repr(past) == f"CausalPast({{{A0}: 1, {B0}: 2}})"
    again = pickle.loads(pickle.dumps(past))
    assert again == past and list(again.causes) == [A0, B0]
