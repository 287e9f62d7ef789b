"""The pure part of ``parsley-coordinator reset``: targets, the choice of positions, the
refusal naming members, and the plan's Kafka commands and record (coordinator/reset/plan.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.reset.plan import (
    PartitionBoundary,
    ResetPlan,
    ResetRefused,
    Target,
    choose_positions,
    current_positions,
    members_refusal,
    parse_target,
)
from parsley.engine.channel import FED_TO_END
from workers.positions import GroupMember

BOUNDS = {("orders", 0): (2, 10), ("orders", 1): (0, 4), ("pay", 0): (5, 5)}


def test_exactly_one_mode_is_required() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        parse_target()
    with pytest.raises(ValueError, match="exactly one"):
        parse_target(to_earliest=True, to_latest=True)
    assert parse_target(to_latest=True) == Target("latest")


def test_offsets_parse_as_a_default_and_per_partition_entries() -> None:
    t = parse_target(to_offset=["3", "orders:1=4", "my:topic:0=7"])
    assert t.offset == 3 and t.per_partition == {("orders", 1): 4, ("my:topic", 0): 7}
    for bad in (["x"], ["-1"], ["orders=1"], ["orders:a=1"], ["1", "2"]):
        with pytest.raises(ValueError):
            parse_target(to_offset=bad)


def test_datetime_without_an_offset_is_utc() -> None:
    assert parse_target(to_datetime="2023-11-14T22:13:20Z").timestamp_ms == 1_700_000_000_000
    assert parse_target(to_datetime="2023-11-14T22:13:20").timestamp_ms == 1_700_000_000_000
    assert parse_target(to_datetime="2023-11-14T23:13:20.5+01:00").timestamp_ms == \
        1_700_000_000_500
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_target(to_datetime="yesterday")
    assert Target("datetime", timestamp_ms=1_700_000_000_500).describe() == \
        "datetime 2023-11-14T22:13:20.500+00:00 (1700000000500 ms)"


def test_earliest_latest_and_datetime_choose_within_the_log() -> None:
    assert choose_positions(Target("earliest"), BOUNDS) == {
        ("orders", 0): 2, ("orders", 1): 0, ("pay", 0): 5}
    assert choose_positions(Target("latest"), BOUNDS) == {
        ("orders", 0): 10, ("orders", 1): 4, ("pay", 0): 5}
    # -1 (no record that late) is the end, as kafka-consumer-groups --to-datetime does.
    assert choose_positions(Target("datetime", timestamp_ms=1), BOUNDS,
                            {("orders", 0): 7, ("orders", 1): -1, ("pay", 0): -1}) == {
        ("orders", 0): 7, ("orders", 1): 4, ("pay", 0): 5}


def test_offsets_outside_the_retained_range_are_refused_naming_each() -> None:
    assert choose_positions(Target("offset", offset=3, per_partition={("pay", 0): 5}),
                            BOUNDS) == {("orders", 0): 3, ("orders", 1): 3, ("pay", 0): 5}
    with pytest.raises(ResetRefused) as err:
        choose_positions(Target("offset", offset=1), BOUNDS)
    assert "orders:0 offset 1 (log start 2, end 10)" in str(err.value)
    assert "pay:0 offset 1 (log start 5, end 5)" in str(err.value)
    assert "POSITIONS_DISCARDED_UNREAD" in str(err.value)
    with pytest.raises(ResetRefused, match="no offset for"):
        choose_positions(Target("offset", per_partition={("orders", 0): 3}), BOUNDS)
    with pytest.raises(ResetRefused, match="not received"):
        choose_positions(Target("offset", offset=3, per_partition={("orders", 9): 3}), BOUNDS)


def test_one_partition_named_leaves_the_others_where_the_process_stands() -> None:
    # orders:0 refused a record at 6 (covered 5): step past it to 7. orders:1 holds
    # messages from 1 (re-read, not lost); pay:0 is read up to its end.
    current = current_positions(heads={("orders", 1): 1},
                                covered={("orders", 0): 5, ("orders", 1): 3, ("pay", 0): 4},
                                committed={("orders", 0): (6, "parsley.task"),
                                           ("orders", 1): (4, "parsley.task"),
                                           ("pay", 0): (5, "parsley.task")})
    assert current == {("orders", 0): 6, ("orders", 1): 1, ("pay", 0): 5}
    target = parse_target(to_offset=["orders:0=7"])
    assert target.describe() == "offset orders:0=7, the others where the process stands"
    assert choose_positions(target, BOUNDS, current=current) == {
        ("orders", 0): 7, ("orders", 1): 1, ("pay", 0): 5}
    # A plain N still applies to every partition not named.
    assert choose_positions(parse_target(to_offset=["3", "orders:0=7", "pay:0=5"]), BOUNDS,
                            current=current)[("orders", 1)] == 3
    # Where the process stands is judged like any offset: below the log start, refused.
    with pytest.raises(ResetRefused, match=r"orders:1 offset 1 \(log start 2"):
        choose_positions(target, {**BOUNDS, ("orders", 1): (2, 4)}, current=current)
    # A partition with no position at all (no state, no commit) must be named.
    with pytest.raises(ResetRefused, match=r"no offset for \['pay:0'\]"):
        choose_positions(target, BOUNDS, current={("orders", 1): 1})
    # Fed to its end (a deleted topic) is no position; the commit is.
    assert current_positions({}, {("pay", 0): FED_TO_END}, {("pay", 0): (5, "x")}) == {
        ("pay", 0): 5}


def test_a_tasks_commit_past_trailing_markers_is_where_the_process_stands() -> None:
    # pay:0 fed 0, then a transaction's commit marker at 1: the task committed 2 past it.
    # Standing at 2 moves nothing (the quickstart's reset showed "2 -> 1"); a commit of
    # any other writer past the coverage is not trusted, and a held head still wins.
    assert current_positions({}, {("pay", 0): 0}, {("pay", 0): (2, "parsley.task")}) == {
        ("pay", 0): 2}
    assert current_positions({}, {("pay", 0): 0}, {("pay", 0): (2, "parsley.bootstrap")}) \
        == {("pay", 0): 1}
    assert current_positions({}, {("pay", 0): 0}, {("pay", 0): (2, "")}) == {("pay", 0): 1}
    assert current_positions({("pay", 0): 0}, {("pay", 0): 0},
                             {("pay", 0): (2, "parsley.task")}) == {("pay", 0): 0}


def test_the_members_refusal_names_client_host_and_instance() -> None:
    refusal = members_refusal("p-x", [
        GroupMember("m1", "worker-0", "/10.0.0.1", "p-x-task-000"),
        GroupMember("m2", "console", "/10.0.0.2")], 12.0, "b:9092")
    text = str(refusal)
    assert "2 live member(s) after 12 s" in text
    assert "client id 'worker-0' on host /10.0.0.1, group.instance.id p-x-task-000" in text
    assert "client id 'console' on host /10.0.0.2, member id m2" in text
    assert "--describe --group p-x --members" in text


def _plan(target: Target) -> ResetPlan:
    return ResetPlan(
        "shipper", "app", "b:9092", target,
        (PartitionBoundary("orders", 0, 9, "parsley.task", 2, 10, 8, 1, 3),
         PartitionBoundary("orders", 1, None, None, 0, 4, FED_TO_END, 0, 4)),
        "app-shipper-__parsley.ordering-changelog",
        {"app-shipper-__parsley.ordering-changelog": True,
         "app-shipper-inventory-changelog": False},
        Path("/s/app-shipper"), 1_700_000_000_000, "read (2 partition(s))")


def test_the_plan_stands_for_kafka_commands_in_the_reset_order() -> None:
    assert _plan(Target("offset", offset=3)).kafka_commands() == [
        "kafka-topics --bootstrap-server b:9092 --delete --if-exists --topic "
        "app-shipper-__parsley.ordering-changelog",
        "kafka-topics --bootstrap-server b:9092 --delete --if-exists --topic "
        "app-shipper-inventory-changelog",
        "kafka-consumer-groups --bootstrap-server b:9092 --delete --group app-shipper",
        "kafka-consumer-groups --bootstrap-server b:9092 --group app-shipper --reset-offsets "
        "--topic orders:0 --to-offset 3 --dry-run",
        "kafka-consumer-groups --bootstrap-server b:9092 --group app-shipper --reset-offsets "
        "--topic orders:1 --to-offset 4 --dry-run",
        "rm -rf /s/app-shipper"]
    assert _plan(Target("datetime", timestamp_ms=1_700_000_000_000)).kafka_commands()[3] == (
        "kafka-consumer-groups --bootstrap-server b:9092 --group app-shipper --reset-offsets "
        "--topic orders --to-datetime 2023-11-14T22:13:20.000+00:00 --dry-run")


def test_the_record_holds_the_boundary_before_and_the_choice() -> None:
    plan = _plan(Target("earliest"))
    record = plan.record()
    assert record["group"] == "app-shipper" and record["target"] == "earliest"
    assert record["changelogs_deleted"] == ["app-shipper-__parsley.ordering-changelog"]
    assert record["ordering_state"] == "read (2 partition(s))"
    assert record["partitions"][0] == {
        "topic": "orders", "partition": 0, "committed": 9, "committed_metadata": "parsley.task",
        "log_start": 2, "log_end": 10, "covered": 8, "fed_to_end": False, "held": 1,
        "chosen": 3}
    assert record["partitions"][1]["fed_to_end"] is True
    lines = "\n".join(plan.lines())
    assert "orders[0] 9 -> 3  (log 2..10, covered 8, held 1)" in lines
    assert "orders[1] none -> 4  (log 0..4, covered fed to end, held 0)" in lines
    assert "app-shipper-inventory-changelog (absent)" in lines
