"""The pure read-position rules: workers.positions and workers.offsets.positions_past_markers."""

from __future__ import annotations

from coordinator.bootstrap.common import BOOTSTRAP_METADATA as COORDINATOR_BOOTSTRAP_METADATA
from parsley.engine.channel import FED_TO_END
from parsley.refusals import Reason
from tests.seed_shapes import assert_seed_shape
from workers.offsets import positions_past_markers
from workers.positions import (
    BOOTSTRAP_METADATA,
    TASK_METADATA,
    Unaccounted,
    foreign_member_refusal,
    foreign_members,
    skipped_offset,
    skipped_positions_refusal,
    unaccounted_positions,
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


def test_only_commits_parsley_did_not_make_beyond_coverage_plus_one_are_suspects() -> None:
    covered: dict[tuple[str, int], int | None] = {TP: 1}
    assert unaccounted_positions({TP: (2, "")}, covered) == []  # coverage + 1
    assert unaccounted_positions({TP: (6, TASK_METADATA)}, covered) == []
    assert unaccounted_positions({TP: (6, BOOTSTRAP_METADATA)}, covered) == []
    assert unaccounted_positions({TP: (6, "")}, covered) == [Unaccounted("orders", 0, 6, 1, "")]
    assert unaccounted_positions({TP: (6, "")}, {}) == []  # no state: ORDERING_STATE_LOST's
    assert unaccounted_positions({TP: (6, "")}, {TP: FED_TO_END}) == []  # deleted channel
    never = unaccounted_positions({TP: (3, "x")}, {TP: None})
    assert never and never[0].first_unread == 0


def test_a_skip_is_a_record_below_the_commit_or_a_range_retention_took() -> None:
    s = Unaccounted("orders", 0, 6, 1, "")
    assert skipped_offset(s, 0, 2) == 2  # a record Parsley never read
    assert skipped_offset(s, 0, None) is None  # only markers or aborted records between
    assert skipped_offset(s, 0, 6) is None  # the first record is at the commit
    assert skipped_offset(s, 4, None) == 2  # gone below the log start: cannot be vouched for


def test_the_skip_refusal_names_channel_commit_coverage_and_the_reset() -> None:
    refusal = skipped_positions_refusal(Unaccounted("orders", 0, 6, 1, ""), 2, "shop-relay")
    assert refusal.reason is Reason.SUBSTRATE_MISCONFIGURED
    for part in ("orders-0 committed read position 6", "coverage 1", "orders-0@2",
                 "--group shop-relay", "--topic orders:0 --to-offset 2 --execute"):
        assert part in refusal.detail, refusal.detail


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
