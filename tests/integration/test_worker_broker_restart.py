"""Held messages survive a broker restart, neither lost nor released early.

A private broker (fixture ``private_kafka``; the shared one is never restarted) carries a
process receiving A and B. Three B records name A records that do not exist yet, so the
worker holds them and commits them to its ordering changelog. The broker is stopped and
started again (same data directory and port); the worker that rode through it is then
replaced by a fresh one, which restores the holds from the changelog. Nothing derived from
B may be committed before its cause, and once A's records arrive every B record is
delivered exactly once, after its cause.
"""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools import devbroker
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import PrivateBroker
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley.engine.channel import ChannelId
from parsley.wire import CAUSES_HEADER, encode_causes
from tests.integration.test_worker_causal import relay_process
from workers.protocol import EXIT_CODES, StopKind


def _held(collector: StatusCollector, pid: int, count: int, timeout_s: float = 90.0) -> dict:
    return collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == pid
                              and m["state"] == "RUNNING" and m["held_total"] == count,
                              timeout_s=timeout_s)


def test_held_messages_survive_a_broker_restart(private_kafka: PrivateBroker,
                                                tmp_path: Path) -> None:
    data_dir, state = private_kafka.data_dir, private_kafka.state
    bs = state.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    name = "broker-restart"
    a = create_topic(admin, unique_name("a", name))
    b = create_topic(admin, unique_name("b", name))
    out = create_topic(admin, unique_name("out", name))
    process = relay_process("holder", [a.name, b.name], out.name)
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_name("app", name)
    bootstrap(admin, prefix, process, topics)
    producer = Producer({"bootstrap.servers": bs, **QUIET})
    a_ch = ChannelId(a.topic_id, 0)
    for j in range(3):
        producer.produce(b.name, value=b"b%d" % j, partition=0,
                         headers=[(CAUSES_HEADER, encode_causes({a_ch: j}))])
    assert producer.flush(30) == 0

    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, bs, collector.endpoint, str(tmp_path / "state"),
                         topics, status_interval_ms=300)
        first = spawn(spec)
        _held(collector, first.pid, 3)
        # Let the hold commit (one commit interval), then bounce the broker.
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                           and m["commits"] >= 1)
        devbroker.down(data_dir, keep=True)
        time.sleep(2.0)
        state2, _ = devbroker.up(data_dir, port=state.port, warm=True)
        assert state2.bootstrap == bs
        assert read_committed(bs, out.name) == []
        if first.is_alive():
            mark = len(collector.snapshot())
            collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                               and m["held_total"] == 3, since=mark)
        stop_worker(first)
        assert read_committed(bs, out.name) == []

        second = spawn(spec)
        restored = _held(collector, second.pid, 3)
        assert restored["restore"]["records"] > 0
        assert [h["head"] for h in restored["held"]] == [0]
        assert read_committed(bs, out.name) == []  # not released early
        for i in range(3):
            producer.produce(a.name, value=b"a%d" % i, partition=0)
        assert producer.flush(30) == 0
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == second.pid
                           and m["held_total"] == 0 and m["delivered"] == 6
                           and m["lag"] == 0, timeout_s=60)
        assert stop_worker(second) == EXIT_CODES[StopKind.CLEAN]
    finally:
        collector.close()
    values = [r.value.split(b":", 1)[1] for r in read_committed(bs, out.name)]
    assert sorted(values) == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"]
    for j in range(3):
        assert values.index(b"a%d" % j) < values.index(b"b%d" % j)
