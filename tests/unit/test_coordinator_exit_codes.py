"""Worker exit codes carry the stop kind and a refusal's reason (no broker, no processes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.runtime.supervisor.exits import classify_exit
from parsley.refusals import Reason
from workers.protocol import (
    EXIT_CODES,
    REFUSAL_EXIT_BASE,
    ExitVerdict,
    StopKind,
    exit_code_for,
    exit_verdict,
    stop_kind_of_exit,
)


@pytest.mark.parametrize("reason", list(Reason))
def test_a_refusal_code_round_trips_its_reason(reason: Reason) -> None:
    code = exit_code_for(StopKind.REFUSAL, reason)
    assert REFUSAL_EXIT_BASE <= code < 128
    assert exit_verdict(code) == ExitVerdict(StopKind.REFUSAL, reason)
    assert stop_kind_of_exit(code) is StopKind.REFUSAL


def test_the_existing_codes_keep_their_meaning() -> None:
    for kind, code in EXIT_CODES.items():
        assert exit_code_for(kind) == code
        assert exit_verdict(code) == ExitVerdict(kind, None)
        assert stop_kind_of_exit(code) is kind
    assert exit_verdict(10) == ExitVerdict(StopKind.REFUSAL, None), "10: reason unknown"
    assert exit_code_for(StopKind.APPLICATION, Reason.TASK_WIDTH_CHANGED) == 11
    with pytest.raises(ValueError):
        exit_code_for(StopKind.CRASHED)


@given(st.integers(min_value=-64, max_value=300) | st.none())
def test_every_other_status_is_a_crash(code: int | None) -> None:
    verdict = exit_verdict(code)
    known = set(EXIT_CODES.values()) | set(range(REFUSAL_EXIT_BASE,
                                                 REFUSAL_EXIT_BASE + len(Reason)))
    if code in known:
        assert verdict.kind is not StopKind.CRASHED
    else:
        assert verdict == ExitVerdict(StopKind.CRASHED, None)


def test_a_lost_final_report_still_names_the_refusal() -> None:
    code = exit_code_for(StopKind.REFUSAL, Reason.COVERED_POSITION_FED)
    assert classify_exit({}, code) == (
        StopKind.REFUSAL, Reason.COVERED_POSITION_FED,
        "refusal COVERED_POSITION_FED (final report lost)")
    assert classify_exit({}, 10) == (
        StopKind.REFUSAL, None, "refusal, reason unknown (final report lost)")
    assert classify_exit({}, 12) == (StopKind.SUBSTRATE, None, "stop SUBSTRATE (final report lost)")
    assert classify_exit({}, -9) == (StopKind.CRASHED, None, None)


def test_the_final_report_wins_over_the_exit_code() -> None:
    final = {"stop_kind": "REFUSAL", "refusal_reason": "TASK_WIDTH_CHANGED",
             "failure_detail": "built for 2 task(s)"}
    assert classify_exit(final, 10) == (StopKind.REFUSAL, Reason.TASK_WIDTH_CHANGED,
                                        "built for 2 task(s)")
    no_reason = {"stop_kind": "REFUSAL", "refusal_reason": None, "failure_detail": None}
    code = exit_code_for(StopKind.REFUSAL, Reason.ORDERING_STATE_LOST)
    assert classify_exit(no_reason, code) == (StopKind.REFUSAL, Reason.ORDERING_STATE_LOST, None)
    bad_kind = {"stop_kind": "WHATEVER"}
    assert classify_exit(bad_kind, 11) == (StopKind.APPLICATION, None, None)
