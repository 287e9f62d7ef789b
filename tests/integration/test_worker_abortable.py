"""A transaction the broker times out under the worker (docs/operations.md, "Transaction time
bound":
an open transaction is aborted at ten seconds), on the real broker.

The handler stalls once for longer than ``transaction.timeout.ms`` (10 s) plus the broker's
sweep of timed-out transactions, so the broker aborts the open transaction and bumps the
producer epoch. Measured on Kafka 4.3 with librdkafka 2.16: the worker's next transactional
call fails with ``_FENCED`` ("This instance has been fenced by a newer instance"), as for
a real zombie; since its own transaction outlived the timeout and no other member holds
the task, a restart would cure it, so the worker recovers in place (docs/operations.md,
"The task timeout"). Nothing of the aborted transaction is committed, and the same worker
resumes from the committed record exactly once.
"""

from __future__ import annotations

import os
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
    make_spec,
    read_committed,
    relay_setup,
    spawn,
    stop_worker,
)
from parsley import Channel, Effects, Store
from workers.protocol import EXIT_CODES, StopKind

N = 200
STALL_AT = 120
STALL_S = 22.0  # > transaction.timeout.ms (10 s) + the broker's 10 s timed-out-transaction sweep


def stalling_relay(out: Channel[Any, Any], counts: Store[Any, Any], token: str) -> Any:
    """Count and relay; at offset STALL_AT stall STALL_S once (while ``token`` exists)."""

    def handle(delivery: Any, state: Any) -> Effects:
        if delivery.offset == STALL_AT and os.path.exists(token):
            os.remove(token)
            time.sleep(STALL_S)
        n = (state.get(counts, "n") or 0) + 1
        return (Effects.builder().put(counts, "n", n)
                .send(out, None, {"off": delivery.offset, "n": n}).build())

    return handle


@pytest.mark.slow
def test_a_transaction_timed_out_by_the_broker_is_recovered_in_place_exactly_once(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    token = tmp_path / "stall"
    token.touch()
    relay = relay_setup(kafka_admin, create_topic, unique_names, "stall",
                        handler=lambda out_ch, counts: stalling_relay(out_ch, counts, str(token)))
    process, inp, out, topics, prefix = (relay.process, relay.inp, relay.out,
                                         relay.topics, relay.prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(N):
        producer.produce(inp.name, value=b"%d" % i, partition=0)
        if i % 20 == 19:
            producer.flush(30)
            time.sleep(0.05)
    assert producer.flush(30) == 0
    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                         str(tmp_path / "state"), topics, status_interval_ms=200)
        worker = spawn(spec)
        # The broker aborts the stalled transaction and fences the producer; the worker
        # sees _FENCED with its transaction open past the timeout and no successor in the
        # group, so it recovers in place: a fresh producer, the state rebuilt, the
        # positions rewound (docs/operations.md, "The task timeout").
        caught_up = collector.wait_for(
            lambda m: m["kind"] == "status" and m["pid"] == worker.pid
            and m.get("recoveries", 0) >= 1 and m["lag"] == 0 and m["held_total"] == 0
            and m["state"] == "RUNNING" and m["recovery"] is None,  # its commit came through
            timeout_s=120, fail_on_stop=True)
        assert not token.exists()
        assert caught_up["recoveries"] >= 1
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
        last = collector.final(worker.pid)
    finally:
        collector.close()
    seen = [orjson.loads(r.value) for r in read_committed(kafka_bootstrap, out.name)]
    # Nothing delivered in the timed-out transaction is visible; each record once, in order.
    assert [s["off"] for s in seen] == list(range(N))
    assert [s["n"] for s in seen] == list(range(1, N + 1))
    # The metrics count what committed transactions carry: the timed-out transaction's
    # deliveries are not counted (docs/operations.md, "Metrics").
    m = last["metrics"]
    assert m["delivered"] == N
    assert m["aborts"] >= 1
    assert sum(m["transaction_seconds"]["counts"]) == m["commits"]
