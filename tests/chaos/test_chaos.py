"""Chaos in CI: a 2-task causal pipeline under load through broker restarts, worker
SIGKILLs, a coordinator SIGKILL with a new coordinator, and worker SIGSTOP/SIGCONT.

One seeded run (``devtools/chaos/harness.py``) on a private broker; it must end with
every task RUNNING and lag 0, and an independent ``read_committed`` reader must see
every input record exactly once, in causal order. Knobs (docs/operations.md, "Chaos
test and soak"): ``PARSLEY_CHAOS_SEED`` (default 7), ``PARSLEY_CHAOS_FAULTS``
(default 4, one of each kind), ``PARSLEY_CHAOS_KINDS`` (comma-separated subset of
``broker_restart,worker_kill,coordinator_kill,worker_stop``; default all),
``PARSLEY_CHAOS_RATE`` (A records per second, default 40).
"""

from __future__ import annotations

import os

import pytest

from devtools.chaos.harness import ChaosSettings
from devtools.chaos.isolated import run_chaos_isolated
from devtools.chaos.schedule import parse_kinds

# Its own broker, a producer and a coordinator under faults: it loads the machine.
pytestmark = [pytest.mark.serial, pytest.mark.load]


def settings_from_env() -> ChaosSettings:
    """The CI run's settings, from ``PARSLEY_CHAOS_*`` (module docstring)."""
    return ChaosSettings(
        seed=int(os.environ.get("PARSLEY_CHAOS_SEED", "7")),
        faults=int(os.environ.get("PARSLEY_CHAOS_FAULTS", "4")),
        kinds=parse_kinds(os.environ.get("PARSLEY_CHAOS_KINDS")),
        rate=float(os.environ.get("PARSLEY_CHAOS_RATE", "40")),
    )


def test_pipeline_survives_a_seeded_schedule_of_faults_exactly_once_in_causal_order() -> None:
    result = run_chaos_isolated(settings_from_env())
    print(result.report())
    assert result.failure is None, result.report()
    assert result.all_running, result.report()
    assert result.verdict is not None and result.verdict.clean, result.report()
    assert not result.leftovers, result.report()
    assert all(f.recovered_s is not None for f in result.faults), result.report()
