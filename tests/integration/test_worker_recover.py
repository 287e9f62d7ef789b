"""The delivered count survives an abort and rebuild without counting twice.

An abortable error aborts the open transaction, rebuilds the state from the
changelogs and rewinds to the committed offsets: the aborted transaction's
deliveries are made again. An in-process worker on the real broker delivers N
records in one open transaction (commit interval of a minute, no shape or deletion check),
is sent through :meth:`workers.main.Worker._recover` as an abortable error would,
delivers them again and stops cleanly: its status counts N deliveries, not 2N,
and the output holds each record once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import make_spec, read_committed, relay_setup, run_to_clean_stop
from workers.kafka_errors import ErrorKind, SubstrateError
from workers.main import Worker

N = 30


@pytest.mark.slow
def test_an_aborted_transaction_s_deliveries_are_not_counted_after_the_rebuild(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    relay = relay_setup(kafka_admin, create_topic, unique_names, "recover", partitions=1)
    process, inp, out, topics, prefix = (relay.process, relay.inp, relay.out,
                                         relay.topics, relay.prefix)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(N):
        producer.produce(inp.name, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    spec = make_spec(process, prefix, kafka_bootstrap, "tcp://127.0.0.1:1", str(tmp_path),
                     topics, status_interval_ms=100, commit_interval_ms=60_000)

    recovered = False
    recovering = False
    deadline = time.monotonic() + 60.0
    worker: Worker
    first: object = None

    def should_stop() -> bool:
        nonlocal recovered, recovering, first
        if recovering:
            return False  # the recovery's own stop checks: no stop is asked meanwhile
        worker.next_shape_check = float("inf")  # no commit before a shape check
        worker.next_group_check = float("inf")  # nor before a group check
        worker.next_received_check = float("inf")  # nor before a deletion check
        step = worker.step
        if step is None or step.delivered < N:
            return time.monotonic() > deadline
        if not recovered:
            assert worker.txn.open and step.delivered_committed == 0
            recovered, recovering, first = True, True, step
            try:
                worker._recover(SubstrateError(ErrorKind.ABORTABLE, "a test's abortable error"))
            finally:
                recovering = False
            return False
        assert step is not first, "the rebuild made a new step"
        return True

    worker = Worker(spec, None, should_stop)
    run_to_clean_stop(worker)

    assert recovered
    assert worker.status_fields()["delivered"] == N
    # commit_transaction returns once the coordinator prepared the commit; the markers
    # that move the last stable offset reach the partition a moment later.
    deadline = time.monotonic() + 30
    while len(seen := read_committed(kafka_bootstrap, out.name)) < N \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(seen) == N
