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
end 0 lost, 0 duplicated, 0 causal violations. The chaos topics are replicated three ways,
as production's are: a partition with one replica on the broker killed has its transaction
markers skipped by Kafka, which no process can make exactly once (docs/operations.md,
"Broker restarts and the task timeout"). The single broker's restart is
tests/e2e/test_broker_restart_in_place.py and tests/chaos/test_chaos.py.
"""

from __future__ import annotations

import os

from coordinator.config import DEFAULT_STALE_TASK_MS
from devtools.chaos.harness import ChaosResult, ChaosSettings
from devtools.chaos.isolated import run_chaos_isolated
from devtools.chaos.schedule import CLUSTER_KINDS
from devtools.dev_cluster import DevCluster

RIDDEN = tuple(k for k in CLUSTER_KINDS if k != "txn_coordinator_kill")
"""The faults of the first test (the transaction coordinator's kill has a test of its own)."""


def _run(cluster: DevCluster, kinds: tuple[str, ...], seed: int, faults: int) -> ChaosResult:
    settings = ChaosSettings(
        seed=int(os.environ.get("PARSLEY_CLUSTER_CHAOS_SEED", str(seed))),
        faults=faults, kinds=kinds, restart="never",
        rate=float(os.environ.get("PARSLEY_CHAOS_RATE", "40")), cluster=cluster,
        stale_task_ms=DEFAULT_STALE_TASK_MS)
    result = run_chaos_isolated(settings)
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


def test_cluster_broker_faults_under_load_never_stop_the_process(
        kafka_cluster: DevCluster) -> None:
    _assert_clean(_run(kafka_cluster, RIDDEN, 3, len(RIDDEN)), RIDDEN)


def test_a_transaction_coordinator_killed_under_load_loses_and_repeats_nothing(
        kafka_cluster: DevCluster) -> None:
    kinds = ("txn_coordinator_kill",)
    _assert_clean(_run(kafka_cluster, kinds, 5, 2), kinds)
