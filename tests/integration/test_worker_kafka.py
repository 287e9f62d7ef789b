"""The worker's Kafka edge on a real broker: configs accepted, error codes as classified.

* a record over a size limit: the real ``MSG_SIZE_TOO_LARGE``, from
  ``produce()`` (client limit) and as the transaction's abortable error
  (topic limit), is ``SUBSTRATE_MISCONFIGURED``;
* a committed position below the log start (``delete_records`` past it) is
  ``POSITIONS_DISCARDED_UNREAD``, while a partition with no committed offset,
  reported by librdkafka with the same code, is not a refusal;
* the consumer configs give task ``i`` partition ``i`` of every topic, and a
  closed static member leaves the group within about its session timeout.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic
from parsley.declarations import application_id
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.changelog import write_records
from workers.kafka_config import consumer_config, producer_config
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    classify,
    map_kafka_errors,
    stop_kind,
    txn_requires_abort,
)
from workers.ledger import DeliveryLedger
from workers.offsets import resolve_offset_reset
from workers.protocol import StopKind


def _process() -> str:
    return f"proc{uuid.uuid4().hex[:8]}"


def _first_error(consumer: Consumer, timeout_s: float = 20.0) -> Message:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is not None:
            return msg
        assert msg is None, f"expected an error before any record, got offset {msg.offset()}"
    raise AssertionError(f"no consumer error within {timeout_s} s")


@pytest.fixture
def produce_ten(kafka_bootstrap: str) -> Iterator[object]:
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})

    def produce(topic: str, n: int = 10) -> None:
        for i in range(n):
            producer.produce(topic, value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0

    yield produce


# -- SUBSTRATE_MISCONFIGURED: a record over a size limit -------------------------------


def test_oversize_record_over_the_producer_limit(
    kafka_bootstrap: str, create_topic: CreateTopic
) -> None:
    topic = create_topic(config={"max.message.bytes": "2000000"}).name
    producer = Producer(producer_config(kafka_bootstrap, "it", _process(), 0, QUIET))
    producer.init_transactions(30)
    producer.begin_transaction()
    with pytest.raises(ParsleyFailClosedError) as info:
        write_records(producer, topic, 0, [(b"held", b"x" * 1_500_000)])  # > message.max.bytes
    assert info.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert info.value.detail.startswith("a record exceeded a size limit")
    assert "MSG_SIZE_TOO_LARGE" in info.value.detail and topic in info.value.detail
    assert isinstance(info.value.__cause__, KafkaException)
    assert info.value.__cause__.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    producer.abort_transaction(30)


def test_oversize_record_over_the_topic_limit(
    kafka_bootstrap: str, create_topic: CreateTopic
) -> None:
    topic = create_topic(config={"max.message.bytes": "2000"}).name
    producer = Producer(producer_config(kafka_bootstrap, "it", _process(), 0, QUIET))
    producer.init_transactions(30)
    ledger = DeliveryLedger()
    producer.begin_transaction()
    write_records(producer, topic, 0, [(b"small", b"ok"), (b"held", b"x" * 5000)], ledger=ledger)
    producer.flush(30)
    with pytest.raises(ParsleyFailClosedError) as from_ledger:
        ledger.check("committing task 0")
    assert from_ledger.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert f"{topic}[0]" in from_ledger.value.detail
    with pytest.raises(KafkaException) as raw:
        producer.commit_transaction(30)
    err = raw.value.args[0]
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE, f"broker answered {err.name()}"
    assert txn_requires_abort(raw.value), "an oversize produce makes the transaction abortable"
    c = classify(raw.value)
    assert (c.kind, c.reason) == (ErrorKind.REFUSAL, Reason.SUBSTRATE_MISCONFIGURED), (
        "abortable, but it would recur identically: a refusal, not a retry"
    )
    assert stop_kind(raw.value) is StopKind.REFUSAL
    with pytest.raises(ParsleyFailClosedError), map_kafka_errors("committing task 0"):
        raise raw.value
    producer.abort_transaction(30)


# -- POSITIONS_DISCARDED_UNREAD vs no committed offset -----------------------------------


def test_committed_position_below_log_start_is_positions_discarded_unread(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic, produce_ten
) -> None:
    topic = create_topic().name
    produce_ten(topic)
    process = _process()
    config = consumer_config(kafka_bootstrap, "it", process, 0, QUIET, session_timeout_ms=3000)
    committer = Consumer({**config, "group.instance.id": f"{process}-setup"})
    committer.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    committer.close()
    deleted = kafka_admin.delete_records([TopicPartition(topic, 0, 5)])
    for future in deleted.values():
        assert future.result(timeout=30).low_watermark == 5
    consumer = Consumer(config)
    try:
        consumer.subscribe([topic])
        msg = _first_error(consumer)
        err = msg.error()
        assert err.code() == KafkaError._AUTO_OFFSET_RESET, f"got {err.name()}: {err.str()}"
        assert classify(err).kind is ErrorKind.OFFSET_RESET
        assert (msg.topic(), msg.partition()) == (topic, 0)
        verdict = resolve_offset_reset(
            consumer, msg.topic(), msg.partition(), group_id=application_id("it", process)
        )
    finally:
        consumer.close()
    assert isinstance(verdict, ParsleyFailClosedError), f"got {verdict!r}"
    assert verdict.reason is Reason.POSITIONS_DISCARDED_UNREAD
    assert f"{topic}-0 committed read position 2 is below the log start 5" in verdict.detail
    assert "2..4" in verdict.detail


def test_no_committed_offset_is_not_a_refusal(
    kafka_bootstrap: str, create_topic: CreateTopic, produce_ten
) -> None:
    topic = create_topic().name
    produce_ten(topic)
    consumer = Consumer(consumer_config(kafka_bootstrap, "it", _process(), 0, QUIET,
                                        session_timeout_ms=3000))
    try:
        consumer.subscribe([topic])
        msg = _first_error(consumer)
        err = msg.error()
        assert err.code() == KafkaError._AUTO_OFFSET_RESET, (
            "librdkafka reports a missing committed offset with the same code"
        )
        verdict = resolve_offset_reset(consumer, topic, 0)
    finally:
        consumer.close()
    assert isinstance(verdict, SubstrateError), f"got {verdict!r}"
    # Not retried in place: only a restart's bootstrap pre-commits a position (workers/offsets.py).
    assert verdict.kind is ErrorKind.RESTART_REQUIRED
    assert stop_kind(verdict) is StopKind.SUBSTRATE


def test_committed_position_beyond_log_end_is_positions_discarded_unread(
    kafka_bootstrap: str, create_topic: CreateTopic, produce_ten
) -> None:
    topic = create_topic().name
    produce_ten(topic, 3)
    process = _process()
    config = consumer_config(kafka_bootstrap, "it", process, 0, QUIET, session_timeout_ms=3000)
    consumer = Consumer(config)
    try:
        # As if the topic were recreated shorter under its name.
        consumer.commit(offsets=[TopicPartition(topic, 0, 50)], asynchronous=False)
        consumer.subscribe([topic])
        msg = _first_error(consumer)
        assert msg.error().code() == KafkaError._AUTO_OFFSET_RESET
        verdict = resolve_offset_reset(consumer, topic, 0)
    finally:
        consumer.close()
    assert isinstance(verdict, ParsleyFailClosedError)
    assert verdict.reason is Reason.POSITIONS_DISCARDED_UNREAD
    assert "beyond the log end 3" in verdict.detail


# -- ownership: partition i of every topic to task i ---------------------------------------


def _assignment(consumer: Consumer) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in consumer.assignment()}


@pytest.mark.slow
def test_range_assignor_hands_partition_i_to_task_i(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic
) -> None:
    a = create_topic(partitions=3).name
    b = create_topic(partitions=2).name
    process = _process()
    consumers = [
        Consumer(consumer_config(kafka_bootstrap, "it", process, task, QUIET, task_count=3,
                                 session_timeout_ms=3000))
        for task in (2, 0, 1)  # join out of order: ids, not arrival, decide
    ]
    expected = [{(a, 2)}, {(a, 0), (b, 0)}, {(a, 1), (b, 1)}]
    try:
        for consumer in consumers:
            consumer.subscribe([a, b])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for consumer in consumers:
                consumer.poll(0.05)
            if [_assignment(c) for c in consumers] == expected:
                break
        assert [_assignment(c) for c in consumers] == expected, "task i must own partition i"
    finally:
        start = time.monotonic()
        for consumer in consumers:
            consumer.close()
    group = application_id("it", process)
    deadline = start + 30
    members = -1
    while time.monotonic() < deadline:
        desc = kafka_admin.describe_consumer_groups([group])[group].result(timeout=10)
        members = len(desc.members)
        if members == 0:
            break
        time.sleep(0.2)
    emptied_s = time.monotonic() - start
    print(f"\nstatic members left the group {emptied_s:.1f} s after close "
          "(session.timeout.ms=3000)")
    assert members == 0, "closed static members must leave the group at their session timeout"
    assert emptied_s < 3 + 7, f"the group took {emptied_s:.1f} s to empty"
