"""Ownership through the consumer group, on the real broker.

* Task ``i`` is a visible static member of ``<app-id>``; with one of two tasks running its
  assignment is both partitions, so it processes nothing and reports ``REBALANCING``;
  once task 1 joins each owns its partition and both run.
* After a clean stop the group is empty within seconds (measured: static members do not
  leave on close, so it takes about the session timeout).
* A received topic whose partition count changes while the process runs stops the worker
  with no reason (``SUBSTRATE``) and a detail naming the change.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import (
    StatusCollector,
    make_spec,
    read_committed,
    relay_setup,
    spawn,
    stop_worker,
)
from parsley.declarations import application_id
from workers.protocol import EXIT_CODES, StopKind

SESSION_TIMEOUT_MS = 3000  # make_spec's consumer.session.timeout.ms


def _members(admin: AdminClient, group: str) -> list[str]:
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return sorted(m.group_instance_id or m.member_id for m in desc.members)


@pytest.mark.slow
def test_tasks_own_their_partition_rebalancing_until_all_join_and_the_group_empties(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "pair", partitions=2)
    process, inp, out, topics, prefix = (relay.process, relay.inp, relay.out,
                                         relay.topics, relay.prefix)
    group = application_id(prefix, process.name)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(20):
        producer.produce(inp.name, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    collector = StatusCollector()
    try:
        specs = [make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                           str(tmp_path), topics, task=t, status_interval_ms=200)
                 for t in (0, 1)]
        t0 = spawn(specs[0])
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == t0.pid
                           and m["state"] == "REBALANCING" and m["restore"] is not None
                           and m["restore"]["done"], timeout_s=60)
        time.sleep(1.0)
        mark = len(collector.snapshot())
        last = collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == t0.pid,
                                  since=mark)
        assert last["state"] == "REBALANCING" and last["delivered"] == 0
        assert _members(kafka_admin, group) == [f"{group}-task-000"]
        t1 = spawn(specs[1])
        for w in (t0, t1):
            collector.wait_for(lambda m, w=w: m["kind"] == "status" and m["pid"] == w.pid
                               and m["state"] == "RUNNING" and m["delivered"] == 10
                               and m["lag"] == 0, timeout_s=60)
        assert _members(kafka_admin, group) == [f"{group}-task-000", f"{group}-task-001"]
        assert stop_worker(t0) == EXIT_CODES[StopKind.CLEAN]
        assert stop_worker(t1) == EXIT_CODES[StopKind.CLEAN]
        stopped = time.monotonic()
        while _members(kafka_admin, group):
            assert time.monotonic() - stopped < 3 * SESSION_TIMEOUT_MS / 1000, \
                "group not empty after a clean stop"
            time.sleep(0.2)
        emptied_s = time.monotonic() - stopped
        print(f"group empty {emptied_s:.1f} s after a clean stop "
              f"(session.timeout.ms={SESSION_TIMEOUT_MS})")
    finally:
        collector.close()
    records = read_committed(kafka_bootstrap, out.name, partitions=(0, 1))
    assert sorted(orjson.loads(r.value)["off"] for r in records) == sorted(
        list(range(10)) * 2)


def test_a_partition_count_change_while_running_stops_with_no_reason(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "shape")
    process, inp, topics, prefix = relay.process, relay.inp, relay.topics, relay.prefix
    collector = StatusCollector()
    try:
        worker = spawn(make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                                 str(tmp_path), topics, status_interval_ms=200))
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                           and m["state"] == "RUNNING", timeout_s=60)
        kafka_admin.create_partitions([NewPartitions(inp.name, 2)])[inp.name].result(30)
        final = collector.final(worker.pid, timeout_s=60)
        worker.join(30)
    finally:
        collector.close()
    assert final["stop_kind"] == "SUBSTRATE" and final["refusal_reason"] is None
    assert (f"received topic {inp.name} had 1 partition(s) at start and has 2 now"
            in final["failure_detail"])
    assert worker.exitcode == EXIT_CODES[StopKind.SUBSTRATE]
