"""Changelog restore and write-back against a real KRaft broker.

The restore reader must finish on empty, marker-terminated (commit and abort)
and compacted partitions, yield exactly the committed records in offset
order, and report its progress (docs/model.md, "The stored form": "Start-time reads").
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable

import pytest
from confluent_kafka import Consumer, IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from devtools.kafka_support import QUIET
from workers.admin import describe_topic
from workers.changelog import (
    RestoreProgress,
    ensure_changelog_topic,
    read_partition,
    write_records,
)
from workers.kafka_config import producer_config, restore_consumer_config
from workers.kafka_errors import ErrorKind, SubstrateError
from workers.ledger import DeliveryLedger
from workers.ordering_store import SqliteOrderingStore

Record = tuple[bytes, bytes | None]


def _name(tag: str) -> str:
    return f"it-{tag}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def bootstrap(kafka_bootstrap: str) -> str:
    return kafka_bootstrap


@pytest.fixture
def admin(kafka_admin: AdminClient) -> AdminClient:
    return kafka_admin


@pytest.fixture
def restore_consumer(kafka_bootstrap: str) -> Iterable[Consumer]:
    consumer = Consumer(
        restore_consumer_config(kafka_bootstrap, "it", _name("restore"), 0, QUIET)
    )
    yield consumer
    consumer.close()


def _txn_producer(bootstrap: str, task: int = 0) -> Producer:
    producer = Producer(producer_config(bootstrap, "it", _name("writer"), task, QUIET))
    producer.init_transactions(30)
    return producer


def _write_txn(
    producer: Producer, topic: str, partition: int, records: list[Record], *, commit: bool = True
) -> None:
    ledger = DeliveryLedger()
    producer.begin_transaction()
    assert write_records(producer, topic, partition, records, ledger=ledger) == len(records)
    # in the log either way, so an abort leaves records and a marker
    assert producer.flush(30) == 0
    ledger.check("test write", queue_empty=True)  # failures only are reported
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _wait_end(admin: AdminClient, topic: str, partition: int, end: int) -> None:
    """Wait until the high watermark is ``end``: the transaction coordinator
    writes markers after ``commit/abort_transaction`` returns, so this makes
    "the last offset is a marker" certain rather than likely."""
    tp = TopicPartition(topic, partition)
    deadline = time.monotonic() + 10
    hwm = -1
    while time.monotonic() < deadline:
        futures = admin.list_offsets({tp: OffsetSpec.latest()},
                                     isolation_level=IsolationLevel.READ_UNCOMMITTED)
        hwm = futures[tp].result().offset
        if hwm == end:
            return
        time.sleep(0.05)
    raise AssertionError(f"{topic}[{partition}] high watermark {hwm}, expected {end}")


def _read(
    consumer: Consumer, topic: str, partition: int, admin: AdminClient
) -> tuple[list[Record], list[RestoreProgress], float]:
    progress: list[RestoreProgress] = []
    start = time.monotonic()
    records = list(read_partition(consumer, admin, topic, partition, on_progress=progress.append,
                                  stall_timeout_s=10))
    return records, progress, time.monotonic() - start


def test_empty_partition_finishes_at_once(admin: AdminClient, restore_consumer: Consumer) -> None:
    topic = _name("empty")
    info, created = ensure_changelog_topic(admin, topic, 3, max_message_bytes=2_000_000)
    assert created
    assert (info.partitions, info.cleanup_policy) == (3, "compact")
    assert info.max_message_bytes == 2_000_000
    assert info.topic_id.int != 0, "a real topic has a non-zero id"
    again, created_again = ensure_changelog_topic(admin, topic, 5)
    assert not created_again and again == info, "an existing changelog is described, never altered"
    records, progress, elapsed = _read(restore_consumer, topic, 1, admin)
    assert records == []
    assert progress[-1].done and progress[-1].end_offset == 0 and progress[-1].records_read == 0
    assert elapsed < 8, f"an empty partition took {elapsed:.1f} s"
    assert describe_topic(admin, _name("absent")) is None


def test_partition_ending_in_commit_marker(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer
) -> None:
    topic = _name("commit")
    ensure_changelog_topic(admin, topic, 2)
    producer = _txn_producer(bootstrap)
    batch1: list[Record] = [(b"a", b"1"), (b"b", b"1")]
    batch2: list[Record] = [(b"a", b"2"), (b"c", None)]
    _write_txn(producer, topic, 1, batch1)
    _write_txn(producer, topic, 1, batch2)
    _wait_end(admin, topic, 1, 6)  # 4 records + 2 commit markers
    records, progress, elapsed = _read(restore_consumer, topic, 1, admin)
    assert records == batch1 + batch2, "committed records, in offset order, tombstones included"
    # 4 records + 2 commit markers: the last offset below the end is a marker.
    assert progress[-1].end_offset == 6 and progress[-1].position >= 6 and progress[-1].done
    assert progress[-1].records_read == 4
    assert elapsed < 8, f"a marker-terminated partition took {elapsed:.1f} s"
    assert _read(restore_consumer, topic, 0, admin)[0] == [], "partition 0 was never written"
    producer.flush(10)


def test_a_read_starts_at_a_log_start_moved_by_delete_records(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer
) -> None:
    # The read assigns the log start it listed (not OFFSET_BEGINNING): records deleted
    # below it are not read, and every record from it on is. A compacted changelog refuses
    # DeleteRecords (POLICY_VIOLATION), so this is a topic with the delete policy.
    topic = _name("deleted-head")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = _txn_producer(bootstrap)
    batch1: list[Record] = [(b"a", b"1"), (b"b", b"1"), (b"c", b"1")]
    batch2: list[Record] = [(b"d", b"2"), (b"e", b"2")]
    _write_txn(producer, topic, 0, batch1)  # offsets 0-2, marker 3
    _write_txn(producer, topic, 0, batch2)  # offsets 4-5, marker 6
    _wait_end(admin, topic, 0, 7)
    futures = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=30)
    for f in futures.values():
        assert f.result(30).low_watermark == 4
    records, progress, _ = _read(restore_consumer, topic, 0, admin)
    assert progress[0].start_offset == 4
    assert records == batch2
    assert progress[-1].done and progress[-1].records_read == 2
    producer.flush(10)


def test_partition_ending_in_abort_marker(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer
) -> None:
    topic = _name("abort")
    ensure_changelog_topic(admin, topic, 1)
    producer = _txn_producer(bootstrap)
    _write_txn(producer, topic, 0, [(b"only", b"aborted")], commit=False)
    _wait_end(admin, topic, 0, 2)
    records, progress, elapsed = _read(restore_consumer, topic, 0, admin)
    assert records == [], "an aborted write is not state"
    assert progress[-1].done and progress[-1].end_offset == 2 and progress[-1].records_read == 0
    assert elapsed < 8
    committed: list[Record] = [(b"k", b"v")]
    _write_txn(producer, topic, 0, committed)
    _write_txn(producer, topic, 0, [(b"k", b"lost"), (b"x", b"lost")], commit=False)
    _wait_end(admin, topic, 0, 7)
    records, progress, elapsed = _read(restore_consumer, topic, 0, admin)
    assert records == committed
    assert progress[-1].end_offset == 7 and progress[-1].done
    assert elapsed < 8, f"an abort-terminated partition took {elapsed:.1f} s"


def test_records_committed_after_the_listing_are_not_read(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer
) -> None:
    topic = _name("later")
    ensure_changelog_topic(admin, topic, 1)
    producer = _txn_producer(bootstrap)
    _write_txn(producer, topic, 0, [(b"a", b"1")])
    reader = read_partition(restore_consumer, admin, topic, 0)
    first = next(reader)  # the end is listed on the first step
    _write_txn(producer, topic, 0, [(b"b", b"2")])
    assert [first, *reader] == [(b"a", b"1")]


@pytest.mark.slow
def test_compacted_partition_latest_per_key(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer, tmp_path
) -> None:
    topic = _name("compact")
    # Roll segments quickly and clean eagerly so the cleaner compacts during the test.
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
        "delete.retention.ms": "100",
    })])[topic].result()
    producer = _txn_producer(bootstrap)
    model: dict[bytes, bytes] = {}
    written = 0
    for round_ in range(6):
        batch: list[Record] = []
        for k in range(50):
            key = b"key-%02d" % k
            value = None if (k + round_) % 7 == 0 else b"v%d-%d" % (round_, k)
            batch.append((key, value))
        _write_txn(producer, topic, 0, batch)
        _write_txn(producer, topic, 0, [(b"key-00", b"aborted")], commit=False)
        written += len(batch)
        for key, value in batch:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        time.sleep(0.15)  # let segment.ms roll the segment
    records, progress, _ = _read(restore_consumer, topic, 0, admin)
    store = SqliteOrderingStore.create(tmp_path)
    assert store.rebuild(records) == len(model)
    assert dict(store.scan()) == model, "restore before compaction differs from the model"
    # Wait (bounded) for the log cleaner to compact away overwritten records.
    deadline = time.monotonic() + 60
    compacted = False
    while time.monotonic() < deadline:
        _write_txn(producer, topic, 0, [(b"roll", b"r")])  # rolls the active segment
        model[b"roll"] = b"r"
        records, progress, elapsed = _read(restore_consumer, topic, 0, admin)
        assert store.rebuild(records) == len(model)
        assert dict(store.scan()) == model, "restore after compaction differs from the model"
        assert progress[-1].done and elapsed < 10
        if len(records) < written:
            compacted = True
            break
        time.sleep(2)
    assert compacted, "the broker's log cleaner never compacted the changelog within 60 s"
    offsets = progress[-1]
    print(f"\ncompacted: {len(records)} records read of {written + 6} written, "
          f"offsets {offsets.start_offset}..{offsets.end_offset}")
    store.close()


def test_progress_callbacks(bootstrap: str, admin: AdminClient, restore_consumer: Consumer) -> None:
    topic = _name("progress")
    ensure_changelog_topic(admin, topic, 1)
    producer = _txn_producer(bootstrap)
    for i in range(5):
        _write_txn(producer, topic, 0, [(b"k%d-%d" % (i, j), b"x" * 100) for j in range(1000)])
    _wait_end(admin, topic, 0, 5005)
    progress: list[RestoreProgress] = []
    reader = read_partition(
        restore_consumer, admin, topic, 0, on_progress=progress.append, batch_size=500
    )
    count = sum(1 for _ in reader)
    assert count == 5000
    assert len(progress) >= 3, "expected a first report, intermediate reports and a last one"
    assert not progress[0].done and progress[0].position == 0 and progress[0].end_offset == 5005
    positions = [p.position for p in progress]
    assert positions == sorted(positions), "progress must never go backwards"
    reads = [p.records_read for p in progress]
    assert reads == sorted(reads)
    assert progress[-1].done and progress[-1].records_read == 5000 and progress[-1].remaining == 0
    assert sum(p.done for p in progress) == 1, "done is reported exactly once"


@pytest.mark.slow
def test_stall_deadline_on_an_open_transaction(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer
) -> None:
    topic = _name("stall")
    ensure_changelog_topic(admin, topic, 1)
    producer = _txn_producer(bootstrap)
    _write_txn(producer, topic, 0, [(b"a", b"1")])
    producer.begin_transaction()
    write_records(producer, topic, 0, [(b"b", b"open")])
    producer.flush(10)  # in the log, above the last stable offset
    start = time.monotonic()
    seen: list[Record] = []
    with pytest.raises(SubstrateError) as info:
        for record in read_partition(restore_consumer, admin, topic, 0, stall_timeout_s=2):
            seen.append(record)
    elapsed = time.monotonic() - start
    assert seen == [(b"a", b"1")]
    assert info.value.kind is ErrorKind.SUBSTRATE_TRANSIENT
    assert "made no progress for 2 s" in info.value.detail and topic in info.value.detail
    # The command it names runs as printed once the servers are filled in.
    assert (f"kafka-transactions --bootstrap-server <servers> describe-producers --topic {topic}"
            in info.value.detail)
    assert 2 <= elapsed < 10, f"stall deadline of 2 s fired after {elapsed:.1f} s"
    producer.abort_transaction(30)


def test_changelog_config_is_readable(admin: AdminClient) -> None:
    topic = _name("cfg")
    ensure_changelog_topic(admin, topic, 2, max_message_bytes=123_456)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"
    assert configs["max.message.bytes"].value == "123456"
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 2


def test_held_message_survives_a_restore_through_the_changelog(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer, tmp_path
) -> None:
    """Engine deltas written with write_records, read back with read_partition into a
    fresh sqlite store, give a new engine the same held message, delivered once its
    cause arrives (the worker's restart path, minus the consumer)."""
    from uuid import uuid4

    from parsley.engine.channel import ChannelId, ReceivedMessage
    from parsley.engine.engine import ProcessEngine
    from parsley.wire import CAUSES_HEADER, encode_causes

    a, b = ChannelId(uuid4(), 0), ChannelId(uuid4(), 0)
    topic = _name("ordering")
    ensure_changelog_topic(admin, topic, 2)
    store1 = SqliteOrderingStore.create(tmp_path / "first")
    engine1 = ProcessEngine(store1, received=[a, b])
    engine1.start({a: 0, b: 0})
    derived = ReceivedMessage(b, 0, 1_000, b"k", b"derived",
                              ((CAUSES_HEADER, encode_causes({a: 0})), ("app", b"1")))
    engine1.receive(derived)
    assert engine1.deliver_next() is None, "b@0 must wait for its cause a@0"
    deltas = engine1.take_deltas()
    assert any(k.startswith(b"h") for k, _ in deltas), "the held body must be a delta"
    producer = _txn_producer(bootstrap, task=1)
    _write_txn(producer, topic, 1, list(deltas))

    records, _, _ = _read(restore_consumer, topic, 1, admin)
    store2 = SqliteOrderingStore.create(tmp_path / "second")
    store2.rebuild(records)
    assert list(store2.scan()) == list(store1.scan()), "restored store differs from the writer's"
    engine2 = ProcessEngine(store2, received=[a, b])
    engine2.start({a: 0, b: 1})
    assert engine2.held_count() == 1
    engine2.receive(ReceivedMessage(a, 0, 999, None, b"cause", ()))
    first, second = engine2.deliver_next(), engine2.deliver_next()
    assert first is not None and (first.channel, first.position) == (a, 0)
    assert second is not None and (second.channel, second.position, second.value) == (
        b, 0, b"derived"
    ), "the held message must come back from the changelog, after its cause"
    assert second.headers == (("app", b"1"),)
    store1.close()
    store2.close()


@pytest.mark.slow
def test_restore_throughput_of_100k_records(
    bootstrap: str, admin: AdminClient, restore_consumer: Consumer, tmp_path
) -> None:
    topic = _name("bulk")
    ensure_changelog_topic(admin, topic, 1)
    producer = _txn_producer(bootstrap)
    n = 100_000
    producer.begin_transaction()
    write_records(producer, topic, 0, ((b"h%08d" % i, b"x" * 120) for i in range(n)))
    producer.commit_transaction(60)
    _wait_end(admin, topic, 0, n + 1)
    store = SqliteOrderingStore.create(tmp_path)
    start = time.monotonic()
    loaded = store.rebuild(read_partition(restore_consumer, admin, topic, 0))
    elapsed = time.monotonic() - start
    print(f"\nrestore of {n} changelog records into sqlite: {elapsed:.2f} s "
          f"({n / elapsed:,.0f} records/s)")
    assert loaded == n
    store.close()
