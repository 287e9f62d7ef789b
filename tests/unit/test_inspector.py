"""OrderingStateInspector over a synthetic changelog (docs/model.md, "The stored form", start-time
reads).

The changelog has overwrites and tombstones; the inspector must answer from
the latest value per key only.
"""

from __future__ import annotations

from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.inspector import OrderingStateInspector
from parsley.refusals import ParsleyFailClosedError, Reason

ORDERS = UUID("0102030405060708090a0b0c0d0e0f10")
ORDERS_NEW = UUID("99999999999999999999999999999999")
PAYMENTS = UUID("f102030405060708090a0b0c0d0e0f10")
O0, O1, P0 = ChannelId(ORDERS, 0), ChannelId(ORDERS, 1), ChannelId(PAYMENTS, 0)
BLOB = sc.encode_held(sc.HeldMessage(1, b"k", b"v"))


def changelog() -> list[tuple[bytes, bytes | None]]:
    return [
        (sc.VERSION_KEY, sc.VERSION_VALUE),
        (sc.name_key("orders"), sc.encode_binding(ORDERS)),
        (sc.name_key("payments"), sc.encode_binding(PAYMENTS)),
        (sc.name_key("gone"), sc.encode_binding(ORDERS)),
        (sc.fed_key(O0), sc.encode_long(3)),
        (sc.held_key(O0, 4), BLOB),
        (sc.held_key(O0, 5), BLOB),
        (sc.held_key(O1, 9), BLOB),
        (sc.held_key(P0, 1), BLOB),
        (sc.fed_key(O0), sc.encode_long(5)),  # overwrite: latest wins
        (sc.fed_key(O1), sc.encode_long(9)),
        (sc.held_key(O0, 4), None),  # delivered: tombstone
        (sc.held_key(P0, 1), None),  # the only hold on P0 gone
        (sc.fed_key(P0), sc.encode_long(FED_TO_END)),  # payments-0 fed to its end
        (sc.name_key("gone"), None),
        (sc.held_key(O0, 6), BLOB),
        (sc.frontier_key(O0), sc.encode_long(2)),
    ]


def test_answers_from_the_latest_value_per_key() -> None:
    inspector = OrderingStateInspector(changelog())
    assert inspector.held_channels() == {O0: 2, O1: 1}
    assert inspector.held_heads() == {O0: 5, O1: 9}  # O0@4 delivered: the head moved on
    assert inspector.covered_positions() == {O0: 5, O1: 9, P0: FED_TO_END}
    assert inspector.name_bindings() == {"orders": ORDERS, "payments": PAYMENTS}
    assert inspector.has_version() and not inspector.is_empty()
    assert len(inspector) == 10


def test_fed_to_end_is_returned_verbatim() -> None:
    covered = OrderingStateInspector(changelog()).covered_positions()
    assert covered[P0] == 2**63 - 1
    assert OrderingStateInspector.is_fed_to_end(covered[P0])
    assert not OrderingStateInspector.is_fed_to_end(covered[O0])


def test_identity_changed_topics() -> None:
    inspector = OrderingStateInspector(changelog())
    current = {"orders": ORDERS_NEW, "payments": PAYMENTS, "never-bound": ORDERS, "gone": PAYMENTS}
    assert inspector.identity_changed_topics(current) == ["orders"]
    assert inspector.identity_changed_topics({"orders": ORDERS}) == []
    assert inspector.identity_changed_topics({}) == []
    both = {"orders": ORDERS_NEW, "payments": ORDERS}
    assert inspector.identity_changed_topics(both) == ["orders", "payments"]


def test_rebinding_after_a_reset_is_the_latest() -> None:
    records = [*changelog(), (sc.name_key("orders"), sc.encode_binding(ORDERS_NEW))]
    inspector = OrderingStateInspector(records)
    assert inspector.name_bindings()["orders"] == ORDERS_NEW
    assert inspector.identity_changed_topics({"orders": ORDERS_NEW}) == []


def test_everything_tombstoned_is_empty() -> None:
    records = changelog()
    records += [(key, None) for key, _ in records]
    inspector = OrderingStateInspector(records)
    assert inspector.is_empty() and not inspector.has_version()
    assert inspector.held_channels() == {}
    assert inspector.covered_positions() == {}
    assert inspector.name_bindings() == {}


def test_held_bodies_are_not_kept() -> None:
    big = sc.encode_held(sc.HeldMessage(1, None, b"x" * 100_000))
    inspector = OrderingStateInspector([(sc.held_key(O0, 1), big)])
    assert inspector.held_channels() == {O0: 1}
    assert all(len(v) == 0 for v in inspector._latest.values()), "held body kept in memory"


@pytest.mark.parametrize(
    ("label", "record", "question", "expected"),
    [
        ("held key 28 bytes", (sc.held_key(O0, 1)[:-1], BLOB), "held_channels",
         "corrupt held key: length 28"),
        ("fed key 22 bytes", (sc.fed_key(O0) + b"\x00", sc.encode_long(1)), "covered_positions",
         "corrupt ordering key: length 22 for tag 'f'"),
        ("fed value 4 bytes", (sc.fed_key(O0), b"\x00" * 4), "covered_positions",
         "corrupt ordering value: length 4 where 8 bytes were written"),
        ("fed value negative", (sc.fed_key(O0), sc.encode_long(-2)), "covered_positions",
         f"restored coverage names position -2 on {O0}, which no channel can assign; receipt "
         "refuses negative positions, so this row is corrupt ordering state. Reset the "
         "process's state and group offsets deliberately to proceed."),
        ("binding 19 bytes", (sc.name_key("orders"), b"\x01" * 19), "name_bindings",
         "corrupt ordering value: name binding for 'orders' has length 19 where 20 bytes were "
         "written"),
    ],
)
def test_corrupt_rows_refuse(label: str, record: tuple[bytes, bytes], question: str,
                             expected: str) -> None:
    inspector = OrderingStateInspector([*changelog(), record])
    with pytest.raises(ParsleyFailClosedError) as caught:
        getattr(inspector, question)()
    assert caught.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT, label
    assert caught.value.detail == expected, label


def test_empty_key_does_not_break_questions() -> None:
    inspector = OrderingStateInspector([(b"", b"x")])
    assert inspector.held_channels() == {}
    assert inspector.covered_positions() == {}


# ------------------------------------------------------------------ against load_image

_CHANNELS = [O0, O1, P0, ChannelId(ORDERS_NEW, 7)]
_NAMES = ["orders", "payments", "x"]
_KEYS = (
    [sc.fed_key(c) for c in _CHANNELS]
    + [sc.held_key(c, p) for c in _CHANNELS for p in (0, 3, 9)]
    + [sc.name_key(n) for n in _NAMES]
    + [sc.frontier_key(c) for c in _CHANNELS]
)


def _value_for(key: bytes, n: int) -> bytes:
    if key[:1] in (b"f", b"c"):
        return sc.encode_long(FED_TO_END if key[:1] == b"f" and n % 5 == 0 else n)
    if key[:1] == b"n":
        return sc.encode_binding([ORDERS, PAYMENTS, ORDERS_NEW][n % 3])
    return BLOB


@given(st.lists(st.tuples(st.sampled_from(_KEYS), st.one_of(st.none(), st.integers(0, 99))),
                max_size=60))
def test_inspector_agrees_with_a_full_restore(writes: list[tuple[bytes, int | None]]) -> None:
    records: list[tuple[bytes, bytes | None]] = [(sc.VERSION_KEY, sc.VERSION_VALUE)]
    records += [(k, None if n is None else _value_for(k, n)) for k, n in writes]
    latest: dict[bytes, bytes] = {}
    for key, value in records:
        if value is None:
            latest.pop(key, None)
        else:
            latest[key] = value
    # A live hold always sits within its channel's live coverage (load_image refuses
    # otherwise): cover every held channel up to its highest possible hold, 9.
    for c in {sc.held_key_parts(k)[0] for k in latest if k[:1] == b"h"}:
        fed = latest.get(sc.fed_key(c))
        if fed is None or sc.decode_long(fed) in range(9) or sc.decode_long(fed) == FED_TO_END:
            records.append((sc.fed_key(c), sc.encode_long(9)))
            latest[sc.fed_key(c)] = sc.encode_long(9)
    image = sc.load_image(sorted(latest.items()))
    inspector = OrderingStateInspector(records)
    assert inspector.covered_positions() == image.fed
    assert inspector.held_channels() == {c: len(ps) for c, ps in image.held.items()}
    assert inspector.name_bindings() == image.names
    current = {"orders": ORDERS, "payments": PAYMENTS, "x": PAYMENTS}
    expected = sorted(n for n, t in current.items() if n in image.names and image.names[n] != t)
    assert inspector.identity_changed_topics(current) == expected
