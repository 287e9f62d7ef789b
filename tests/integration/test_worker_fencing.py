"""A second worker for the same task fences the first, whose commit then fails.

Both workers use the task's ``transactional.id`` and static ``group.instance.id``: the
second's ``init_transactions`` fences the first's producer (and aborts its open
transaction) and its join fences the first's group member. The first must stop with
``FATAL`` (exit 13), the second must carry on, and the output judged ``read_committed``
has every input exactly once, in order.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

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
from workers.protocol import EXIT_CODES, StopKind

N = 3000


@pytest.mark.slow
def test_a_second_worker_for_the_task_fences_the_first_whose_commit_fails(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "fence")
    process, inp, out, topics, prefix = (relay.process, relay.inp, relay.out,
                                         relay.topics, relay.prefix)

    def feed() -> None:
        producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
        for i in range(N):
            producer.produce(inp.name, value=b"%d" % i, partition=0)
            if i % 50 == 49:
                producer.flush(30)
                time.sleep(0.1)
        producer.flush(30)

    feeder = threading.Thread(target=feed, daemon=True)
    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                         str(tmp_path / "first"), topics, status_interval_ms=200)
        first = spawn(spec)
        feeder.start()
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                           and m["commits"] >= 3, timeout_s=60)
        second = spawn(make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                                 str(tmp_path / "second"), topics, status_interval_ms=200))
        final = collector.final(first.pid, timeout_s=60)
        first.join(30)
        assert final["stop_kind"] == "FATAL", final
        assert final["refusal_reason"] is None
        assert "fenced" in final["failure_detail"].lower(), final
        assert first.exitcode == EXIT_CODES[StopKind.FATAL]
        feeder.join(60)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == second.pid
                           and m["state"] == "RUNNING" and m["lag"] == 0, timeout_s=90)
        assert second.is_alive()
        assert stop_worker(second) == EXIT_CODES[StopKind.CLEAN]
    finally:
        collector.close()
    seen = [orjson.loads(r.value) for r in read_committed(kafka_bootstrap, out.name)]
    assert [s["off"] for s in seen] == list(range(N))
    assert [s["n"] for s in seen] == list(range(1, N + 1))
