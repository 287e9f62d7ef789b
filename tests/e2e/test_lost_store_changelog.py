"""A lost store changelog is refused, never silently reset (docs/failing-closed.md,
``ORDERING_STATE_LOST``; docs/runbooks.md).

A process counts its deliveries in a Store and relays each count. Its store changelog
``<prefix>-<process>-<store>-changelog`` is deleted:

* while the process is stopped: the next ``Parsley.start`` refuses ``ORDERING_STATE_LOST``
  naming the store changelog, and creates nothing;
* while the process runs: the worker's rebuild (abort-and-rebuild, or a respawn) refuses
  ``ORDERING_STATE_LOST`` too, rather than restoring the store empty.

The verdict is an independent ``read_committed`` read of the output: every count is
delivered once, in order 1..n, and none restarts at 1.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET, delete_topic, describe_topic
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Reason, Store
from parsley.declarations import store_changelog
from parsley.refusals import ParsleyFailClosedError
from parsley.serdes import BYTES, JSON, STRING
from tests.purge import purge_to

INTERVAL_MS = 300


def _counting(source: str, out_name: str) -> Process:
    counts = Store("counts", STRING, JSON)
    out = Channel(out_name, STRING, JSON)

    def handle(delivery: Any, state: Any) -> Effects:
        n = (state.get(counts, "n") or 0) + 1
        return (Effects.builder().put(counts, "n", n)
                .send(out, "n", {"off": delivery.offset, "n": n}).build())

    return (Process("counter").receives(Channel(source, BYTES, BYTES), handle)
            .sends(out).stores(counts))


def _produce(bootstrap: str, topic: str, first: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i in range(first, first + count):
        producer.produce(topic, key=b"k", value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0


def _counts(bootstrap: str, topic: str) -> list[int]:
    return [json.loads(r.value or b"null")["n"] for r in read_committed(bootstrap, topic)]


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _config(bootstrap: str, tmp_path: Path) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"lost-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=INTERVAL_MS)


@pytest.mark.slow
def test_store_changelog_deleted_while_stopped_refuses_the_next_start(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path)
    process = _counting(src.name, out.name)
    changelog = store_changelog(config.application_id_prefix, "counter", "counts")
    _produce(kafka_bootstrap, src.name, 0, 10)
    with Parsley.start(config, process) as parsley:
        _wait(lambda: len(_counts(kafka_bootstrap, out.name)) == 10, 90, "ten counts")
        assert parsley.close(deadline_s=20).clean
    assert _counts(kafka_bootstrap, out.name) == list(range(1, 11))
    delete_topic(kafka_admin, changelog)
    _produce(kafka_bootstrap, src.name, 10, 10)

    with pytest.raises(ParsleyFailClosedError) as excinfo:
        with Parsley.start(config, process) as again:
            # Without the refusal the process runs on an empty store: show what it does.
            time.sleep(15)
            again.close(deadline_s=20)
        print("ran without a refusal; counts:", _counts(kafka_bootstrap, out.name))
    assert excinfo.value.reason is Reason.ORDERING_STATE_LOST, excinfo.value
    detail = excinfo.value.detail
    assert changelog in detail and "does not exist" in detail, detail
    assert "runbooks" in detail or "reset" in detail, detail
    # The refused start created nothing: the store changelog stays absent.
    with pytest.raises(Exception, match="UNKNOWN_TOPIC"):
        describe_topic(kafka_admin, changelog)
    # Independent verdict: the ten counts, once each, and no count restarted at 1.
    assert _counts(kafka_bootstrap, out.name) == list(range(1, 11))


@pytest.mark.slow
def test_store_changelog_deleted_while_running_refuses_at_the_rebuild(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path)
    changelog = store_changelog(config.application_id_prefix, "counter", "counts")
    _produce(kafka_bootstrap, src.name, 0, 10)
    with Parsley.start(config, _counting(src.name, out.name), restart="transient") as parsley:
        _wait(lambda: len(_counts(kafka_bootstrap, out.name)) == 10, 90, "ten counts")
        delete_topic(kafka_admin, changelog)
        _produce(kafka_bootstrap, src.name, 10, 10)
        started = time.monotonic()
        stopped = parsley.await_stopped(timeout=120)
        took = time.monotonic() - started
        st = parsley.status()["counter"]
        counts = _counts(kafka_bootstrap, out.name)
        parsley.close(deadline_s=20)
    print(f"stopped={stopped} after {took:.1f} s: {st.state} {st.refusal_reason} "
          f"{st.failure_detail}; counts {counts}")
    assert stopped, f"still {st.state} 120 s after the deletion; counts {counts}"
    assert st.state is ProcessState.STOPPED
    assert st.refusal_reason is Reason.ORDERING_STATE_LOST, (st.refusal_reason,
                                                             st.failure_detail)
    assert changelog in (st.failure_detail or ""), st.failure_detail
    # Independent verdict: counts run 1..n once each; nothing restarted from an empty store.
    assert counts == list(range(1, len(counts) + 1)), counts
    assert len(counts) >= 10


@pytest.mark.slow
def test_store_changelog_purged_or_of_another_width_refuses_the_start(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    from confluent_kafka.admin import (
        NewPartitions,
    )

    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path)
    process = _counting(src.name, out.name)
    changelog = store_changelog(config.application_id_prefix, "counter", "counts")
    _produce(kafka_bootstrap, src.name, 0, 5)
    with Parsley.start(config, process) as parsley:
        _wait(lambda: len(_counts(kafka_bootstrap, out.name)) == 5, 90, "five counts")
        assert parsley.close(deadline_s=20).clean
    # cleanup.policy changed away from compact (a compacted topic refuses DeleteRecords),
    # then records deleted up to the log end: the partition's log start moves past 0.
    _low, high = _watermarks(kafka_bootstrap, changelog)
    purge_to(kafka_admin, changelog, 0, high, policy="delete")
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        Parsley.start(config, process).close(deadline_s=20)
    assert excinfo.value.reason is Reason.ORDERING_STATE_LOST, excinfo.value
    assert f"partition 0 of this process's store changelog {changelog}" in \
        excinfo.value.detail, excinfo.value.detail
    assert f"starts at offset {high}" in excinfo.value.detail, excinfo.value.detail
    # A store changelog with a partition per task too many: TASK_WIDTH_CHANGED.
    kafka_admin.create_partitions([NewPartitions(changelog, 2)])[changelog].result(timeout=35)
    _wait(lambda: describe_topic(kafka_admin, changelog).partitions == 2, 30, "two partitions")
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        Parsley.start(config, process).close(deadline_s=20)
    assert excinfo.value.reason is Reason.TASK_WIDTH_CHANGED, excinfo.value
    assert changelog in excinfo.value.detail and "2 partition(s)" in excinfo.value.detail
    # Independent verdict: the five counts, once each.
    assert _counts(kafka_bootstrap, out.name) == list(range(1, 6))


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks-unused", **QUIET})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        return int(low), int(high)
    finally:
        consumer.close()
