"""The worker holds a message whose cause has not arrived and delivers in causal order,
on the real broker, with the worker in its own spawned OS process.

A derived message on topic B names, in its ``parsley.causes`` header, a record
on topic A that plain consumption has not seen yet: the cause is produced in a
transaction left open (so ``read_committed`` consumption cannot see it), and B's
record is committed first. The worker must report the B message held with A@0
as its blocker, deliver nothing derived from B, and once A's transaction
commits deliver A's message first, then B's.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley import Channel, Effects, Process
from parsley.engine.channel import ChannelId
from parsley.serdes import BYTES
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes
from workers.protocol import EXIT_CODES, StopKind


def relay_handler(out_name: str, pause_s: float = 0.0) -> Any:
    """A handler that relays ``value`` to ``out_name`` prefixed with the source topic,
    sleeping ``pause_s`` first (s; 0: none)."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if pause_s:
            time.sleep(pause_s)
        return (Effects.builder()
                .send(out, delivery.key, delivery.topic.encode() + b":" + delivery.value,
                      headers=delivery.headers)
                .build())

    return handle


def relay_process(name: str, sources: list[str], out_name: str,
                  pause_s: float = 0.0) -> Process:
    """``name`` receives every topic in ``sources`` and relays to ``out_name`` (each
    delivery after a ``pause_s`` sleep, s)."""
    proc = Process(name)
    handler = relay_handler(out_name, pause_s)
    for s in sources:
        proc = proc.receives(Channel(s, BYTES, BYTES), handler)
    return proc.sends(Channel(out_name, BYTES, BYTES))


@pytest.mark.slow
def test_derived_message_is_held_until_its_cause_commits_then_delivered_in_order(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    a = create_topic(unique_names.topic("a"))
    b = create_topic(unique_names.topic("b"))
    out = create_topic(unique_names.topic("out"))
    prefix = unique_names.group("app")
    process = relay_process("relay", [a.name, b.name], out.name)
    topics = {a.name: a, b.name: b, out.name: out}
    bootstrap(kafka_admin, prefix, process, topics)

    # The cause: A@0, produced in a transaction left open.
    upstream = Producer({"bootstrap.servers": kafka_bootstrap,
                         "transactional.id": unique_names.transactional_id(), **QUIET})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    upstream.produce(a.name, key=b"k", value=b"cause", partition=0)
    upstream.flush(30)
    # The derived message on B, committed, naming A@0 as its cause.
    plain = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    causes = encode_causes({ChannelId(a.topic_id, 0): 0})
    plain.produce(b.name, key=b"k", value=b"effect", partition=0,
                  headers=[(CAUSES_HEADER, causes), ("app", b"1")])
    assert plain.flush(30) == 0

    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         topics, commit_interval_ms=100, status_interval_ms=300)
        worker = spawn(spec)
        held = collector.wait_for(
            lambda m: m["kind"] == "status" and m["state"] == "RUNNING" and m["held_total"] == 1,
            timeout_s=60)
        (entry,) = held["held"]
        assert (entry["topic"], entry["partition"], entry["count"], entry["head"]) == \
            (b.name, 0, 1, 0)
        # The class and its figures come with the worker's next listing of offsets.
        assert [{k: b[k] for k in ("topic", "partition", "required", "settled")}
                for b in entry["blockers"]] == [
            {"topic": a.name, "partition": 0, "required": 0, "settled": None}]
        assert entry["blockers"][0]["class"] in (None, "not_produced"), entry
        committed = collector.wait_for(lambda m: m["kind"] == "status" and m["commits"] >= 1)
        time.sleep(1.0)  # several commit intervals: still nothing may be delivered
        assert read_committed(kafka_bootstrap, out.name) == []
        still = collector.wait_for(lambda m: m["kind"] == "status", since=len(
            collector.snapshot()))
        assert still["held_total"] == 1 and still["delivered"] == 0
        # Idle (the hold is committed, nothing new fed): no transaction at all.
        assert still["commits"] == committed["commits"]

        upstream.commit_transaction(30)
        collector.wait_for(
            lambda m: m["kind"] == "status" and m["delivered"] == 2 and m["held_total"] == 0
            and m["commits"] >= 1, timeout_s=60)
        records = read_committed(kafka_bootstrap, out.name)
        assert [r.value for r in records] == [a.name.encode() + b":cause",
                                             b.name.encode() + b":effect"]
        # Every send carries parsley.causes; the effect's names both A@0 and B@0.
        last = dict(records[1].headers)
        assert decode_causes(last[CAUSES_HEADER]) == {
            ChannelId(a.topic_id, 0): 0, ChannelId(b.topic_id, 0): 0}
        assert last["app"] == b"1"
        code = stop_worker(worker)
        assert code == EXIT_CODES[StopKind.CLEAN]
        final = collector.final(worker.pid)
        assert final["stop_kind"] == "CLEAN" and final["refusal_reason"] is None
    finally:
        collector.close()


def sampler(out_name: str, every: int) -> Any:
    """Relay every ``every``-th record's offset to ``out_name`` (an upstream Parsley process)."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if delivery.offset % every != every - 1:
            return Effects.none()
        return Effects.builder().send(out, None, b"%d" % delivery.offset).build()

    return handle


@pytest.mark.slow
def test_two_processes_downstream_holds_derived_messages_until_their_causes(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    """Process 1 reads A and emits a derived record to B for every 100th A record (its
    ``parsley.causes`` names that A record). Process 2 receives A and B: B is small and
    arrives with the first fetches while A's long backlog takes many (16 KiB fetches), so
    plain consumption
    would deliver derived records before their causes. Process 2 must hold them (status
    shows it) and relay every B record after the A record it names. Its handler takes
    about 0.1 ms a delivery, so the B records wait seconds behind A's backlog: a hold
    long enough for the 100 ms status samples to see, however fast the feed."""
    n, every = 20_000, 100
    a = create_topic(unique_names.topic("a"))
    b = create_topic(unique_names.topic("b"))
    out = create_topic(unique_names.topic("out"))
    first = (Process("sampler").receives(Channel(a.name, BYTES, BYTES), sampler(b.name, every))
             .sends(Channel(b.name, BYTES, BYTES)))
    second = relay_process("joiner", [a.name, b.name], out.name, pause_s=0.0001)
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, first, topics)
    bootstrap(kafka_admin, prefix, second, topics)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 20, **QUIET})
    for i in range(n):
        producer.produce(a.name, value=b"%d" % i, partition=0)
    assert producer.flush(60) == 0

    collector = StatusCollector()
    try:
        upstream = spawn(make_spec(first, prefix, kafka_bootstrap, collector.endpoint,
                                   str(tmp_path), topics, status_interval_ms=200))
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == upstream.pid
                           and m["delivered"] == n and m["lag"] == 0, timeout_s=120)
        # Small fetches, as from a busy broker: A's backlog comes in many pieces.
        downstream = spawn(make_spec(
            second, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path), topics,
            status_interval_ms=100,
            kafka_properties={"consumer.max.partition.fetch.bytes": 16384}))
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == downstream.pid
                           and m["delivered"] == n + n // every and m["lag"] == 0,
                           timeout_s=120)
        statuses = [m for m in collector.snapshot()
                    if m["kind"] == "status" and m["pid"] == downstream.pid]
        assert stop_worker(upstream) == EXIT_CODES[StopKind.CLEAN]
        assert stop_worker(downstream) == EXIT_CODES[StopKind.CLEAN]
    finally:
        collector.close()
    holds = [h for m in statuses for h in m["held"] if h["topic"] == b.name]
    assert holds, "the derived records never waited: the test did not exercise a hold"
    assert all(bl["topic"] == a.name for h in holds for bl in h["blockers"])
    values = [r.value for r in read_committed(kafka_bootstrap, out.name)]
    assert len(values) == n + n // every
    where = {v: i for i, v in enumerate(values)}
    for k in range(every - 1, n, every):
        cause = a.name.encode() + b":%d" % k
        derived = b.name.encode() + b":%d" % k
        assert where[cause] < where[derived], f"B record for A@{k} delivered before A@{k}"
