"""The chaos verdict and schedule (pure): each clause is caught, and a seed fixes the schedule."""

from __future__ import annotations

import pytest

from devtools.chaos.schedule import KINDS, parse_kinds, schedule
from devtools.chaos.verdict import InputRecord, OutputRecord, judge

A0, B0 = ("a", 0), ("b", 0)
INPUTS = [InputRecord(A0, 0, {}), InputRecord(A0, 1, {}), InputRecord(B0, 0, {A0: 1})]
RECEIVED = {0: ("a", "b")}


def test_a_clean_run_is_clean() -> None:
    outs = [OutputRecord(A0, 0, 1), OutputRecord(A0, 1, 2), OutputRecord(B0, 0, 1)]
    verdict = judge(INPUTS, outs, RECEIVED)
    assert verdict.clean, verdict.summary()
    assert (verdict.inputs, verdict.outputs) == (3, 3)


def test_each_clause_is_caught() -> None:
    lost = judge(INPUTS, [OutputRecord(A0, 0, 1), OutputRecord(A0, 1, 2)], RECEIVED)
    assert (lost.lost, lost.clean) == (1, False)
    dup = judge(INPUTS, [OutputRecord(A0, 0, 1), OutputRecord(A0, 1, 2), OutputRecord(A0, 1, 2),
                         OutputRecord(B0, 0, 1)], RECEIVED)
    # A replay whose output stuck while its store write was rolled back: both clauses.
    assert dup.duplicated == 1 and dup.state == 1
    early = judge(INPUTS, [OutputRecord(A0, 0, 1), OutputRecord(B0, 0, 1),
                           OutputRecord(A0, 1, 2)], RECEIVED)
    assert early.causal == 1 and "before its cause a[0]@1" in early.summary()
    fifo = judge(INPUTS, [OutputRecord(A0, 1, 1), OutputRecord(A0, 0, 2),
                          OutputRecord(B0, 0, 1)], RECEIVED)
    assert fifo.causal == 1 and "out of order" in fifo.summary()
    foreign = judge(INPUTS, [OutputRecord(A0, 0, 1), OutputRecord(A0, 1, 2),
                             OutputRecord(B0, 0, 1), OutputRecord(A0, 9, 3)], RECEIVED)
    assert foreign.foreign == 1
    assert not judge([], [], RECEIVED).clean, "an empty run proves nothing"


def test_a_cause_on_a_channel_the_task_does_not_receive_is_not_judged() -> None:
    inputs = [InputRecord(B0, 0, {("a", 1): 5})]
    assert judge(inputs, [OutputRecord(B0, 0, 1)], RECEIVED).clean


def test_the_schedule_is_seeded_and_covers_every_kind_first() -> None:
    one = schedule(3, 8)
    assert one == schedule(3, 8)
    assert one != schedule(4, 8)
    assert {f.kind for f in one[:len(KINDS)]} == set(KINDS)
    assert all(f.task in (0, 1) for f in one if f.kind in ("worker_kill", "worker_stop"))
    only = schedule(3, 5, ("worker_kill",))
    assert {f.kind for f in only} == {"worker_kill"}
    assert parse_kinds("worker_kill, worker_stop") == ("worker_kill", "worker_stop")
    assert parse_kinds(None) == KINDS
    with pytest.raises(ValueError, match="unknown fault kind"):
        parse_kinds("worker_kil")
