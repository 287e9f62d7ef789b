"""librdkafka's own lines go through Python logging, with the task, throttled in an outage.

A worker runs on a private broker (fixture ``private_kafka``; the shared one is never
stopped); the broker is then stopped for about ten seconds, so each of the worker's
clients fails to connect again and again. Every librdkafka line reaches the
``parsley.worker.kafka`` logger naming the task (``<app-id> task 0``), none is printed
raw to stderr (``%3|...|FAIL|...``), and a line repeated during the outage passes once
per window, its repeats counted (docs/operations.md, "Logging").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from devtools import devbroker
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import PrivateBroker
from devtools.worker_support import StatusCollector, bootstrap, make_spec, spawn, stop_worker
from tests.integration.test_worker_causal import relay_process

OUTAGE_S = 10.0


def test_librdkafka_lines_go_through_logging_with_the_task(
        private_kafka: PrivateBroker, tmp_path: Path, capfd: Any) -> None:
    data_dir, state = private_kafka.data_dir, private_kafka.state
    worker = None
    try:
        bs = state.bootstrap
        admin = AdminClient({"bootstrap.servers": bs, **QUIET})
        name = "client-log"
        a = create_topic(admin, unique_name("a", name))
        out = create_topic(admin, unique_name("out", name))
        process = relay_process("logger", [a.name], out.name)
        topics = {a.name: a, out.name: out}
        prefix = unique_name("app", name)
        bootstrap(admin, prefix, process, topics)
        del admin
        collector = StatusCollector()
        try:
            spec = make_spec(process, prefix, bs, collector.endpoint, str(tmp_path / "state"),
                             topics, status_interval_ms=300,
                             kafka_properties={"log_level": 6})  # librdkafka's default
            worker = spawn(spec)
            collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                               and m["state"] == "RUNNING", timeout_s=90)
            capfd.readouterr()  # the start's lines are not what is judged
            devbroker.down(data_dir, keep=True)
            time.sleep(OUTAGE_S)
            stop_worker(worker, timeout_s=30)
        finally:
            collector.close()
    finally:
        if worker is not None and worker.is_alive():
            worker.kill()
    err = capfd.readouterr().err
    raw = [ln for ln in err.splitlines() if ln.startswith("%")]
    assert not raw, "librdkafka printed to stderr:\n" + "\n".join(raw[:20])
    routed = [ln for ln in err.splitlines() if "parsley.worker.kafka" in ln]
    assert routed, err[-3000:]
    app = f"{prefix}-logger"
    assert all(f"{app} task 0" in ln for ln in routed), "\n".join(routed[:20])
    refused = [ln for ln in routed if "Connection refused" in ln]
    assert refused, "\n".join(routed[:40])
    # Each client (consumer, restore consumer, producer, admin) reconnects several times
    # a second during the outage; repeats of a line pass once per window.
    assert len(refused) <= 4 * 3, "\n".join(refused)
    print(f"{len(routed)} librdkafka lines through logging, {len(refused)} refused-connection "
          f"lines in a {OUTAGE_S:g} s outage")
