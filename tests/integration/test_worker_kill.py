"""``kill -9`` of a worker at random points, many times in one run.

One task of a process receiving A and B (B's records name A records as causes,
often before those A records exist) keeps a per-source counter in a store and
relays each delivery to OUT. While input keeps arriving, the worker is killed
with SIGKILL after a random time (during start-up and restore, while feeding,
between produce and commit, during a commit) and restarted, ``PARSLEY_KILL_ROUNDS``
times (default 8). Then a last worker drains everything and stops cleanly.

An independent checker reads OUT ``read_committed`` and judges: no loss (every
input record relayed), no duplicate, per-source order and an exactly-once
store (the counter of the n-th relayed record of a source is n), and no causal
violation (every B record's output follows the output of the A record it names).
"""

from __future__ import annotations

import os
import random
import threading
import time
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
    counting_relay,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley import Channel, Process, Store
from parsley.engine.channel import ChannelId
from parsley.serdes import BYTES, JSON, STRING
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes
from workers.protocol import EXIT_CODES, StopKind

ROUNDS = int(os.environ.get("PARSLEY_KILL_ROUNDS", "8"))
N_A = 1500
B_EVERY = 5  # B record j names A@(B_EVERY * j + B_EVERY - 1)
N_B = N_A // B_EVERY
CHUNKS = 30


def _produce_input(bootstrap_servers: str, a: Any, b: Any, done: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 5, **QUIET})
    a_ch = ChannelId(a.topic_id, 0)
    per = N_A // CHUNKS
    for c in range(CHUNKS):
        lo, hi = c * per, (c + 1) * per
        # B first: its causes name A offsets that do not exist yet.
        for j in range(lo // B_EVERY, hi // B_EVERY):
            cause = B_EVERY * j + B_EVERY - 1
            producer.produce(b.name, key=b"b", value=b"%d" % j, partition=0,
                             headers=[(CAUSES_HEADER, encode_causes({a_ch: cause}))])
        producer.flush(30)
        time.sleep(0.3)  # long enough for a status interval to show the hold
        for i in range(lo, hi):
            producer.produce(a.name, key=b"a", value=b"%d" % i, partition=0)
        producer.flush(30)
        time.sleep(random.uniform(0.0, 0.2))
    done.set()


@pytest.mark.slow
def test_kill_9_at_random_points_loses_nothing_duplicates_nothing_breaks_no_cause(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    a = create_topic(unique_names.topic("a"))
    b = create_topic(unique_names.topic("b"))
    out = create_topic(unique_names.topic("out"))
    counts = Store("counts", STRING, JSON)
    out_ch = Channel(out.name, STRING, JSON)
    kill_dir = tmp_path / "kills"
    kill_dir.mkdir()
    # Deterministic kills inside the step, between produce and commit.
    tokens = [kill_dir / f"kill-{a.name}-{off}" for off in (120, 480, 910, 1333)]
    for token in tokens:
        token.touch()
    handler = counting_relay(out_ch, counts, str(kill_dir))
    process = (Process("chaos").receives(Channel(a.name, BYTES, BYTES), handler)
               .receives(Channel(b.name, BYTES, BYTES), handler).sends(out_ch).stores(counts))
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)
    done = threading.Event()
    feeder = threading.Thread(target=_produce_input, args=(kafka_bootstrap, a, b, done),
                              daemon=True)
    collector = StatusCollector()
    rng = random.Random(os.environ.get("PARSLEY_KILL_SEED"))
    kills = 0
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         topics, commit_interval_ms=50, status_interval_ms=200)
        feeder.start()
        for _ in range(ROUNDS):
            worker = spawn(spec)
            time.sleep(rng.uniform(1.0, 4.0))  # start-up takes 1-2 s: some kills land in it
            worker.kill()  # SIGKILL
            worker.join(10)
            assert worker.exitcode == -9, worker.exitcode
            kills += 1
        feeder.join(120)
        assert done.is_set()
        while True:  # in-step kills left: restart until every token was consumed
            worker = spawn(spec)
            # Lag 0 means every record was read by the consumer, not handled: a fetched batch
            # can hold a token's record still (CI saw the last token kill the worker being
            # stopped), so tokens left keep the wait on until the worker dies of one.
            collector.wait_for(lambda m, w=worker: (m["kind"] == "status" and m["pid"] == w.pid
                                                    and m["state"] == "RUNNING"
                                                    and m["lag"] == 0
                                                    and not any(t.exists() for t in tokens))
                               or not w.is_alive(), timeout_s=120)
            if worker.is_alive():
                break
            worker.join(10)
            assert worker.exitcode == -9
            kills += 1
        expected = N_A + N_B
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                           and m["state"] == "RUNNING" and m["lag"] == 0
                           and m["held_total"] == 0, timeout_s=120)
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
        statuses = [m for m in collector.snapshot() if m["kind"] == "status"]
    finally:
        collector.close()
    assert kills >= ROUNDS
    assert not any(t.exists() for t in tokens), "an in-step kill point was never reached"
    # The kills landed in running workers: killed workers had committed work and held
    # messages (their last status before the SIGKILL says so).
    killed = {m["pid"] for m in statuses} - {worker.pid}
    committed_by_killed = sum(
        max((m["commits"] for m in statuses if m["pid"] == pid), default=0) for pid in killed)
    held_seen = max((m["held_total"] for m in statuses), default=0)
    print(f"kill rounds {ROUNDS} + in-step kills {kills - ROUNDS} (others landed in killed "
          f"rounds): killed workers committed {committed_by_killed} "
          f"transactions; deepest hold seen {held_seen}")
    assert committed_by_killed > 0
    assert held_seen > 0

    records = read_committed(kafka_bootstrap, out.name)
    seen = [orjson.loads(r.value) for r in records]
    keys = [(s["src"], s["off"]) for s in seen]
    assert len(keys) == len(set(keys)), "duplicate output"
    assert set(keys) == {(a.name, i) for i in range(N_A)} | {(b.name, j) for j in range(N_B)}, \
        f"lost output: {len(set(keys))} of {expected}"
    position = {k: i for i, k in enumerate(keys)}
    for src in (a.name, b.name):
        mine = [s for s in seen if s["src"] == src]
        assert [s["off"] for s in mine] == sorted(s["off"] for s in mine), "order within source"
        assert [s["n"] for s in mine] == list(range(1, len(mine) + 1)), "store not exactly-once"
    for j in range(N_B):
        cause = (a.name, B_EVERY * j + B_EVERY - 1)
        assert position[cause] < position[(b.name, j)], f"B@{j} delivered before its cause"
    # Every output carries the frontier, which names the delivered record itself.
    a_ch, b_ch = ChannelId(a.topic_id, 0), ChannelId(b.topic_id, 0)
    for r, s in zip(records, seen, strict=True):
        causes = decode_causes(dict(r.headers)[CAUSES_HEADER])
        ch = a_ch if s["src"] == a.name else b_ch
        assert causes[ch] >= s["off"]
