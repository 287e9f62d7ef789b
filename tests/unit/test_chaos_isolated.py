"""``devtools.chaos.isolated.run_chaos_isolated``: a chaos run in a child process of its
own, so that the Kafka clients a run leaves wedged die with it, and a crash of that
process fails the test naming its signal instead of taking the test process down.

The child's first progress line (``ChaosSettings.say``) is played before any broker
starts, so a ``say`` that aborts or raises exercises each path without Kafka.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from devtools.chaos.harness import ChaosFailure, ChaosSettings
from devtools.chaos.isolated import run_chaos_isolated


def _abort(line: str) -> None:
    os.abort()


def _raise(line: str) -> None:
    raise RuntimeError("a harness bug")


@pytest.mark.slow
def test_a_child_that_aborts_is_a_failure_naming_its_signal(tmp_path: Path) -> None:
    settings = ChaosSettings(seed=1, workdir=tmp_path, say=_abort)
    with pytest.raises(ChaosFailure, match=f"exited with status -{int(signal.SIGABRT)} "
                                           "before it sent a result"):
        run_chaos_isolated(settings)


@pytest.mark.slow
def test_a_harness_that_raises_returns_a_failed_result(tmp_path: Path) -> None:
    result = run_chaos_isolated(ChaosSettings(seed=4, workdir=tmp_path, say=_raise))
    assert result.seed == 4
    assert not result.ok
    assert result.failure is not None and "RuntimeError: a harness bug" in result.failure, \
        result.failure


def test_the_outer_bound_covers_every_fault_and_the_drain() -> None:
    from devtools.chaos.isolated import START_BOUND_S, run_bound_s

    four = ChaosSettings(faults=4, recovery_s=90, gap_s=(2, 5), drain_s=120)
    assert run_bound_s(four) == START_BOUND_S + 4 * (90 + 5 + 60) + 120
    timed = ChaosSettings(faults=None, minutes=10, recovery_s=90, drain_s=120)
    assert run_bound_s(timed) == START_BOUND_S + 600 + 90 + 120
