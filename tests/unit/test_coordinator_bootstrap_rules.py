"""The bootstrap's pure rules: ORDERING_STATE_LOST, and the lost-head check (no broker)."""

from __future__ import annotations

import pytest

from coordinator.bootstrap.changelog import LOST_HEAD_DETAIL, _Collector
from coordinator.bootstrap.common import BOOTSTRAP_METADATA
from coordinator.bootstrap.positions import ForeignCommit, lost_positions, ordering_state_lost
from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.seed_shapes import assert_seed_shape


def test_lost_positions_only_foreign_commits_over_empty_partitions() -> None:
    committed = {("a", 0): (5, ""), ("a", 1): (7, "stamp"), ("b", 0): (3, BOOTSTRAP_METADATA),
                 ("b", 1): (9, "")}
    assert lost_positions(committed, [4, 0]) == [ForeignCommit("a", 1, 7, "stamp"),
                                                 ForeignCommit("b", 1, 9, "")]
    assert lost_positions(committed, [1, 1]) == []
    assert lost_positions(committed, None) == [ForeignCommit("a", 0, 5, ""),
                                               ForeignCommit("a", 1, 7, "stamp"),
                                               ForeignCommit("b", 1, 9, "")]
    assert lost_positions({("a", 0): (5, BOOTSTRAP_METADATA)}, None) == []


def test_the_ordering_state_lost_detail_opens_with_the_seed_shape_then_the_offset() -> None:
    err = ordering_state_lost(ForeignCommit("orders", 2, 41, ""), "app-p-changelog", True,
                              "app-p")
    assert err.reason is Reason.ORDERING_STATE_LOST
    assert err.detail.startswith(
        "committed read positions exist for orders-2, committed outside parsley (external "
        "tooling, or pre-seeded offsets), but partition 2 of this process's ordering-store "
        "changelog holds no ordering records (committed offset 41, metadata none; ordering "
        "changelog app-p-changelog). ")
    assert_seed_shape(Reason.ORDERING_STATE_LOST, err.detail)
    gone = ordering_state_lost(ForeignCommit("orders", 0, 1, "x"), "c", False, "app-p")
    assert gone.detail.startswith(
        "committed read positions exist for orders-0, stamped by a previous execution, but "
        "this process's ordering-store changelog does not exist (committed offset 1, "
        "metadata x; ordering changelog c). ")
    assert_seed_shape(Reason.ORDERING_STATE_LOST, gone.detail)
    assert gone.detail.endswith("(kafka-consumer-groups --delete --group app-p).")


def test_held_rows_without_the_version_entry_are_a_lost_head_with_load_images_text() -> None:
    row = sc.fed_key(_channel()), sc.encode_long(1)
    with pytest.raises(ParsleyFailClosedError) as plain:
        sc.load_image([row])
    assert plain.value.detail == LOST_HEAD_DETAIL, "the same text as state_codec's"
    held = sc.HeldMessage(0, None, b"v", (), ())
    c = _Collector()
    c.add(sc.held_key(_channel(), 3), sc.encode_held(held))
    with pytest.raises(ParsleyFailClosedError) as only_held:
        c.check("app-p-changelog[0]")
    assert only_held.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert only_held.value.detail == f"{LOST_HEAD_DETAIL} (read from app-p-changelog[0] at start)"
    assert_seed_shape(Reason.UNKNOWN_ORDERING_STATE_FORMAT, only_held.value.detail)
    c.add(sc.VERSION_KEY, sc.VERSION_VALUE)
    c.add(sc.fed_key(_channel()), sc.encode_long(3))
    assert c.check("app-p-changelog[0]").held_channels() == {_channel(): 1}


def _channel() -> ChannelId:
    import uuid

    return ChannelId(uuid.UUID(int=7), 0)
