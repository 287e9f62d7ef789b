"""A batch relay (``Process.receives_batch``) on a real broker: exactly once, in causal order,
across a SIGKILL and a restart.

One task receives A with a batch handler and B with a per-record one; B records name A
records as causes, often before those exist (held, then released). Each delivery is relayed
to OUT with its source, offset and a per-source count kept in a store (the batch handler
counts in its own code, reading the store once per batch). The worker is killed with SIGKILL
from inside a batch call, after the earlier batches of its transaction were produced and
before their commit, then restarted to drain the rest and stop cleanly. A checker reads OUT
``read_committed``: nothing lost, nothing duplicated, order within each source, an
exactly-once count, every B record after its cause, and every send's ``parsley.causes``
naming its own delivery (the frontier as of its batch's end covers it). The batch handler
must have taken more than one delivery per call.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
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
from parsley import Channel, Effects, Process, Store
from parsley.declarations import Delivery, State
from parsley.engine.channel import ChannelId
from parsley.serdes import BYTES, JSON, STRING
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes
from workers.protocol import EXIT_CODES, StopKind

N_A = 3000
B_EVERY = 10  # B record j names A@(B_EVERY * j + B_EVERY - 1)
N_B = N_A // B_EVERY
KILL_AT = 1777  # the A offset whose batch call kills the first worker


def _handlers(out: Channel[Any, Any], counts: Store[Any, Any], token: str) -> tuple[Any, Any]:
    def one(d: Delivery[Any, Any], s: State) -> Effects:
        n = (s.get(counts, d.topic) or 0) + 1
        return (Effects.builder().put(counts, d.topic, n)
                .send(out, d.topic, {"src": d.topic, "off": d.offset, "n": n, "batch": 0})
                .build())

    def many(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
        if os.path.exists(token) and any(d.offset == KILL_AT for d in ds):
            os.remove(token)
            os.kill(os.getpid(), signal.SIGKILL)
        topic = ds[0].topic
        n = s.get(counts, topic) or 0  # the batch's own writes: counted here
        b = Effects.builder()
        for d in ds:
            n += 1
            b.send(out, topic, {"src": topic, "off": d.offset, "n": n, "batch": len(ds)})
        return b.put(counts, topic, n).build()

    return one, many


@pytest.mark.slow
def test_a_batch_relay_is_exactly_once_and_causal_across_a_kill_and_a_restart(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    a = create_topic(unique_names.topic("a"))
    b = create_topic(unique_names.topic("b"))
    out = create_topic(unique_names.topic("out"))
    counts = Store("counts", STRING, JSON)
    out_ch = Channel(out.name, STRING, JSON)
    token = tmp_path / "kill"
    token.touch()
    one, many = _handlers(out_ch, counts, str(token))
    process = (Process("batch").receives_batch(Channel(a.name, BYTES, BYTES), many, 200)
               .receives(Channel(b.name, BYTES, BYTES), one).sends(out_ch).stores(counts))
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True,
                         "linger.ms": 5, **QUIET})
    a_ch = ChannelId(a.topic_id, 0)
    for j in range(N_B):  # every B first: each names an A offset not yet written
        producer.produce(b.name, key=b"b", value=b"%d" % j, partition=0, headers=[
            (CAUSES_HEADER, encode_causes({a_ch: B_EVERY * j + B_EVERY - 1}))])
    first_part = 1000

    def produce_a(lo: int, hi: int) -> None:
        for i in range(lo, hi):
            producer.produce(a.name, key=b"a", value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0

    produce_a(0, first_part)
    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         topics, commit_interval_ms=100, status_interval_ms=200)
        first = spawn(spec)
        # The first part committed before the rest (and the kill point) arrives.
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                           and m["commits"] > 0 and m["lag"] == 0
                           and m["delivered"] >= first_part, timeout_s=120)
        produce_a(first_part, N_A)
        first.join(120)
        assert first.exitcode == -signal.SIGKILL, first.exitcode
        assert not token.exists(), "the kill point was reached"
        killed = [m for m in collector.snapshot() if m.get("pid") == first.pid
                  and m["kind"] == "status"]
        assert max((m["commits"] for m in killed), default=0) > 0, \
            "the killed worker had committed batches before the kill"
        worker = spawn(spec)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                           and m["state"] == "RUNNING" and m["lag"] == 0
                           and m["held_total"] == 0, timeout_s=120)
        time.sleep(0.5)  # one more commit interval: everything delivered is committed
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
        finals = [m for m in collector.snapshot() if m["kind"] == "final"
                  and m["pid"] == worker.pid]
    finally:
        collector.close()

    records = read_committed(kafka_bootstrap, out.name)
    seen = [orjson.loads(r.value) for r in records]
    keys = [(s["src"], s["off"]) for s in seen]
    assert len(keys) == len(set(keys)), "duplicate output"
    assert set(keys) == {(a.name, i) for i in range(N_A)} | {(b.name, j) for j in range(N_B)}, \
        f"lost output: {len(set(keys))} of {N_A + N_B}"
    position = {k: i for i, k in enumerate(keys)}
    for src in (a.name, b.name):
        mine = [s for s in seen if s["src"] == src]
        assert [s["off"] for s in mine] == list(range(len(mine))), "order within a source"
        assert [s["n"] for s in mine] == list(range(1, len(mine) + 1)), "store not exactly-once"
    for j in range(N_B):
        assert position[(a.name, B_EVERY * j + B_EVERY - 1)] < position[(b.name, j)], \
            f"B@{j} delivered before its cause"
    b_ch = ChannelId(b.topic_id, 0)
    for r, s in zip(records, seen, strict=True):
        causes = decode_causes(dict(r.headers)[CAUSES_HEADER])
        assert causes[a_ch if s["src"] == a.name else b_ch] >= s["off"]
    sizes = [s["batch"] for s in seen if s["src"] == a.name]
    assert max(sizes) > 1 and max(sizes) <= 200, "batches of more than one, within max_records"
    metrics = finals[0]["metrics"]
    print(f"A in batches of up to {max(sizes)}; the last worker made "
          f"{metrics['handler_batches']} batch calls for {metrics['delivered']} deliveries")
    assert 0 < metrics["handler_batches"] < metrics["delivered"]
