"""Changelog partitions: restore a task's state from one, write back to one, create the topic.

* :func:`read_partition` reads partition ``i`` of a changelog topic
  ``read_committed`` from its start to the end listed when the read began,
  yielding ``(key, value-or-None)`` (``None`` is a tombstone), and reports
  :class:`RestoreProgress` through a callback (docs/model.md, "The stored form":
  read ``read_committed`` to the end; progress is reported in status).
* :func:`write_records` produces a batch to partition ``i`` explicitly, inside
  the caller's open transaction (each task's state lives in its own partition: docs/model.md, "The
  stored form").
* :func:`ensure_changelog_topic` creates a compacted changelog topic with one
  partition per task, replicated as :func:`changelog_replication` says (a create,
  kept beside the changelog's other writes; the describes and listings it and the
  reads use are :mod:`workers.admin`'s).

Sources: docs/model.md, "The stored form" ("Start-time reads of the changelog":
``read_committed`` up to the ends listed read-uncommitted, fail loudly after
30 s without progress), docs/operations.md, "Running" (admin calls 30 s) and
"Production clusters" (replication and ``min.insync.replicas``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from workers.admin import (
    ADMIN_TIMEOUT_S,
    TopicInfo,
    answer,
    describe_topic,
    leaders_known,
    offset_bounds,
)
from workers.authorization import Grant
from workers.calls import awaiting, call, pause
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    map_kafka_errors,
    partition_eof,
    to_exception,
    topic_already_exists,
)
from workers.ledger import DeliveryLedger

__all__ = [
    "DEFAULT_STALL_TIMEOUT_S",
    "RestoreProgress",
    "broker_count",
    "changelog_replication",
    "ensure_changelog_topic",
    "read_partition",
    "write_records",
]

DEFAULT_STALL_TIMEOUT_S: Final = 30.0
"""A restore that makes no progress for this long fails (docs/model.md, "The stored form")."""

METADATA_TIMEOUT_S: Final = 5.0
"""Timeout of the restore consumer's metadata request before a read, s (its watchdog bound,
``list_topics``, is 5 s more)."""

@dataclass(frozen=True, slots=True)
class RestoreProgress:
    """Where a changelog restore stands.

    Attributes:
        topic: the changelog topic.
        partition: the partition read (the task index).
        start_offset: the log start when the read began (inclusive).
        end_offset: the high watermark listed when the read began (exclusive);
            the read is complete when ``position >= end_offset``.
        position: the next offset to read (records, aborted records and
            transaction markers below it are consumed).
        records_read: records yielded so far (tombstones included).
        done: the read reached ``end_offset``.
    """

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    position: int
    records_read: int
    done: bool

    @property
    def remaining(self) -> int:
        """Offsets still to read (records and markers), >= 0."""
        return max(0, self.end_offset - self.position)


def read_partition(
    consumer: Consumer,
    admin: AdminClient,
    topic: str,
    partition: int,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
    poll_timeout_s: float = 0.2,
    batch_size: int = 1000,
    now: Callable[[], float] = time.monotonic,
) -> Iterator[tuple[bytes, bytes | None]]:
    """Read one changelog partition from its start to its end, ``read_committed``.

    The end is the high watermark listed ``READ_UNCOMMITTED`` when the read
    begins, as Java's reader lists it (docs/model.md, "The stored form"): a transaction still open
    below it (its markers not yet written) holds the read until it is
    resolved, so the last committed transaction is never missed. Reading
    ``read_committed``, the last offsets below the end may be transaction
    markers or aborted records, which are never delivered; the read ends when
    the consumer's position (or a partition-EOF event) reaches the end, with
    or without a record at ``end - 1``. An empty partition ends at once.
    Records committed after the listing are not read.

    Before the read the consumer asks for the topic's metadata (``list_topics``, 5 s,
    a warm-up whose failure is ignored) and is assigned the listed log start.

    A worker restores after its producer's ``init_transactions``: that fences
    a previous worker of the task and resolves its open transaction, which
    would otherwise hold the read until the transaction timeout (10 s).

    Args:
        consumer: a consumer built from
            :func:`workers.kafka_config.restore_consumer_config` (``read_committed``,
            ``enable.partition.eof``). Its assignment is replaced by this
            partition for the read and emptied at the end.
        admin: an AdminClient, for the ``READ_UNCOMMITTED`` offset listing
            (a ``read_committed`` consumer lists the last stable offset).
        topic: the changelog topic.
        partition: the partition to read (the task index).
        on_progress: called with a :class:`RestoreProgress` after the listing,
            after every ``consume`` round (advanced or not: the worker pushes its status
            from it, so a stalled read still reports), and once with ``done=True``.
        stall_timeout_s: s without any advance of the position before failing.
        poll_timeout_s: s each ``consume`` call waits.
        batch_size: at most this many records per ``consume`` call (fewer when
            fewer offsets are left).
        now: monotonic clock, s (tests pass a fake).

    Yields:
        ``(key, value)`` in offset order; ``value is None`` is a tombstone.

    Raises:
        SubstrateError: the read made no progress for ``stall_timeout_s``
            (``SUBSTRATE_TRANSIENT``, naming position and end), a record
            without a key, or a consumer error (classified by
            :mod:`workers.kafka_errors`; a vanished position is ``OFFSET_RESET``).
        NotAuthorized: the principal may not read the changelog (``SUBSTRATE_MISCONFIGURED``,
            naming Read on it: :mod:`workers.authorization`).
        CallStalled: the offset listing (:func:`workers.admin.offset_bounds`, whose answers
            and retries are awaited in Python) took longer than the ``list_offsets`` bound
            (:func:`workers.calls.awaiting`); the worker recovers in place with fresh
            clients rather than exit (docs/operations.md, "Bounded client calls" and
            "The task timeout").
    """
    tp = TopicPartition(topic, partition)
    where = f"changelog {topic}[{partition}]"
    readable = Grant("Topic", topic, ("Read",))  # what an ACL refusal lacks
    with awaiting("list_offsets"):
        start, end = offset_bounds(admin, tp, where, stall_timeout_s, now)
    position = start
    records = 0

    def report(done: bool) -> None:
        if on_progress is not None:
            on_progress(RestoreProgress(topic, partition, start, end, position, records, done))

    report(position >= end)
    if position >= end:
        return
    # Warm the consumer's metadata for the topic, then assign the listed log start rather
    # than OFFSET_BEGINNING: a consumer assigned a topic it has no metadata for waits for
    # its next metadata refresh, and queries a logical offset again only after 500 ms, so
    # each partition read began about half a second late. The warm-up is only that: its
    # failure leaves the read to the stall deadline, as before. A start that moved since
    # the listing is an out-of-range error (auto.offset.reset=error), never a skip.
    with contextlib.suppress(KafkaException):
        call("list_topics", consumer.list_topics, topic, timeout=METADATA_TIMEOUT_S)
    with map_kafka_errors(f"assigning {where}"):
        consumer.assign([TopicPartition(topic, partition, start)])
    try:
        last_advance = now()
        while position < end:
            # A batch call returns when its count is filled or at its timeout: asking for
            # no more than the offsets left lets the last one return as soon as its records
            # and the EOF event are in (the commit marker's offset stands for the EOF
            # event), instead of after poll_timeout_s; aborted records among them (never
            # delivered) still leave it to the timeout.
            wanted = max(1, min(batch_size, end - position))
            with map_kafka_errors(f"reading {where}", readable):
                messages = call("restore consume", consumer.consume, num_messages=wanted,
                                timeout=poll_timeout_s)
            before = position
            for msg in messages:
                err = msg.error()
                if err is not None:
                    if partition_eof(err):
                        if msg.partition() == partition and msg.topic() == topic:
                            position = max(position, msg.offset() or 0)
                        continue
                    raise to_exception(err, f"reading {where}",
                                       grant=readable) from KafkaException(err)
                if msg.partition() != partition or msg.topic() != topic:
                    continue
                offset = msg.offset()
                assert offset is not None  # a fetched record always has one
                if offset >= end:
                    # Committed after the listing: not part of this restore.
                    position = max(position, end)
                    break
                key = msg.key()
                if key is None:
                    raise SubstrateError(
                        ErrorKind.FATAL,
                        f"{where} has a record without a key at offset {offset}; "
                        "a changelog record always has one",
                    )
                records += 1
                position = offset + 1
                yield key, msg.value()
            if position < end:
                with map_kafka_errors(f"reading the position on {where}"):
                    current = consumer.position([TopicPartition(topic, partition)])[0].offset
                if current >= 0:
                    position = max(position, current)
            if position > before:
                last_advance = now()
                report(position >= end)
            elif now() - last_advance > stall_timeout_s:
                raise SubstrateError(
                    ErrorKind.SUBSTRATE_TRANSIENT,
                    f"restoring {where} made no progress for {stall_timeout_s:g} s: position "
                    f"{position} of end {end} (start {start}), {records} records read; "
                    "an open transaction on the changelog or an unavailable leader holds it "
                    "(kafka-transactions --bootstrap-server <servers> describe-producers "
                    f"--topic {topic} --partition {partition}; docs/runbooks.md, \"A "
                    "changelog restore made no progress\")",
                )
            else:
                report(False)  # no advance: still report, so the task's status stays fresh
    finally:
        # Best effort: the read may have been abandoned by an exception.
        with contextlib.suppress(KafkaException):
            consumer.unassign()


def write_records(
    producer: Producer,
    topic: str,
    partition: int,
    records: Iterable[tuple[bytes, bytes | None]],
    *,
    ledger: DeliveryLedger | None = None,
    queue_full_timeout_s: float = 30.0,
    now: Callable[[], float] = time.monotonic,
) -> int:
    """Produce ``records`` to ``topic[partition]`` explicitly, in the open transaction.

    The caller owns the transaction (``begin_transaction`` before,
    ``commit_transaction`` after); the records are committed or aborted with
    it. The partition is set explicitly: a changelog partition is a task, not
    a hash of the key.

    Args:
        producer: a transactional producer with an open transaction.
        topic: the changelog topic.
        partition: the task's partition.
        records: ``(key, value)``; ``value is None`` writes a tombstone.
        ledger: counts each produce and its delivery report, so the caller
            can check that everything was delivered before committing.
        queue_full_timeout_s: s to keep retrying while the local queue is
            full (``BufferError``) before failing.
        now: monotonic clock, s.

    Returns:
        The number of records produced.

    Raises:
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` when a record is
            over the producer's size limit (raised by ``produce()`` itself;
            one over the topic's limit surfaces at commit instead).
        SubstrateError: any other produce failure, classified; or the local
            queue stayed full for ``queue_full_timeout_s``.
    """
    on_delivery = ledger.on_delivery if ledger is not None else None
    count = 0
    for key, value in records:
        deadline: float | None = None
        while True:
            try:
                if on_delivery is not None:
                    producer.produce(
                        topic, value=value, key=key, partition=partition, on_delivery=on_delivery
                    )
                else:
                    producer.produce(topic, value=value, key=key, partition=partition)
                break
            except BufferError:
                deadline = deadline if deadline is not None else now() + queue_full_timeout_s
                if now() > deadline:
                    raise SubstrateError(
                        ErrorKind.SUBSTRATE_TRANSIENT,
                        f"writing changelog {topic}[{partition}]: the producer queue stayed "
                        f"full for {queue_full_timeout_s:g} s",
                    ) from None
                producer.poll(0.05)
            except KafkaException as exc:
                raise to_exception(
                    exc, f"writing changelog {topic}[{partition}] ({len(value or b'')} bytes)"
                ) from exc
        if ledger is not None:
            ledger.sent()
        count += 1
    return count


def changelog_replication(
    brokers: int, replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
) -> tuple[int, int]:
    """The replication factor and ``min.insync.replicas`` a new changelog gets (pure).

    Unless configured: replication ``min(3, brokers)``, as Kafka Streams' production
    guidance; ``min.insync.replicas`` 2 from 3 replicas on (an acknowledged changelog
    write is on two brokers, and one broker may be down), else 1: with 2 replicas a
    minimum of 2 would stop every changelog write, and so the process, while either
    broker is down, a rolling restart included (docs/operations.md, "Production
    clusters").

    Args:
        brokers: brokers in the cluster metadata, >= 1.
        replication_factor: the configured factor, or None.
        min_insync_replicas: the configured minimum, or None.

    Returns:
        ``(replication factor, min.insync.replicas)``.
    """
    replicas = replication_factor if replication_factor is not None else max(1, min(3, brokers))
    if min_insync_replicas is not None:
        return replicas, min_insync_replicas
    return replicas, 2 if replicas >= 3 else 1


def broker_count(admin: AdminClient, timeout_s: float = ADMIN_TIMEOUT_S) -> int:
    """The brokers in the cluster metadata (``describe_cluster``), >= 1.

    Raises:
        SubstrateError: the describe failed or took longer than ``timeout_s`` (s).
    """
    with map_kafka_errors("describing the cluster"):
        cluster = answer(admin.describe_cluster(request_timeout=timeout_s), timeout_s,
                         "describing the cluster")
    return max(1, len(cluster.nodes))


def ensure_changelog_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    *,
    max_message_bytes: int | None = None,
    replication_factor: int | None = None,
    min_insync_replicas: int | None = None,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> tuple[TopicInfo, bool]:
    """Create a compacted changelog topic unless it exists; describe it either way.

    An existing topic is returned as it is, never altered: a partition count
    or cleanup policy that differs is for the caller to judge (the bootstrap
    refuses ``TASK_WIDTH_CHANGED``; a non-compacted ordering changelog loses
    state, docs/operations.md, "Topic requirements"), and so are its
    replication and ``min.insync.replicas``.

    Args:
        admin: an AdminClient.
        name: the changelog topic (``parsley.declarations.ordering_changelog``
            or ``store_changelog``).
        partitions: one per task, >= 1.
        max_message_bytes: the topic's ``max.message.bytes``, bytes, or
            ``None`` for the broker default (1 MiB).
        replication_factor: the replication factor; ``None`` for
            :func:`changelog_replication`'s (the brokers counted with
            ``describe_cluster``), ``-1`` for the broker's default.
        min_insync_replicas: the topic's ``min.insync.replicas``; ``None`` for
            :func:`changelog_replication`'s (with ``replication_factor`` ``-1``:
            the broker's default).
        timeout_s: bound on each admin call, s.

    Returns:
        ``(info, created)``: the description, and whether this call created it.
        A created topic is returned once every partition has a leader.

    Raises:
        ValueError: ``partitions < 1``.
        SubstrateError: an admin failure (classified; a replication factor above the
            broker count is ``INVALID_REPLICATION_FACTOR``), or a topic that is
            still unknown or leaderless ``timeout_s`` after its creation.
        NotAuthorized: the principal may not describe it, read its configs or create it
            (``SUBSTRATE_MISCONFIGURED`` naming the operation: :mod:`workers.authorization`).
    """
    if partitions < 1:
        raise ValueError(f"a changelog needs at least one partition, got {partitions}")
    info = describe_topic(admin, name, timeout_s=timeout_s)
    if info is not None:
        return info, False
    config = {"cleanup.policy": "compact"}
    if max_message_bytes is not None:
        config["max.message.bytes"] = str(max_message_bytes)
    replicas = -1
    if replication_factor != -1:
        brokers = broker_count(admin, timeout_s) if replication_factor is None else 1
        replicas, min_isr = changelog_replication(brokers, replication_factor,
                                                  min_insync_replicas)
        config["min.insync.replicas"] = str(min_isr)
    elif min_insync_replicas is not None:
        config["min.insync.replicas"] = str(min_insync_replicas)
    new = NewTopic(name, num_partitions=partitions, replication_factor=replicas,
                   config=config)
    created = True
    try:
        answer(admin.create_topics([new], request_timeout=timeout_s)[name], timeout_s,
               f"creating topic {name}")
    except KafkaException as exc:
        if not topic_already_exists(exc):
            raise to_exception(exc, f"creating changelog topic {name}",
                               grant=Grant("Topic", name, ("Create",))) from exc
        created = False  # another creator won the race
    deadline = time.monotonic() + timeout_s
    while True:
        info = describe_topic(admin, name, timeout_s=timeout_s)
        if info is not None and leaders_known(admin, name, timeout_s):
            return info, created
        if time.monotonic() > deadline:
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"changelog topic {name} still unknown or leaderless {timeout_s:g} s "
                "after its creation",
            )
        pause(0.1)
