"""A consumer that never rejoins its group is renewed in place (workers.join_watch).

After a broker restart under load, librdkafka's consumer was seen revoked and then never
handed an assignment again while the cluster answered: the task sat ``REBALANCING`` with
nothing failing, so no recovery began and the task timeout never ran. Here an in-process
worker on the real broker relays one record and commits; then its real consumer is
unsubscribed from under it (revoked, never to rejoin: the same state, made on purpose).
Past the join bound (shortened to 3 s), once the group shows no member of the task's
``group.instance.id`` (its static member expires one session timeout, 3 s, after the
unsubscribe), the worker renews its consumer in place: a fresh one joins, the next record is
relayed, and the output holds each input once. The clients it replaced are destroyed (off
its thread, workers.clients.retire): as many librdkafka clients live afterwards as before.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import make_spec, read_committed, relay_setup, run_to_clean_stop
from workers.main import Worker
from workers.protocol import TaskState

BOUND_S = 3.0
"""The join bound of this test, s (the default is workers.join_watch.JOIN_BOUND_MIN_S)."""


def live_clients() -> int:
    """librdkafka clients alive in this process: each has one thread named ``rdk:main``."""
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().strip() == "rdk:main"
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return count


@pytest.mark.slow
def test_a_consumer_that_never_rejoins_is_renewed_and_the_task_runs_on(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "rejoin")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})

    def produce(value: bytes) -> None:
        producer.produce(relay.inp.name, value=value, partition=0)
        assert producer.flush(30) == 0

    produce(b"first")
    spec = make_spec(relay.process, relay.prefix, kafka_bootstrap, "tcp://127.0.0.1:1",
                     str(tmp_path), relay.topics, status_interval_ms=200,
                     commit_interval_ms=100)
    deadline = time.monotonic() + 90.0
    wedged_at: float | None = None
    renewed_after: float | None = None
    worker: Worker
    wedged_consumer: object = None
    clients_before = clients_after = 0
    settled_by: float | None = None

    def should_stop() -> bool:
        nonlocal wedged_at, renewed_after, wedged_consumer, clients_before, clients_after
        nonlocal settled_by
        if time.monotonic() > deadline:
            return True
        worker.join_watch.bound_s = BOUND_S
        if wedged_at is None:
            if worker.txn.commits >= 1 and worker.state is TaskState.RUNNING:
                # The first record is committed: take the consumer out of its group for
                # good, as the wedged one was (revoked, never assigned again).
                wedged_consumer = worker.consumer
                clients_before = live_clients()
                assert worker.consumer is not None
                worker.consumer.unsubscribe()
                wedged_at = time.monotonic()
                produce(b"after")
            return False
        consumer = worker.consumer
        if renewed_after is None and consumer is not None and consumer is not wedged_consumer:
            renewed_after = time.monotonic() - wedged_at
        if not (renewed_after is not None and worker.state is TaskState.RUNNING
                and worker.txn.commits >= 2):
            return False
        # The replaced clients go on a thread of their own, once the worker lets go of them.
        settled_by = settled_by or time.monotonic() + 15.0
        clients_after = live_clients()
        return clients_after <= clients_before or time.monotonic() > settled_by

    worker = Worker(spec, None, should_stop)
    run_to_clean_stop(worker)

    assert wedged_at is not None, "the worker never committed the first record"
    assert renewed_after is not None, (
        f"the consumer was not renewed within {deadline - wedged_at:.0f} s of leaving its "
        f"group (state {worker.state.value})")
    assert renewed_after >= BOUND_S, "renewed before the join bound"
    assert worker.task_timeout.recoveries >= 1
    assert clients_after <= clients_before, (
        f"{clients_after} librdkafka clients live after the renewal, {clients_before} before: "
        "a replaced client was not destroyed")
    print(f"renewed {renewed_after:.1f} s after the consumer left its group "
          f"(bound {BOUND_S:g} s)")
    # The commit's markers reach the partition a moment after commit_transaction returns.
    until = time.monotonic() + 30
    while len(seen := read_committed(kafka_bootstrap, relay.out.name)) < 2 \
            and time.monotonic() < until:
        time.sleep(0.5)
    offsets = [orjson.loads(r.value)["off"] for r in seen]
    assert offsets == [0, 1], f"each input once, in order: {offsets}"
