"""The 3-broker dev cluster (``parsley-devbroker up --brokers 3``) and Parsley on it.

The session's cluster (fixture ``kafka_cluster``) was started by the command line, as an
operator starts it; these tests read what it printed, ask ``status --json``, run a relay
whose changelogs must be replicated three ways with ``min.insync.replicas`` 2 set on the
topic, and kill a broker for ``up`` to start again. None could run before ``--brokers``
existed; the changelog assertions fail on the previous ``ensure_changelog_topic``, which
created changelogs with the broker's default replication and no topic-level minimum.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Producer, TopicCollection
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from coordinator import Parsley, ParsleyConfig
from coordinator.bootstrap import bootstrap
from devtools import devbroker_cluster
from devtools.dev_cluster import DevCluster
from devtools.kafka_support import create_topic, unique_name
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Store
from parsley.declarations import ordering_changelog, store_changelog
from parsley.serdes import BYTES, JSON, STRING

pytestmark = pytest.mark.broker


def _cli(*args: str, timeout_s: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devtools.devbroker_cli", *args],
                          capture_output=True, text=True, timeout=timeout_s, check=False)


def _status(cluster: DevCluster) -> tuple[int, dict[str, Any]]:
    result = _cli("status", "--dir", str(cluster.data_dir), "--json")
    return result.returncode, json.loads(result.stdout)


def _replication(cluster: DevCluster, topic: str) -> tuple[set[int], str, bool]:
    """(replica counts of its partitions, min.insync.replicas, whether that is the topic's
    own setting rather than the broker's default)."""
    admin = cluster.admin()
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic] \
        .result(timeout=20)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource], request_timeout=15)[resource].result(timeout=20)
    entry = configs["min.insync.replicas"]
    own = entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    return {len(p.replicas) for p in desc.partitions}, str(entry.value), own


def test_up_printed_every_broker_and_status_json_names_each(kafka_cluster: DevCluster) -> None:
    last = kafka_cluster.up_stdout.strip().splitlines()[-1]
    servers = last.removeprefix("bootstrap.servers=").split(",")
    assert last.startswith("bootstrap.servers=") and len(servers) == 3, kafka_cluster.up_stdout
    assert all(s.startswith("127.0.0.1:") for s in servers) and len(set(servers)) == 3
    assert "3 brokers ready" in kafka_cluster.up_stderr
    assert "(started 1, 2, 3)" in kafka_cluster.up_stderr

    code, status = _status(kafka_cluster)
    assert code == 0, status
    assert [b["id"] for b in status["brokers"]] == [1, 2, 3]
    assert [f"127.0.0.1:{b['port']}" for b in status["brokers"]] == servers
    for broker in status["brokers"]:
        assert broker["running"] and not broker["frozen"]
        assert psutil.Process(broker["pid"]).is_running()
    assert status["bootstrap"] == kafka_cluster.bootstrap
    assert status["security"] == "plaintext"
    text = _cli("status", "--dir", str(kafka_cluster.data_dir))
    assert text.returncode == 0 and "running: 3 of 3 brokers" in text.stdout

    admin = kafka_cluster.admin()
    nodes = admin.describe_cluster(request_timeout=15).result(timeout=20).nodes
    assert sorted(n.id for n in nodes) == [1, 2, 3]
    for internal in ("__consumer_offsets", "__transaction_state"):
        replicas, min_isr, _ = _replication(kafka_cluster, internal)
        assert (replicas, min_isr) == ({3}, "2"), internal
    topic = unique_name("rf-default", "cluster")
    create_topic(admin, topic, partitions=2, replication_factor=-1)
    assert _replication(kafka_cluster, topic)[:2] == ({3}, "2")


def _counting_relay(name: str, source: str, out_name: str) -> Process:
    out = Channel(out_name, STRING, JSON)
    counts: Store[str, int] = Store("counts", STRING, JSON)

    def handle(delivery: Any, state: Any) -> Effects:
        n = (state.get(counts, "all") or 0) + 1
        return (Effects.builder().put(counts, "all", n)
                .send(out, delivery.key.decode(), {"v": delivery.value.decode(), "n": n})
                .build())

    return (Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)
            .stores(counts))


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_relay_on_three_brokers_replicates_its_changelogs_three_ways(
    kafka_cluster: DevCluster, tmp_path: Path
) -> None:
    admin = kafka_cluster.admin()
    source = create_topic(admin, unique_name("in", "cluster-relay"), partitions=2,
                          replication_factor=-1)
    out = create_topic(admin, unique_name("out", "cluster-relay"), partitions=2,
                       replication_factor=-1)
    producer = Producer(kafka_cluster.config())
    values = [f"v{i}" for i in range(30)]
    for i, value in enumerate(values):
        producer.produce(source.name, key=b"k%d" % i, value=value.encode(), partition=i % 2)
    assert producer.flush(30) == 0
    prefix = f"cluster-{uuid.uuid4().hex[:8]}"
    config = ParsleyConfig(kafka_cluster.bootstrap, prefix, state_dir=str(tmp_path),
                           status_interval_ms=300)
    process = _counting_relay("relay", source.name, out.name)
    with Parsley.start(config, process) as parsley:
        _wait(lambda: len(read_committed(kafka_cluster.bootstrap, out.name, (0, 1))) >= 30,
              120, "30 relayed records")
        report = parsley.close(deadline_s=20)
        assert report.clean, report.summary()
    relayed = read_committed(kafka_cluster.bootstrap, out.name, (0, 1))
    assert sorted(json.loads(r.value)["v"] for r in relayed) == sorted(values)  # exactly once
    for changelog in (ordering_changelog(prefix, "relay"),
                      store_changelog(prefix, "relay", "counts")):
        replicas, min_isr, own = _replication(kafka_cluster, changelog)
        assert (replicas, min_isr) == ({3}, "2"), changelog
        assert own, f"{changelog}: min.insync.replicas is the broker's default, not its own"

    # The helpers the broker-fault tests aim with: the broker coordinating the task's
    # transactions and its group, as Kafka's own tools name them.
    txn_id = f"{prefix}-relay-task-000"
    described = _cli("tool", "kafka-transactions", "--bootstrap-server", kafka_cluster.bootstrap,
                     "describe", "--transactional-id", txn_id)
    assert described.returncode == 0, described.stderr
    header, row = described.stdout.strip().splitlines()[:2]
    coordinator = int(row.split()[header.split().index("CoordinatorId")])
    assert kafka_cluster.transaction_coordinator_of(txn_id) == coordinator
    groups = _cli("tool", "kafka-consumer-groups", "--bootstrap-server", kafka_cluster.bootstrap,
                  "--describe", "--group", f"{prefix}-relay", "--state")
    assert groups.returncode == 0, groups.stderr
    assert f"(id: {kafka_cluster.group_coordinator_of(f'{prefix}-relay')})" in groups.stdout \
        or f"({kafka_cluster.group_coordinator_of(f'{prefix}-relay')})" in groups.stdout, \
        groups.stdout

    # Configured: two replicas, whose minimum stays 1 (one broker down keeps it writable).
    two = ParsleyConfig(kafka_cluster.bootstrap, f"{prefix}-rf2", state_dir=str(tmp_path),
                        changelog_replication_factor=2)
    bootstrap(two, [_counting_relay("relay", source.name, out.name)], group_window_s=1.0)
    assert _replication(kafka_cluster, ordering_changelog(f"{prefix}-rf2", "relay")) \
        == ({2}, "1", True)


def test_up_again_starts_a_killed_broker_and_freeze_thaw_show_in_status(
    kafka_cluster: DevCluster
) -> None:
    where = str(kafka_cluster.data_dir)
    try:
        _code, before = _status(kafka_cluster)
        killed = _cli("stop", "--dir", where, "--broker", "2", "--kill")
        assert killed.returncode == 0 and "killed" in killed.stderr, killed.stderr
        code, status = _status(kafka_cluster)
        assert code == 4, "some brokers run"
        assert [b["running"] for b in status["brokers"]] == [True, False, True]
        assert status["brokers"][1]["pid"] is None

        again = _cli("up", "--dir", where)
        assert again.returncode == 0, again.stderr
        assert "(started 2)" in again.stderr
        printed = again.stdout.strip().splitlines()[-1]
        assert printed == f"bootstrap.servers={kafka_cluster.bootstrap}"
        code, status = _status(kafka_cluster)
        assert code == 0 and all(b["running"] for b in status["brokers"])
        assert status["brokers"][1]["pid"] != before["brokers"][1]["pid"]
        assert status["brokers"][1]["port"] == before["brokers"][1]["port"]

        assert _cli("freeze", "--dir", where, "--broker", "3").returncode == 0
        assert [b["frozen"] for b in _status(kafka_cluster)[1]["brokers"]] == \
            [False, False, True]
        assert _cli("thaw", "--dir", where, "--broker", "3").returncode == 0
        assert not any(b["frozen"] for b in _status(kafka_cluster)[1]["brokers"])
        devbroker_cluster.wait_in_sync(kafka_cluster.bootstrap, timeout_s=180)
    finally:
        kafka_cluster.heal()


def test_a_written_topic_with_one_replica_is_warned_of_at_the_start(
    kafka_cluster: DevCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = kafka_cluster.admin()
    source = create_topic(admin, unique_name("in", "one-replica"), replication_factor=-1)
    single = create_topic(admin, unique_name("out1", "one-replica"), replication_factor=1)
    replicated = create_topic(admin, unique_name("out3", "one-replica"), replication_factor=-1)
    prefix = f"one-replica-{uuid.uuid4().hex[:8]}"
    config = ParsleyConfig(kafka_cluster.bootstrap, prefix, state_dir=str(tmp_path))
    caplog.set_level(logging.WARNING, logger="parsley.bootstrap")
    bootstrap(config, [_counting_relay("single", source.name, single.name),
                       _counting_relay("replicated", source.name, replicated.name)],
              group_window_s=1.0)
    warned = [r.getMessage() for r in caplog.records if "single replica" in r.getMessage()]
    assert len(warned) == 1, warned
    assert f"{prefix}-single" in warned[0] and single.name in warned[0], warned[0]
    assert replicated.name not in warned[0]

    # A changelog configured with one replica is written in the transactions too.
    caplog.clear()
    one = ParsleyConfig(kafka_cluster.bootstrap, f"{prefix}-rf1", state_dir=str(tmp_path / "rf1"),
                        changelog_replication_factor=1)
    bootstrap(one, [_counting_relay("relay", source.name, replicated.name)], group_window_s=1.0)
    warned = [r.getMessage() for r in caplog.records if "single replica" in r.getMessage()]
    assert len(warned) == 1, warned
    assert ordering_changelog(f"{prefix}-rf1", "relay") in warned[0], warned[0]
    assert store_changelog(f"{prefix}-rf1", "relay", "counts") in warned[0], warned[0]
    assert replicated.name not in warned[0]
