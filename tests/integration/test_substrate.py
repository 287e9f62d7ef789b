"""The Kafka mechanisms the runtime stands on, proven against a real broker.

Observed with confluent-kafka 2.16.1 (librdkafka 2.16) on Apache Kafka 4.3.1 and asserted
below, so the worker can rely on them:

- ``describe_topics`` gives a non-zero topic id (``confluent_kafka.Uuid``); a topic
  deleted and recreated under its name gets a different id. Right after deletion, and
  for a moment after a recreate, describing answers ``UNKNOWN_TOPIC_OR_PART`` (3).
- Fencing: once a second producer with the same ``transactional.id`` has run
  ``init_transactions``, the first one's ``commit_transaction`` raises ``KafkaException``
  with code ``_FENCED`` (-144), ``fatal() is True``; it cannot commit or begin again.
- ``auto.offset.reset=error`` and the committed position deleted by ``delete_records``:
  ``poll()`` returns a message whose ``error()`` is ``_AUTO_OFFSET_RESET`` (-140), not
  fatal, not retriable, text "fetch failed due to requested offset not available on the
  broker: Broker: Offset out of range", with ``topic()``/``partition()`` set and
  ``offset()`` the position that could not be fetched. The worker classifies it
  ``POSITIONS_DISCARDED_UNREAD``.
  A group with NO committed offset surfaces the same code (-140, text "no previously
  committed offset available"). Tell them apart by the committed offset: present and
  below ``list_offsets`` earliest = positions discarded unread; absent = never committed.
- A record larger than the topic's ``max.message.bytes``: the delivery report's error
  is ``MSG_SIZE_TOO_LARGE`` (10), not fatal, not retriable; in a transaction
  ``commit_transaction`` then raises code 10 with ``txn_requires_abort() is True``.
  The worker classifies it ``SUBSTRATE_MISCONFIGURED``. After aborting, the same
  producer's next commit fails once with ``OUT_OF_ORDER_SEQUENCE_NUMBER`` (45,
  abortable, not fatal: the rejected record used a sequence number); the one after works.
- ``list_offsets`` earliest/latest give the log start and end; aborted transactions
  leave offsets a ``read_committed`` consumer never sees (markers and aborted records).
  ``commit_transaction``/``abort_transaction`` return before the control markers are
  in the partitions: the end offset moves a moment later (``ks.wait_end_offset``).

Producers use ``partitioner=murmur2_random`` (the Java client's default: docs/failing-closed.md,
"Cross-partition causes").
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from devtools import kafka_support as ks
from devtools.kafka_support import QUIET, CreateTopic, UniqueNames

pytestmark = pytest.mark.broker

TXN_TIMEOUT_S = 60.0


def _producer(bootstrap: str, **extra: object) -> Producer:
    return Producer(
        {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random", **QUIET, **extra}
    )


def _consumer(bootstrap: str, group: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            **QUIET,
            **extra,
        }
    )


def _drain(consumer: Consumer, want: int, timeout_s: float = 30.0) -> list[Message]:
    """Poll until ``want`` data messages arrived (errors fail the test)."""
    got: list[Message] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append(msg)
    return got


def _first_error(consumer: Consumer, timeout_s: float = 30.0) -> Message:
    """Poll until a message carrying an error arrives; data messages fail the test."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        assert msg.error() is not None, f"unexpected record at offset {msg.offset()}"
        return msg
    raise AssertionError(f"no error surfaced within {timeout_s} s")


def _offsets(admin: AdminClient, tp: TopicPartition) -> tuple[int, int]:
    """(earliest, latest) from list_offsets."""
    result = []
    for spec in (OffsetSpec.earliest(), OffsetSpec.latest()):
        futures = admin.list_offsets({tp: spec}, request_timeout=10)
        result.append(futures[tp].result(timeout=15).offset)
    return result[0], result[1]


def _produce_all(producer: Producer, topic: str, values: list[bytes], **kw: object) -> None:
    errors: list[KafkaError] = []

    def report(err: KafkaError | None, _msg: Message) -> None:
        if err is not None:
            errors.append(err)

    for value in values:
        producer.produce(topic, value=value, on_delivery=report, **kw)
    assert producer.flush(30) == 0
    assert errors == []


def test_topic_ids_are_nonzero_and_change_on_recreate(
    kafka_admin: AdminClient, topic_name: str
) -> None:
    first = ks.create_topic(kafka_admin, topic_name, partitions=2)
    assert first.topic_id.int != 0
    assert ks.describe_topic(kafka_admin, topic_name).topic_id == first.topic_id

    ks.delete_topic(kafka_admin, topic_name)
    with pytest.raises(KafkaException) as gone:
        ks.describe_topic(kafka_admin, topic_name)
    assert gone.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    second = ks.create_topic(kafka_admin, topic_name, partitions=2)
    assert second.topic_id.int != 0
    assert second.topic_id != first.topic_id
    kafka_admin.delete_topics([topic_name])


def test_transactional_consume_transform_produce(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames,
) -> None:
    source = create_topic(partitions=1).name
    sink = create_topic(partitions=1).name
    group = unique_names.group()
    _produce_all(_producer(kafka_bootstrap), source, [b"a", b"b", b"c"])

    consumer = _consumer(kafka_bootstrap, group, **{"auto.offset.reset": "error"})
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = _producer(kafka_bootstrap, **{"transactional.id": unique_names.transactional_id()})
    producer.init_transactions(TXN_TIMEOUT_S)
    try:
        inputs = _drain(consumer, 3)
        assert [m.value() for m in inputs] == [b"a", b"b", b"c"]
        producer.begin_transaction()
        for msg in inputs:
            producer.produce(sink, value=msg.value().upper(), key=msg.key())
        next_position = inputs[-1].offset() + 1
        producer.send_offsets_to_transaction(
            [TopicPartition(source, 0, next_position)],
            consumer.consumer_group_metadata(),
            TXN_TIMEOUT_S,
        )
        producer.commit_transaction(TXN_TIMEOUT_S)
    finally:
        consumer.close()

    committed = kafka_admin_committed(kafka_bootstrap, group, source)
    assert committed == 3

    reader = _consumer(kafka_bootstrap, unique_names.group("reader"))
    reader.assign([TopicPartition(sink, 0, 0)])
    try:
        assert [m.value() for m in _drain(reader, 3)] == [b"A", b"B", b"C"]
    finally:
        reader.close()


def kafka_admin_committed(bootstrap: str, group: str, topic: str) -> int | None:
    """The group's committed offset for partition 0 of ``topic`` (None when none).

    Read through a Consumer's ``committed()`` (see devtools.devbroker.warm_up for why
    not the AdminClient).
    """
    probe = _consumer(bootstrap, group)
    try:
        (tp,) = probe.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        probe.close()
    return None if tp.offset < 0 else tp.offset


def test_aborted_records_are_invisible_to_read_committed(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames,
) -> None:
    topic = create_topic().name
    producer = _producer(kafka_bootstrap, **{"transactional.id": unique_names.transactional_id()})
    producer.init_transactions(TXN_TIMEOUT_S)
    for value, commit in ((b"kept-1", True), (b"aborted", False), (b"kept-2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value)
        producer.flush(30)
        if commit:
            producer.commit_transaction(TXN_TIMEOUT_S)
        else:
            producer.abort_transaction(TXN_TIMEOUT_S)

    # 3 records + 3 control markers (commit, abort, commit); the last marker is written
    # after commit_transaction returns, so wait for it.
    assert ks.wait_end_offset(kafka_admin, TopicPartition(topic, 0), 6) == 6
    earliest, latest = _offsets(kafka_admin, TopicPartition(topic, 0))
    assert (earliest, latest) == (0, 6)

    reader = _consumer(kafka_bootstrap, unique_names.group())
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        got = _drain(reader, 2)
        assert [m.value() for m in got] == [b"kept-1", b"kept-2"]
        offsets = [m.offset() for m in got]
        assert offsets == [0, 4]  # 1 = commit marker, 2 = aborted record, 3 = abort marker
        # No more records; the consumer steps over the trailing commit marker to the end.
        deadline = time.monotonic() + 20
        position = -1
        while position != latest and time.monotonic() < deadline:
            assert reader.poll(0.5) is None
            (tp,) = reader.position([TopicPartition(topic, 0)])
            position = tp.offset
        assert position == latest
    finally:
        reader.close()

    uncommitted = _consumer(kafka_bootstrap, unique_names.group("ru"),
                            **{"isolation.level": "read_uncommitted"})
    uncommitted.assign([TopicPartition(topic, 0, 0)])
    try:
        assert [m.value() for m in _drain(uncommitted, 3)] == [b"kept-1", b"aborted", b"kept-2"]
    finally:
        uncommitted.close()


@pytest.mark.slow
def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    transactional_id: str, group_id: str,
) -> None:
    topic = create_topic().name
    config = {"transactional.id": transactional_id}
    zombie = _producer(kafka_bootstrap, **config)
    zombie.init_transactions(TXN_TIMEOUT_S)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    assert zombie.flush(30) == 0

    successor = _producer(kafka_bootstrap, **config)
    successor.init_transactions(TXN_TIMEOUT_S)  # aborts the zombie's open transaction

    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(TXN_TIMEOUT_S)
    err = fenced.value.args[0]
    assert err.code() == KafkaError._FENCED
    assert err.fatal()
    with pytest.raises(KafkaException) as again:
        zombie.begin_transaction()
    assert again.value.args[0].code() == KafkaError._FENCED

    successor.begin_transaction()
    successor.produce(topic, value=b"successor")
    successor.commit_transaction(TXN_TIMEOUT_S)
    reader = _consumer(kafka_bootstrap, group_id)
    reader.assign([TopicPartition(topic, 0, 0)])
    try:
        assert [m.value() for m in _drain(reader, 1)] == [b"successor"]
        assert reader.poll(2.0) is None
    finally:
        reader.close()


def test_records_deleted_past_committed_position_surface_auto_offset_reset(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames,
) -> None:
    topic = create_topic().name
    tp0 = TopicPartition(topic, 0)
    _produce_all(_producer(kafka_bootstrap), topic, [b"0", b"1", b"2", b"3"])
    group = unique_names.group()
    worker_settings = {"auto.offset.reset": "error", "session.timeout.ms": 6000}

    first = _consumer(kafka_bootstrap, group, **worker_settings)
    first.assign([TopicPartition(topic, 0, 0)])
    try:
        assert [m.value() for m in _drain(first, 1)] == [b"0"]
        first.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        first.close()

    futures = kafka_admin.delete_records([TopicPartition(topic, 0, 3)], request_timeout=30)
    deleted = futures[tp0].result(timeout=35)
    assert deleted.low_watermark == 3
    earliest, latest = _offsets(kafka_admin, tp0)
    assert (earliest, latest) == (3, 4)

    committed = kafka_admin_committed(kafka_bootstrap, group, topic)
    assert committed == 1 and committed < earliest  # positions 1 and 2 discarded unread

    restarted = _consumer(kafka_bootstrap, group, **worker_settings)
    restarted.subscribe([topic])
    try:
        msg = _first_error(restarted)
    finally:
        restarted.close()
    err = msg.error()
    assert err.code() == KafkaError._AUTO_OFFSET_RESET
    assert not err.fatal() and not err.retriable()
    assert "Offset out of range" in err.str()
    assert (msg.topic(), msg.partition(), msg.offset()) == (topic, 0, 1)

    # A group that never committed gets the same code: only committed-vs-earliest tells.
    fresh_group = unique_names.group("never-committed")
    fresh = _consumer(kafka_bootstrap, fresh_group, **worker_settings)
    fresh.subscribe([topic])
    try:
        fresh_msg = _first_error(fresh)
    finally:
        fresh.close()
    assert fresh_msg.error().code() == KafkaError._AUTO_OFFSET_RESET
    assert (fresh_msg.topic(), fresh_msg.partition()) == (topic, 0)
    assert kafka_admin_committed(kafka_bootstrap, fresh_group, topic) is None


def test_list_offsets_earliest_and_latest(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
) -> None:
    info = create_topic(partitions=2)
    topic = info.name
    assert _offsets(kafka_admin, TopicPartition(topic, 0)) == (0, 0)
    _produce_all(_producer(kafka_bootstrap), topic, [b"x"] * 5, partition=1)
    assert _offsets(kafka_admin, TopicPartition(topic, 1)) == (0, 5)
    assert _offsets(kafka_admin, TopicPartition(topic, 0)) == (0, 0)
    futures = kafka_admin.delete_records([TopicPartition(topic, 1, 2)], request_timeout=30)
    futures[TopicPartition(topic, 1)].result(timeout=35)
    assert _offsets(kafka_admin, TopicPartition(topic, 1)) == (2, 5)


def test_record_over_max_message_bytes_surfaces_msg_size_too_large(
    kafka_bootstrap: str, create_topic: CreateTopic, transactional_id: str,
) -> None:
    topic = create_topic(config={"max.message.bytes": "1024"}).name
    big = b"x" * 4096

    reports: list[KafkaError | None] = []
    plain = _producer(kafka_bootstrap, **{"enable.idempotence": True})
    plain.produce(topic, value=big, on_delivery=lambda err, _m: reports.append(err))
    plain.flush(30)
    assert len(reports) == 1 and reports[0] is not None
    assert reports[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert not reports[0].fatal() and not reports[0].retriable()

    reports.clear()
    txn = _producer(kafka_bootstrap, **{"transactional.id": transactional_id})
    txn.init_transactions(TXN_TIMEOUT_S)
    txn.begin_transaction()
    txn.produce(topic, value=big, on_delivery=lambda err, _m: reports.append(err))
    txn.flush(30)
    assert [r.code() for r in reports if r is not None] == [KafkaError.MSG_SIZE_TOO_LARGE]
    with pytest.raises(KafkaException) as failed:
        txn.commit_transaction(TXN_TIMEOUT_S)
    err = failed.value.args[0]
    assert err.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert err.txn_requires_abort() and not err.fatal()
    txn.abort_transaction(TXN_TIMEOUT_S)

    # librdkafka 2.16 counted the rejected record's sequence number: the next transaction
    # fails once with OUT_OF_ORDER_SEQUENCE_NUMBER (abortable, not fatal); after aborting
    # that one too, the producer commits again. (The worker stops on the refusal anyway.)
    txn.begin_transaction()
    txn.produce(topic, value=b"small")
    with pytest.raises(KafkaException) as skipped:
        txn.commit_transaction(TXN_TIMEOUT_S)
    after = skipped.value.args[0]
    assert after.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert after.txn_requires_abort() and not after.fatal()
    txn.abort_transaction(TXN_TIMEOUT_S)
    txn.begin_transaction()
    txn.produce(topic, value=b"small")
    txn.commit_transaction(TXN_TIMEOUT_S)
