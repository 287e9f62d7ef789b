"""The status punctuation makes no blocking admin call with a transaction open.

``transaction.timeout.ms`` is 10 s: an identity describe (up to 15 s, plus its
500 ms-spaced corroboration) or a shape check (up to 5 s) run with a transaction
open could outlive it, and the broker would then abort the transaction and fence
the producer. An in-process worker on the real broker, fed continuously with a
commit interval far longer than the status interval (so a transaction is open at
nearly every punctuation), is made to run both checks at every punctuation; the
seam :attr:`workers.main.Worker.on_blocking` observes the transaction at each call.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import make_spec, read_committed, relay_setup
from workers.identity import Backoff
from workers.main import Worker
from workers.protocol import StopKind, TaskState
from workers.verdicts import Stop


@pytest.mark.slow
def test_no_shape_or_identity_check_runs_with_a_transaction_open(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "punct", partitions=1)
    process, inp, out, topics, prefix = (relay.process, relay.inp, relay.out,
                                         relay.topics, relay.prefix)
    spec = make_spec(process, prefix, kafka_bootstrap, "tcp://127.0.0.1:1", str(tmp_path),
                     topics, status_interval_ms=100, commit_interval_ms=5000)

    produced = 0
    feeding = threading.Event()
    done = threading.Event()

    def feed() -> None:
        nonlocal produced
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, **QUIET})
        while not done.is_set():
            producer.produce(inp.name, value=b"%d" % produced, partition=0)
            produced += 1
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0

    calls: list[tuple[str, bool]] = []
    open_at_punctuation = 0
    deadline = time.monotonic() + 60.0
    worker: Worker

    def should_stop() -> bool:
        if worker.state is TaskState.RUNNING and not feeding.is_set():
            feeding.set()
            threading.Thread(target=feed, daemon=True).start()
        if feeding.is_set():
            # Every punctuation runs the four checks: the shape check, the group check,
            # the received topics' deletion check and an identity question for the
            # received topic (answered ALIVE after corroboration).
            worker.next_shape_check = 0.0
            worker.next_group_check = 0.0
            worker.next_received_check = 0.0
            if not worker.pending_identity:
                worker.pending_identity = {inp.name: inp.topic_id}
                worker.backoff = Backoff(first_s=0.0)
        checks = {what for what, _ in calls}
        return (len(calls) >= 12
                and checks == {"shape check", "group check", "deletion check", "identity check"}
                and open_at_punctuation >= 3) or time.monotonic() > deadline

    worker = Worker(spec, None, should_stop)
    worker.on_blocking = lambda what, txn_open: calls.append((what, txn_open))
    punctuate = worker._punctuate

    def observed_punctuate() -> None:
        nonlocal open_at_punctuation
        open_at_punctuation += worker.txn.open
        punctuate()

    worker._punctuate = observed_punctuate  # type: ignore[method-assign]
    try:
        try:
            worker.run()
        except Stop as stop:
            assert stop.kind is StopKind.CLEAN
    finally:
        done.set()
        worker.close(True)

    # The punctuation was reached with a transaction open, and made the checks each time.
    assert open_at_punctuation >= 3, open_at_punctuation
    assert {what for what, _ in calls} == {"shape check", "group check", "deletion check",
                                           "identity check"}, calls
    assert len(calls) >= 12, calls
    # Not one of them ran with the transaction open: it was committed first.
    assert [c for c in calls if c[1]] == []
    # The commits made for the checks lost nothing: everything delivered is in the output.
    delivered = worker.delivered_before + (worker.step.delivered if worker.step else 0)
    assert delivered > 0
    assert len(read_committed(kafka_bootstrap, out.name)) == delivered
