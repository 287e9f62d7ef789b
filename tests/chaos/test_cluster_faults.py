"""Broker faults of a 3-broker cluster under load are invisible to the restart policy.

The chaos pipeline (devtools/chaos: a 2-task causal process fed at a steady rate, an
independent ``read_committed`` verdict) runs under ``--restart never`` on the session's
3-broker cluster (replication 3, ``min.insync.replicas`` 2) through one of each cluster
fault (docs/operations.md, "Production clusters", "The task timeout"):

* SIGKILL of the broker leading a received partition, down a few seconds;
* SIGKILL of the broker coordinating a task's transactions;
* a rolling restart of all three brokers while records flow;
* the leader of a received partition frozen (SIGSTOP) past the session timeout.

Verdict: after each fault every task is RUNNING again and a transaction has committed to
the output (the stall, measured and printed), no process stopped or restarted, and at the
end 0 lost, 0 duplicated, 0 causal violations. A verdict that is not clean is a known
fault, open (:data:`KNOWN_FAULT`): both tests report it as an expected failure, the
process's own checks holding, until its cause is found. The single broker's restart is
tests/e2e/test_broker_restart_in_place.py and tests/chaos/test_chaos.py.
"""

from __future__ import annotations

import os

import pytest

from coordinator.config import DEFAULT_STALE_TASK_MS
from devtools.chaos.harness import ChaosResult, ChaosSettings, run_chaos
from devtools.chaos.schedule import CLUSTER_KINDS
from devtools.dev_cluster import DevCluster

RIDDEN = tuple(k for k in CLUSTER_KINDS if k != "txn_coordinator_kill")
"""The faults a process rides through with every verdict clean."""


def _run(cluster: DevCluster, kinds: tuple[str, ...], seed: int, faults: int) -> ChaosResult:
    settings = ChaosSettings(
        seed=int(os.environ.get("PARSLEY_CLUSTER_CHAOS_SEED", str(seed))),
        faults=faults, kinds=kinds, restart="never",
        rate=float(os.environ.get("PARSLEY_CHAOS_RATE", "40")), cluster=cluster,
        stale_task_ms=DEFAULT_STALE_TASK_MS)
    result = run_chaos(settings)
    print(result.report())
    return result


def _assert_clean(result: ChaosResult, kinds: tuple[str, ...]) -> None:
    assert result.failure is None, result.report()
    assert {f.fault.kind for f in result.faults} == set(kinds)
    assert all(f.recovered_s is not None for f in result.faults), result.report()
    assert result.restarts == 0, result.report()
    assert result.all_running, result.report()
    assert result.verdict is not None and result.verdict.clean, result.report()
    assert not result.leftovers, result.report()


def _known_fault_or_clean(result: ChaosResult, kinds: tuple[str, ...]) -> None:
    """The process rides every fault (no stop, no restart, every fault recovered, every
    task running at the end) unconditionally; a verdict that is not clean is the known
    open fault (:data:`KNOWN_FAULT`), reported as an expected failure with this run's
    report, never passed over in silence."""
    verdict = result.verdict
    assert result.failure is None and verdict is not None, result.report()
    assert {f.fault.kind for f in result.faults} == set(kinds)
    assert all(f.recovered_s is not None for f in result.faults), result.report()
    assert result.restarts == 0 and result.all_running, result.report()
    if not verdict.clean:
        pytest.xfail(f"{KNOWN_FAULT}; this run: {result.report()}")
    _assert_clean(result, kinds)


def test_cluster_broker_faults_under_load_never_stop_the_process(
        kafka_cluster: DevCluster) -> None:
    _known_fault_or_clean(_run(kafka_cluster, RIDDEN, 3, len(RIDDEN)), RIDDEN)


KNOWN_FAULT = (
    "known fault, open: on the 3-broker cluster the independent read_committed verdict "
    "has seen, at in-place recoveries from _MSG_TIMED_OUT while the output partition's "
    "leader restarted or was killed, records relayed twice (11, 28 and 18, in 3 runs) and "
    "records missing (6, with 1 causal violation, in 1 run) out of 8 runs; whether the "
    "product, the verdict's reader or the broker is at fault is not yet known "
    "(docs/operations.md, 'Broker restarts and the task timeout')")


def test_a_transaction_coordinator_killed_under_load_loses_and_repeats_nothing(
        kafka_cluster: DevCluster) -> None:
    kinds = ("txn_coordinator_kill",)
    _known_fault_or_clean(_run(kafka_cluster, kinds, 5, 2), kinds)
