"""The status table's two layouts and the last report's file (no broker)."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from coordinator.control.last_status import (
    LastReport,
    StartFailure,
    last_status_file,
    read_last_report,
    write_last_report,
)
from coordinator.control.status import ProcessState, ProcessStatus, parse_status
from coordinator.control.status_view import render
from parsley.refusals import Reason


def _task(i: int, held: int) -> dict[str, Any]:
    channels = [{"topic": f"subscriptions-changed-{c}", "partition": i, "count": 2,
                 "head": 7_123_456, "blockers": [{"topic": "subscribers-registered",
                                                  "partition": i, "required": 91_234_567,
                                                  "settled": None}]} for c in range(held)]
    return {"task": i, "pid": 424_240 + i, "state": "RUNNING", "held": channels,
            "frontier_channels": 12, "frontier_bytes": 5_400, "budget_bytes": 262_144,
            "lag": 3 if held else 0, "updated_ms_ago": 120, "restore": None,
            "rss_bytes": 41_943_040, "cpu_percent": 2.0}


DOC: dict[str, Any] = {"processes": {
    "mailing-list-digest": {"state": "RUNNING", "refusal_reason": None,
                            "failure_detail": None, "restarts": 1,
                            "tasks": [_task(i, i) for i in range(4)]},
    "shipper": {"state": "STOPPED", "refusal_reason": "UNDECODABLE_METADATA",
                "failure_detail": "b[0]@12: truncated causes header", "tasks": []},
}}


def _lines(doc: dict[str, Any], width: int, wide: bool = False) -> list[str]:
    buf = io.StringIO()
    Console(file=buf, width=10_000 if wide else width).print(render(doc, wide=wide,
                                                                      width=width))
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 120, 200])
def test_the_default_table_fits_the_width_with_one_line_per_task(width: int) -> None:
    lines = _lines(DOC, width)
    assert max(len(ln) for ln in lines) <= width, "\n".join(lines)
    rows = [ln for ln in lines if ln.lstrip().startswith(("mailing-list-digest", "shipper "))
            and (" RUNNING " in ln or " STOPPED " in ln)]
    assert len(rows) == 5, "\n".join(lines)  # 4 tasks and the stopped process
    assert "caught up" in lines[2]
    assert " yes " in rows[0] and all(" no " in r for r in rows[1:4]), "\n".join(rows)
    assert " no " not in rows[4], "a stopped process is not 'not caught up': '-'"
    assert any("shipper: UNDECODABLE_METADATA: b[0]@12: truncated causes header" in ln
               for ln in lines)
    # The head blockers are never cut: in their column where they fit, else under the
    # table, one (wrapped) line per task.
    text = " ".join(" ".join(lines).split())
    blocker = ("subscriptions-changed-0[3]@7123456 x2: subscribers-registered[3] needs "
               "91234567 settled - (+2 more)")
    assert blocker in text, "\n".join(lines)
    assert "…" not in text, "\n".join(lines)
    if width >= 200:
        assert blocker in rows[3] and "status --wide" not in text
    else:
        assert "head blockers (every held channel: status --wide)" in text
        assert "mailing-list-digest task 3: " + blocker in text


def test_a_blocker_that_fits_keeps_its_column() -> None:
    doc = {"processes": {"p": {"state": "RUNNING", "refusal_reason": None,
                               "failure_detail": None, "restarts": 0, "tasks": [
        {**_task(0, 0), "held": [{"topic": "b", "partition": 0, "count": 1, "head": 7,
                                  "blockers": [{"topic": "a", "partition": 0, "required": 9,
                                                "settled": None}]}]}]}}}
    lines = _lines(doc, 100)
    [row] = [ln for ln in lines if ln.lstrip().startswith("p ") and " RUNNING " in ln]
    assert "b[0]@7 x1: a[0] needs 9 settled -" in row, "\n".join(lines)
    assert "status --wide" not in "\n".join(lines)


def test_the_wide_table_has_every_held_channel_and_the_detail() -> None:
    text = "\n".join(_lines(DOC, 100, wide=True))
    for c in range(3):
        assert f"subscriptions-changed-{c}[3]@7123456 x2: subscribers-registered[3] needs " \
               "91234567 settled -" in text
    assert "424243" in text and "12 ch / 5400 of 262144 B" in text and "40.0 MiB" in text


def test_a_last_report_is_marked_with_its_time_and_exit_code(tmp_path: Path) -> None:
    statuses = parse_status(DOC)
    report = LastReport(1_796_000_000_123, 3, "REFUSAL", 4242, statuses)
    at_80 = _lines(report.to_json(), 80)
    assert at_80[1].startswith("exited at ") and at_80[1].endswith("(REFUSAL)"), at_80[:2]
    text = " ".join(" ".join(_lines(report.to_json(), 100)).split())
    assert "last report: no coordinator is running; the one that ran (pid 4242) exited at " \
           f"{report.exited_at[:10]} {report.exited_at[11:23]} UTC with exit code 3 (REFUSAL)" \
        in text
    refused = LastReport(1_796_000_000_123, 3, "REFUSAL", 1, {},
                         StartFailure(Reason.TASK_WIDTH_CHANGED, "b has 3 partitions, was 2"))
    text = " ".join(" ".join(_lines(refused.to_json(), 100)).split())
    assert "start refused: TASK_WIDTH_CHANGED: b has 3 partitions, was 2" in text
    assert "caught up" not in text and "parsley processes" not in text, "no empty table"


def test_the_last_report_file_is_written_whole_and_read_back(tmp_path: Path) -> None:
    path = last_status_file(tmp_path / "state", "shop")
    assert path == tmp_path / "state" / "shop.coordinator.last-status.json"
    assert read_last_report(path) is None
    report = LastReport.now(4, "FAILURE", {"p": ProcessStatus(
        ProcessState.STOPPED, None, "worker crashed (SIGKILL)", (), 2)})
    old = os.umask(0o022)
    try:
        write_last_report(path, report)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name], "no temporary left"
    back = read_last_report(path)
    assert back == report and back.exited_at.endswith("Z")
    assert back.to_json()["processes"]["p"]["failure_detail"] == "worker crashed (SIGKILL)"
    path.write_text('{"processes": {}}')
    with pytest.raises(ValueError, match="not a readable last status report"):
        read_last_report(path)


def test_status_exits_with_the_documented_code_while_a_process_stands_stopped() -> None:
    from coordinator.cli.common import ExitCode
    from coordinator.cli.status import exit_code_of

    assert exit_code_of(DOC) is ExitCode.REFUSAL
    running = {"processes": {"p": {"state": "RUNNING"}, "q": {"state": "STARTING"}}}
    assert exit_code_of(running) is ExitCode.CLEAN
    failed = {"processes": {"p": {"state": "RUNNING"},
                            "q": {"state": "STOPPED", "refusal_reason": None,
                                  "failure_detail": "ValueError: boom"}}}
    assert exit_code_of(failed) is ExitCode.FAILURE
    closed = {"processes": {"q": {"state": "STOPPED", "refusal_reason": None,
                                  "failure_detail": None}}}
    assert exit_code_of(closed) is ExitCode.CLEAN
