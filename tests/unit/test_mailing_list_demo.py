"""The demo's status table and lines from ``parsley-coordinator status --json`` answers (no broker).

The answer's shape is docs/operations.md "Status"'s (``processes -> tasks -> held -> blockers``,
``settled`` null where nothing is settled yet).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from rich.console import Console

from coordinator.config import ParsleyConfig
from examples.mailing_list.checker import Verdict
from examples.mailing_list.demo import (
    FETCH_PARTITION_BYTES,
    STATUS_INTERVAL_MS,
    Coordinator,
    DemoOutcome,
    HoldRecord,
    PlainStatus,
    _Display,
    caught_up_since,
    digest_label,
    example_blocker,
    incompleteness,
    log_dir,
    process_holds,
    process_waited,
    short_blocker,
    status_lines,
    status_rows,
    status_table,
)
from examples.mailing_list.ingest import MAX_RECORD_BYTES, IngestReport

ANSWER = {"processes": {
    "digest": {"state": "RUNNING", "refusal_reason": None, "failure_detail": None, "tasks": [
        {"task": 1, "pid": 41, "held": [
            {"topic": "list.threaded", "partition": 1, "count": 248, "head": 113,
             "blockers": [{"topic": "list.posts", "partition": 1, "required": 512,
                           "settled": 300}]}],
         "frontier_channels": 2, "frontier_bytes": 54, "budget_bytes": 262144, "lag": 900,
         "updated_ms_ago": 230},
        {"task": 0, "pid": 40, "state": "RESTORING", "held": [],
         "frontier_channels": 0, "frontier_bytes": 2,
         "budget_bytes": 262144, "lag": None, "updated_ms_ago": 100},
    ]},
    "threader": {"state": "STOPPED", "refusal_reason": "SUBSTRATE_MISCONFIGURED",
                 "failure_detail": "record too large", "tasks": []},
}}


def test_rows_show_the_process_state_once_and_each_tasks_own_state() -> None:
    rows = status_rows(ANSWER)
    assert rows[0] == ("digest", "RUNNING", "", "", "", "", "")
    assert rows[1] == ("  task 0", "RESTORING", "40", "0", "", "-", "2")
    assert rows[2] == ("  task 1", "-", "41", "248",
                       "threaded-1@113 \u2190 posts-1 needs 512 (at 300)", "900", "54")
    assert rows[3][:2] == ("threader", "STOPPED SUBSTRATE_MISCONFIGURED")
    assert len(rows) == 4, "a stopped process without tasks has its process row only"
    assert sum(row[1] == "RUNNING" for row in rows) == 1, "the process state is not repeated"


def _one_process(process: str, held: int, lag: int = 0) -> dict[str, object]:
    holds = [{"topic": "list.threaded", "partition": 0, "count": held, "head": 7,
              "blockers": [{"topic": "list.posts", "partition": 0, "required": 9,
                            "settled": 8}]}] if held else []
    return {"processes": {process: {"state": "RUNNING", "tasks": [
        {"task": 0, "held": holds, "lag": lag}]}}}


def test_plain_status_prints_changes_each_period_and_holds_at_once() -> None:
    plain = PlainStatus()
    first = plain.lines([_one_process("threader", 0, lag=5)], now=0.0)
    assert first == ["threader RUNNING: 1 tasks, held 0, lag 5"]
    assert plain.lines([_one_process("threader", 0, lag=0)], now=1.0) == [], "within the period"
    assert plain.lines([_one_process("threader", 0, lag=0)], now=5.0) == [
        "threader RUNNING: 1 tasks, held 0, lag 0"]
    assert plain.lines([_one_process("threader", 0, lag=0)], now=10.0) == [], "unchanged: not again"
    caught = plain.lines([_one_process("digest", 40)], now=10.2)
    assert len(caught) == 1 and "held 40" in caught[0], "a hold is printed when sampled"
    assert plain.lines([_one_process("digest", 41)], now=10.5) == [], "at most one a second"
    assert "held 42" in plain.lines([_one_process("digest", 42)], now=11.3)[0]
    assert plain.lines([_one_process("digest", 0)], now=11.6) == [], "released: at the period"
    assert plain.lines([_one_process("digest", 0)], now=15.0) == [
        "digest RUNNING: 1 tasks, held 0, lag 0"]


def test_plain_lines_sum_per_process_and_show_stops() -> None:
    lines = status_lines(ANSWER)
    assert lines[0] == ("digest RUNNING: 2 tasks, held 248, lag 900; task 1 holds "
                        "list.threaded-1@113: list.posts-1 needs 512, settled 300")
    assert "stopped: SUBSTRATE_MISCONFIGURED record too large" in lines[1]
    unsettled = {"processes": {"digest": {"state": "RUNNING", "tasks": [{"task": 0, "held": [
        {"topic": "b", "partition": 0, "count": 1, "head": 0,
         "blockers": [{"topic": "a", "partition": 0, "required": 1, "settled": None}]}]}]}}}
    assert status_lines(unsettled)[0].endswith("a-0 needs 1, settled none")
    free = {"processes": {"digest": {"state": "RUNNING", "tasks": [{"task": 0, "held": [
        {"topic": "b", "partition": 0, "count": 1, "head": 0, "blockers": []}]}]}}}
    assert status_lines(free)[0].endswith(
        "holds b-0@0: nothing it waits for, delivered at the next step")
    assert status_lines({}) == [] and status_rows({}) == []


def test_table_renders_every_row() -> None:
    console = Console(width=200, record=True)
    console.print(status_table([ANSWER]))
    text = console.export_text()
    assert "posts-1 needs 512 (at 300)" in text and "SUBSTRATE_MISCONFIGURED" in text


def test_at_80_columns_each_task_is_one_line_and_the_blocker_ends_in_an_ellipsis() -> None:
    wide = {"processes": {"digest": {"state": "RUNNING", "tasks": [
        {"task": i, "pid": 123456, "state": "RUNNING", "lag": 12345, "frontier_bytes": 254,
         "held": [{"topic": "list.threaded.b6de48b8", "partition": i, "count": 1087,
                   "head": 118, "blockers": [{"topic": "list.posts.b6de48b8", "partition": i,
                                              "required": 12345, "settled": 12344}]}]}
        for i in range(4)]}}}
    console = Console(width=80, record=True)
    console.print(status_table([wide]))
    lines = console.export_text().splitlines()
    for i in range(4):
        (line,) = [ln for ln in lines if f"task {i}" in ln]
        assert f"threaded-{i}@118" in line and "\u2026" in line and "12345" in line
        assert "1087" in line and "254" in line
    assert max(len(ln.rstrip()) for ln in lines) <= 80


def test_short_blocker_drops_prefix_and_run_suffix() -> None:
    held = {"topic": "list.threaded.ab12", "partition": 1, "head": 118, "blockers": [
        {"topic": "list.posts.ab12", "partition": 1, "required": 123, "settled": 122},
        {"topic": "list.posts.ab12", "partition": 2, "required": 7, "settled": None}]}
    assert short_blocker(held) == "threaded-1@118 \u2190 posts-1 needs 123 (at 122) +1"
    held["blockers"] = held["blockers"][1:]  # type: ignore[index]
    assert short_blocker(held) == "threaded-1@118 \u2190 posts-2 needs 7 (at none)"
    assert short_blocker({"topic": "b", "partition": 0, "head": 3}) == "b-0@3"


def test_coordinator_config_loads_and_raises_the_producer_record_limit(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    Coordinator.write_config(path, "127.0.0.1:9092", "mldemo-x", tmp_path / "state")
    config = ParsleyConfig.load(path, environ={})
    assert (config.bootstrap_servers, config.application_id_prefix) == ("127.0.0.1:9092",
                                                                        "mldemo-x")
    assert config.state_dir == str(tmp_path / "state")
    assert config.status_interval_ms == STATUS_INTERVAL_MS < 1000
    assert config.kafka_properties["consumer.max.partition.fetch.bytes"] == \
        FETCH_PARTITION_BYTES < 1 << 20
    assert config.kafka_properties["producer.message.max.bytes"] == MAX_RECORD_BYTES
    assert MAX_RECORD_BYTES >= 1_728_742 + 262_144, "the largest post plus the budget fits"


def clean(messages: int) -> Verdict:
    """A clean verdict over ``messages`` posts."""
    return Verdict(messages=messages, handled=messages, duplicates=0, lost=0,
                   causal_violations=0, threaded=messages, steps=2 * messages)


def test_a_clean_verdict_over_part_of_the_input_is_a_failure() -> None:
    assert clean(4_990).ok
    reason = incompleteness(clean(4_990), 5_000)
    assert reason is not None and "4990" in reason and "5000" in reason
    assert incompleteness(clean(5_000), 5_000) is None
    assert incompleteness(clean(5_001), 5_000) is not None
    short = DemoOutcome(verdict=clean(4_990), ingest=IngestReport(posts=5_000))
    assert short.incomplete == reason and not short.ok
    assert DemoOutcome(verdict=clean(5_000), ingest=IngestReport(posts=5_000)).incomplete is None
    assert DemoOutcome(verdict=clean(5_000)).incomplete is not None  # nothing ingested known


def _answer(held: list[tuple[int, int, int, int | None]]) -> dict[str, object]:
    """A digest answer: one task per (count, head, required, settled)."""
    return {"processes": {"digest": {"state": "RUNNING", "tasks": [
        {"task": i, "held": [{"topic": "list.threaded", "partition": i, "count": count,
                              "head": head, "blockers": [{"topic": "list.posts", "partition": i,
                                                          "required": req, "settled": st}]}]}
        for i, (count, head, req, st) in enumerate(held)]}}}


def test_process_holds_sums_tasks_and_names_the_first_blocker() -> None:
    total, example = process_holds(_answer([(3, 118, 123, 122), (5, 7, 9, None)]))
    assert total == 8
    assert example == "list.threaded-0@118 waited for list.posts-0 up to 123 (settled 122)"
    assert process_holds(ANSWER, "threader") == (0, None)
    assert process_holds({}) == (0, None)
    assert example_blocker({"topic": "b", "partition": 2, "head": 4, "blockers": []}) is None
    assert example_blocker(_answer([(1, 4, 9, None)])["processes"]["digest"]["tasks"][0]  # type: ignore[index]
                           ["held"][0]).endswith("up to 9 (settled none)")


def test_hold_record_keeps_the_peak_its_example_and_what_each_task_held_back() -> None:
    record = HoldRecord()
    assert record.summary().startswith("digest held no message back (0 status samples")
    answers = [_answer([(2, 10, 11, 9)]), _answer([(700, 20, 30, 25), (387, 5, 6, 1)]),
               _answer([(40, 99, 100, 98)]), {}]
    for answer, waited in zip(answers, ([5], [900, 400], [30], []), strict=True):
        for task, count in zip(answer.get("processes", {}).get("digest", {})  # type: ignore[attr-defined]
                               .get("tasks", []), waited, strict=True):
            task["waited"] = count
        record.observe(answer)
    # An answer without digest is no sample of it.
    assert (record.samples, record.peak) == (3, 1087)
    # Per task what it reported, a smaller count after a larger one being a new execution
    # of the task (its engine rebuilt): 5, 900, then 30 more.
    assert record.waited == {0: 930, 1: 400}
    assert record.summary() == ("digest held a channel back 1330 times until a cause was "
                                "delivered; up to 1087 messages held at once in a status "
                                "sample, e.g. list.threaded-0@20 waited for list.posts-0 "
                                "up to 30 (settled 25)")
    quick = HoldRecord()
    answer = _answer([])
    answer["processes"]["digest"]["tasks"] = [{"task": 0, "held": [], "waited": 12}]  # type: ignore[index]
    quick.observe(answer)
    assert quick.summary() == ("digest held a channel back 12 times until a cause was "
                               "delivered; each hold was shorter than a status sample "
                               "(1 samples)")
    assert process_waited({}) == {}
    queued = HoldRecord()
    queued.observe(_answer([(3, 7, 9, 8)]))
    assert queued.summary() == ("digest never waited for a cause; up to 3 messages queued at "
                                "once in a status sample, each deliverable at the next step")
    one = HoldRecord()
    answer["processes"]["digest"]["tasks"] = [{"task": 0, "held": [], "waited": 1}]  # type: ignore[index]
    one.observe(answer)
    assert one.summary().startswith("digest held a channel back 1 time until")


def test_caught_up_counts_only_reports_made_since_the_wait_began() -> None:
    fresh = {"processes": {"threader": {"caught_up": True, "tasks": [
        {"task": 0, "updated_ms_ago": 100}, {"task": 1, "updated_ms_ago": 300}]}}}
    assert caught_up_since(fresh, "threader", 500)
    assert not caught_up_since(fresh, "threader", 200), "task 1 reported before the wait"
    fresh["processes"]["threader"]["caught_up"] = False  # type: ignore[index]
    assert not caught_up_since(fresh, "threader", 500)
    assert not caught_up_since({"processes": {"threader": {"caught_up": True, "tasks": []}}},
                               "threader", 500)
    assert not caught_up_since({}, "threader", 500)


def test_progress_rows_say_what_their_bars_count() -> None:
    console = Console(width=120, record=True, force_terminal=True)
    display = _Display(console, live=True, total=5000)
    display.advance(5000)
    display.digest_progress(1200, 5000, 3400)
    console.print(display.progress)
    lines = [ln for ln in console.export_text().splitlines() if ln.strip()]
    replay = next(ln for ln in lines if "replay" in ln)
    digest = next(ln for ln in lines if "digest" in ln)
    assert "5000/5000" in replay and "digest" not in replay
    assert "1200/5000" in digest and "posts handled (3400 steps)" in digest
    assert digest_label(None) == "digest: posts handled (catching up)"


def test_log_dir_is_kept_under_the_repository_or_the_temp_dir(tmp_path: Path) -> None:
    start = 1_796_000_000.0  # 2026-11-30T...Z
    made = log_dir(tmp_path, "mldemo-ab12", now=start)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(start))
    assert made == tmp_path / ".parsley" / "demo-logs" / f"{stamp}-mldemo-ab12"
    assert made.is_dir()
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    fallback = log_dir(blocked, "mldemo-cd34", now=start)
    assert fallback.is_dir() and fallback.name == f"{stamp}-mldemo-cd34"
    assert fallback.parent == Path(tempfile.gettempdir()) / "parsley-demo-logs"
    fallback.rmdir()
