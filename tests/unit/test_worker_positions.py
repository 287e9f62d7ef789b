"""The pure read-position rules: workers.positions and workers.offsets.positions_past_markers."""

from __future__ import annotations

import pytest

from coordinator.bootstrap.common import BOOTSTRAP_METADATA as COORDINATOR_BOOTSTRAP_METADATA
from parsley.engine.channel import FED_TO_END
from parsley.refusals import Reason
from tests.seed_shapes import assert_seed_shape
from workers.offsets import positions_past_markers
from workers.positions import (
    BOOTSTRAP_METADATA,
    TASK_METADATA,
    ForeignPosition,
    engine_start_positions,
    foreign_member_refusal,
    foreign_members,
    foreign_position_warning,
    foreign_positions,
)
from workers.positions import (
    GroupMember as Member,
)

TP = ("orders", 0)


def test_the_bootstrap_metadata_is_the_coordinators() -> None:
    assert BOOTSTRAP_METADATA == COORDINATOR_BOOTSTRAP_METADATA
    assert TASK_METADATA != BOOTSTRAP_METADATA


def test_positions_move_past_markers_only_forward_and_only_when_known() -> None:
    # a0@0 marker@1: fed up to 0, committed 1; the consumer is at 2.
    assert positions_past_markers({TP: 2}, {TP: 1}) == {TP: 2}
    assert positions_past_markers({TP: 1}, {TP: 1}) == {}
    assert positions_past_markers({TP: 0}, {TP: 1}) == {}  # after a seek back: never lower
    assert positions_past_markers({TP: -1001}, {TP: 1}) == {}  # no position yet
    assert positions_past_markers({TP: 5}, {}) == {}  # not started here


def test_every_commit_parsley_did_not_make_over_state_is_found_whatever_its_offset() -> None:
    covered: dict[tuple[str, int], int | None] = {TP: 1}
    assert foreign_positions({TP: (6, TASK_METADATA)}, covered) == []
    assert foreign_positions({TP: (6, BOOTSTRAP_METADATA)}, covered) == []
    assert foreign_positions({TP: (6, "")}, covered) == [ForeignPosition("orders", 0, 6, 1, "")]
    assert foreign_positions({TP: (0, "x")}, covered) == [ForeignPosition("orders", 0, 0, 1, "x")]
    assert foreign_positions({TP: (2, "")}, covered) == [ForeignPosition("orders", 0, 2, 1, "")]
    assert foreign_positions({TP: (6, "")}, {}) == []  # no state: ORDERING_STATE_LOST's
    assert foreign_positions({TP: (6, "")}, {TP: FED_TO_END}) == []  # deleted channel
    assert foreign_positions({TP: (3, "x")}, {TP: None}) == [
        ForeignPosition("orders", 0, 3, None, "x")]


def test_the_override_warning_names_group_partition_offset_metadata_and_what_follows() -> None:
    forward = foreign_position_warning(ForeignPosition("orders", 0, 6, 1, ""), 2, "shop-relay")
    for part in ("group 'shop-relay'", "orders-0", "offset 6", "commit metadata ''",
                 "covers it up to offset 1", "resumes at offset 2",
                 "never read offsets 2..5", "delivers each record among them once"):
        assert part in forward, forward
    back = foreign_position_warning(ForeignPosition("orders", 0, 0, 4, "m"), 5, "shop-relay")
    for part in ("offset 0", "commit metadata 'm'", "resumes at offset 5",
                 "offsets 0..4 were delivered already", "parsley-coordinator reset"):
        assert part in back, back
    never = foreign_position_warning(ForeignPosition("orders", 0, 3, None, ""), 0, "g")
    assert "never covered it" in never and "never read offsets 0..2" in never, never


def test_members_other_than_the_tasks_are_foreign_and_named() -> None:
    own = {"shop-relay-task-0", "shop-relay-task-1"}
    task = Member("shop-relay-task-0-a", "shop-relay-task-0", "/10.0.0.1", "shop-relay-task-0")
    console = Member("console-consumer-1-b", "console-consumer-1", "/10.0.0.9", None)
    other = Member("x-c", "x", "/10.0.0.8", "someone-else")
    assert foreign_members([task, console, other], own) == [console, other]
    refusal = foreign_member_refusal([console], "shop-relay", 2.5)
    assert refusal.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert refusal.detail.startswith(
        "the group join has been refused as a protocol conflict for longer than 2.5 s, so a "
        "member speaking another group protocol persists in this group: group 'shop-relay' "
        "holds a member that is not one of this process's tasks: "), refusal.detail
    assert_seed_shape(Reason.SUBSTRATE_MISCONFIGURED, refusal.detail)
    assert "client id console-consumer-1 on host 10.0.0.9" in refusal.detail
    assert "kafka-consumer-groups --describe --group shop-relay --members" in refusal.detail


# -- engine_start_positions: a task's commit past markers starts at coverage + 1 ----------

T, B = TASK_METADATA, BOOTSTRAP_METADATA


@pytest.mark.parametrize(("committed", "covered", "expected"), [
    ((5, T), 2, 3),          # committed past two markers the task never fed
    ((3, T), 2, 3),          # committed right after the last record fed
    ((4, T), None, 0),       # only markers and aborted records so far: nothing settled
    ((4, T), FED_TO_END, 4),  # a deleted topic's channel keeps its sentinel
    ((5, T), 10, 5),         # never above the committed offset
    ((100, B), None, 100),   # a starting position the bootstrap committed settles below it
    ((100, B), 7, 100),      # a reset's boundary likewise
    ((9, ""), 2, 9),         # any other commit is the bootstrap's to judge (foreign_positions)
])
def test_a_tasks_commit_past_markers_starts_the_engine_at_coverage_plus_one(
        committed: tuple[int, str], covered: int | None, expected: int) -> None:
    key = ("orders", 2)
    assert engine_start_positions({key: committed}, {key: covered}) == {key: expected}


def test_no_committed_offset_gives_no_start_position() -> None:
    assert engine_start_positions({("a", 0): (-1001, ""), ("b", 1): (0, T)},
                                  {("b", 1): None}) == {("b", 1): 0}
