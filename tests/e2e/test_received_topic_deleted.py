"""A received topic deleted while the process runs is noticed within a minute
(docs/failing-closed.md, ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``; docs/runbooks.md).

A process receives ``a`` and ``b`` and relays each delivery. A record on ``b`` names a
cause on ``a`` that is not delivered yet (beyond ``a``'s end), so it is held. Then:

* ``b`` is deleted: messages from it are held and can never be delivered in order, so
  the process refuses ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` naming ``b``
  (name, TopicId as ``kafka-topics`` prints it, partition), the held count and the remedy;
* ``a`` is deleted: nothing is held on it, so the channel settles to its end, the held
  record on ``b`` is delivered, and the task stops without a refusal, naming ``a``.

The verdict is an independent ``read_committed`` read of the output.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET, delete_topic
from devtools.worker_support import read_committed
from parsley import Channel, ChannelId, Effects, Process, Reason
from parsley.engine.channel import kafka_topic_id
from parsley.serdes import BYTES
from parsley.wire import CAUSES_HEADER, encode_causes
from tests.seed_shapes import assert_seed_shape

INTERVAL_MS = 300


def _joiner(a: str, b: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, delivery.value).build()

    return (Process("joiner").receives(Channel(a, BYTES, BYTES), handle)
            .receives(Channel(b, BYTES, BYTES), handle).sends(out))


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _held(parsley: Parsley) -> int:
    st = parsley.status()["joiner"]
    return sum(h.count for t in st.tasks for h in t.held)


def _hold_one_on_b(kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
                   partitions: int = 1, commit_interval_ms: int = 100,
                   ) -> tuple[Any, Any, Any, Parsley]:
    a = create_topic(partitions=partitions)
    b = create_topic(partitions=partitions)
    out = create_topic(partitions=partitions)
    config = ParsleyConfig(kafka_bootstrap, f"del-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=INTERVAL_MS,
                           commit_interval_ms=commit_interval_ms)
    parsley = Parsley.start(config, _joiner(a.name, b.name, out.name))
    _wait(lambda: parsley.status()["joiner"].state is ProcessState.RUNNING
          and len(parsley.status()["joiner"].tasks) == partitions, 60, "RUNNING")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    # Its cause is position 5 of a, which holds nothing yet: held.
    producer.produce(b.name, key=b"k", value=b"b0", partition=0,
                     headers=[(CAUSES_HEADER, encode_causes({ChannelId(a.topic_id, 0): 5}))])
    assert producer.flush(30) == 0
    _wait(lambda: _held(parsley) == 1, 60, "the record on b held")
    return a, b, out, parsley


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 2])
def test_deleting_a_topic_with_held_messages_refuses_within_a_minute(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
    partitions: int,
) -> None:
    # With two tasks, the group may also rebalance away from the deleted topic's
    # partitions before the running check: the refusal must come either way.
    _a, b, out, parsley = _hold_one_on_b(kafka_bootstrap, create_topic, tmp_path, partitions)
    try:
        delete_topic(kafka_admin, b.name)
        started = time.monotonic()
        stopped = parsley.await_stopped(timeout=90)
        took = time.monotonic() - started
        st = parsley.status()["joiner"]
    finally:
        parsley.close(deadline_s=20)
    print(f"stopped={stopped} after {took:.1f} s: {st.state} {st.refusal_reason} "
          f"{st.failure_detail}")
    assert stopped, f"still {st.state} 90 s after deleting {b.name}"
    assert st.refusal_reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, (
        st.refusal_reason, st.failure_detail)
    detail = st.failure_detail or ""
    assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, detail)
    for part in (f"1 received message(s) from {ChannelId(b.topic_id, 0)} remain undelivered",
                 f"topic '{b.name}' partition 0, topic id {kafka_topic_id(b.topic_id)}",
                 "docs/runbooks.md"):
        assert part in detail, (part, detail)
    # Independent verdict: nothing was delivered out of causal order.
    assert read_committed(kafka_bootstrap, out.name, range(partitions)) == []


@pytest.mark.slow
def test_deleting_a_topic_whose_held_read_is_not_committed_yet_refuses(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    # A long commit interval keeps the held record's read in the open transaction (the
    # transaction closes after 5 s) while b is deleted: the commit then fails on b's
    # position, the task aborts and rebuilds from the committed state, which never held
    # the record. The task read it, so the deletion lost an undelivered message: the
    # refusal must come, not a settled stop.
    _a, b, out, parsley = _hold_one_on_b(kafka_bootstrap, create_topic, tmp_path,
                                         commit_interval_ms=60_000)
    try:
        delete_topic(kafka_admin, b.name)
        stopped = parsley.await_stopped(timeout=90)
        st = parsley.status()["joiner"]
    finally:
        parsley.close(deadline_s=20)
    print(f"stopped={stopped}: {st.state} {st.refusal_reason} {st.failure_detail}")
    assert stopped, f"still {st.state} 90 s after deleting {b.name}"
    assert st.refusal_reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, (
        st.refusal_reason, st.failure_detail)
    detail = st.failure_detail or ""
    print(f"refused through the {'uncommitted read' if 'never committed' in detail else 'held'}"
          " path")
    # Through either path (the open transaction may still commit before the deletion
    # lands), the refusal names the message, the topic and the runbook.
    assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, detail)
    for part in (f"1 received message(s) from {ChannelId(b.topic_id, 0)} remain undelivered",
                 f"topic '{b.name}' partition 0, topic id {kafka_topic_id(b.topic_id)}",
                 "docs/runbooks.md"):
        assert part in detail, (part, detail)
    if "never committed" in detail:
        assert "offsets 0 to 0 of" in detail, detail
    assert read_committed(kafka_bootstrap, out.name) == []


@pytest.mark.slow
def test_deleting_a_topic_nothing_waits_on_settles_it_and_stops_without_refusal(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    a, _b, out, parsley = _hold_one_on_b(kafka_bootstrap, create_topic, tmp_path)
    try:
        delete_topic(kafka_admin, a.name)
        started = time.monotonic()
        stopped = parsley.await_stopped(timeout=90)
        took = time.monotonic() - started
        st = parsley.status()["joiner"]
    finally:
        parsley.close(deadline_s=20)
    print(f"stopped={stopped} after {took:.1f} s: {st.state} {st.refusal_reason} "
          f"{st.failure_detail}")
    assert stopped, f"still {st.state} 90 s after deleting {a.name}"
    assert st.refusal_reason is None, (st.refusal_reason, st.failure_detail)
    detail = st.failure_detail or ""
    assert a.name in detail and kafka_topic_id(a.topic_id) in detail, detail
    # Independent verdict: a settled to its end, so the held record on b was delivered, once.
    assert [r.value for r in read_committed(kafka_bootstrap, out.name)] == [b"b0"]
