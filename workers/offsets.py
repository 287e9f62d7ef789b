"""Offset reset under ``auto.offset.reset=error``: a discarded position or a missing one.

librdkafka reports a fetch below the log start *and* a partition with no
committed offset with the same code, ``_AUTO_OFFSET_RESET`` (-140);
:func:`offset_reset_verdict` tells them apart from the numbers (committed
offset vs the listed log start and end), :func:`offset_reset_refusal` makes
the exception, :func:`resolve_offset_reset` looks the numbers up. Verified on
a real broker in ``tests/integration/test_worker_kafka.py``.
:func:`positions_past_markers` moves a fully consumed partition's committed
position past its trailing transaction markers, so that retention emptying a
quiet partition is not mistaken for positions discarded unread. :class:`Reads` keeps
a task's read positions, :func:`committed_positions` reads the group's.

Source: docs/failing-closed.md, "Read positions" and ``POSITIONS_DISCARDED_UNREAD``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from parsley import refusal_shapes as shapes
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.calls import call
from workers.kafka_errors import ErrorKind, SubstrateError, map_kafka_errors, to_exception

__all__ = [
    "OffsetResetVerdict",
    "Reads",
    "committed_positions",
    "offset_reset_refusal",
    "offset_reset_verdict",
    "positions_past_markers",
    "resolve_offset_reset",
]


class OffsetResetVerdict(enum.Enum):
    """What a refused offset reset means, judged from the numbers."""

    DISCARDED_UNREAD = "discarded_unread"
    """Committed position below the log start: ``POSITIONS_DISCARDED_UNREAD``."""
    BEYOND_LOG_END = "beyond_log_end"
    """Committed position above the log end (the topic was recreated shorter,
    docs/runbooks.md, "A received topic went missing while the process ran"):
    ``POSITIONS_DISCARDED_UNREAD``."""
    NO_COMMITTED_OFFSET = "no_committed_offset"
    """No committed offset: transient, no reason (docs/failing-closed.md, "Not a refusal")."""
    WITHIN_LOG = "within_log"
    """Committed position inside the log now: transient (the log moved meanwhile)."""


def offset_reset_verdict(committed: int | None, log_start: int, log_end: int) -> OffsetResetVerdict:
    """Tell a discarded position from a missing committed offset.

    librdkafka reports both with ``_AUTO_OFFSET_RESET``; only the numbers
    separate them.

    Args:
        committed: the group's committed read position on the partition (the
            next offset to read), or ``None``/negative (``OFFSET_INVALID``)
            when none is committed.
        log_start: the log start offset (``list_offsets`` earliest; the low
            watermark), inclusive.
        log_end: the high watermark (exclusive end).

    Source: docs/failing-closed.md, ``POSITIONS_DISCARDED_UNREAD`` and "Not a refusal" (a
    missing committed offset stays transient).
    """
    if committed is None or committed < 0:
        return OffsetResetVerdict.NO_COMMITTED_OFFSET
    if committed < log_start:
        return OffsetResetVerdict.DISCARDED_UNREAD
    if committed > log_end:
        return OffsetResetVerdict.BEYOND_LOG_END
    return OffsetResetVerdict.WITHIN_LOG


def offset_reset_refusal(
    topic: str,
    partition: int,
    committed: int | None,
    log_start: int,
    log_end: int,
    *,
    group_id: str | None = None,
) -> ParsleyFailClosedError | SubstrateError:
    """The exception for a refused offset reset, from :func:`offset_reset_verdict`.

    Returns:
        ``ParsleyFailClosedError(POSITIONS_DISCARDED_UNREAD, ...)`` with the
        detail shape of docs/runbooks.md, POSITIONS_DISCARDED_UNREAD (naming the partition, the
        committed position and
        the log start, so the gap can be recorded), a ``SubstrateError(RESTART_REQUIRED)``
        for a missing committed offset (the bootstrap pre-commits it), or a
        ``SubstrateError(SUBSTRATE_TRANSIENT)`` for a committed position inside the log.
    """
    verdict = offset_reset_verdict(committed, log_start, log_end)
    tp = f"{topic}-{partition}"
    group = group_id or "<app-id>"
    check = (
        f"check kafka-consumer-groups --describe --group {group} and "
        f"kafka-get-offsets --topic {topic} --partitions {partition} --time earliest; "
        "record the gap, then reset"
    )
    if verdict is OffsetResetVerdict.DISCARDED_UNREAD:
        return ParsleyFailClosedError(
            Reason.POSITIONS_DISCARDED_UNREAD,
            f"{shapes.positions_discarded_unread()}: {tp} committed read position {committed} "
            f"is below the log start {log_start}, so positions {committed}..{log_start - 1} "
            f"are gone; {check}",
        )
    if verdict is OffsetResetVerdict.BEYOND_LOG_END:
        return ParsleyFailClosedError(
            Reason.POSITIONS_DISCARDED_UNREAD,
            f"{shapes.positions_discarded_unread()}: {tp} committed read position {committed} "
            f"is beyond the log end {log_end} (log start {log_start}); the topic was likely "
            f"recreated; {check}",
        )
    if verdict is OffsetResetVerdict.NO_COMMITTED_OFFSET:
        return SubstrateError(
            ErrorKind.RESTART_REQUIRED,
            f"{tp} has no committed read position and auto.offset.reset=error; "
            "the bootstrap pre-commits positions: restart",
            KafkaError._AUTO_OFFSET_RESET,
        )
    return SubstrateError(
        ErrorKind.SUBSTRATE_TRANSIENT,
        f"{tp} offset reset refused although committed read position {committed} is within "
        f"the log [{log_start}, {log_end}]",
        KafkaError._AUTO_OFFSET_RESET,
    )


def resolve_offset_reset(
    consumer: Consumer,
    topic: str,
    partition: int,
    *,
    group_id: str | None = None,
    timeout_s: float = 30.0,
) -> ParsleyFailClosedError | SubstrateError:
    """Look up the committed offset and the log bounds, then judge the reset.

    Args:
        consumer: a consumer of the group (its committed offsets are read).
        topic, partition: the partition the ``_AUTO_OFFSET_RESET`` error named.
        group_id: for the detail only.
        timeout_s: bound on each broker call, s.

    Returns:
        What :func:`offset_reset_refusal` returns.

    Raises:
        SubstrateError: the lookups themselves failed (classified).
    """
    tp = TopicPartition(topic, partition)
    with map_kafka_errors(f"reading the committed offset of {topic}-{partition}"):
        committed_tp = consumer.committed([tp], timeout=timeout_s)[0]
        low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
    committed = committed_tp.offset
    return offset_reset_refusal(
        topic,
        partition,
        None if committed == OFFSET_INVALID or committed < 0 else committed,
        low,
        high,
        group_id=group_id,
    )


def positions_past_markers(
    positions: Mapping[tuple[str, int], int],
    known: Mapping[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    """Read positions to commit past trailing transaction markers and aborted records.

    A task commits the last fed offset + 1. When a partition is consumed to
    its end, the consumer's position has moved on past the transaction markers
    (and, under ``read_committed``, the aborted records) that follow; committing
    that position instead, as Kafka Streams does (``StreamTask.findOffsetAndMetadata``
    in apache/kafka commits the consumer's next offset for a partition with no
    buffered record), means retention that empties a quiet partition
    (log start = log end = last marker + 1) leaves the committed position at the
    log start, not one below it (docs/failing-closed.md, "Read positions").

    Args:
        positions: the consumer's position per partition (next offset it
            returns to the application; negative when unknown), read after every
            record it returned was fed.
        known: the position already committed or about to be, per partition.

    Returns:
        ``{(topic, partition): position}`` for each partition whose position is
        beyond the known one. (Such a commit never lands over an empty changelog
        partition: a task's first commit writes the ordering state's version entry.)
    """
    out: dict[tuple[str, int], int] = {}
    for key, pos in positions.items():
        if pos < 0:
            continue
        before = known.get(key)
        if before is not None and pos > before:
            out[key] = pos
    return out


Positions = dict[tuple[str, int], int]
"""Offsets by ``(topic, partition)``."""


@dataclass(slots=True)
class Reads:
    """A task's read positions over the process's life, offsets by ``(topic, partition)``.

    Attributes:
        start: the group's committed positions at the last start (``-1001``: none).
        read: the committed read positions, advanced by each commit.
        ends: past the last record fed, over the process's life (``TaskStep.read_ends``):
            what an aborted read reached, for the deletion check
            (``workers.identity.unread_on_deleted``). Shared, never replaced.
        floors: the highest committed read position seen at a start in this life: nothing
            below it was read uncommitted by this process. Shared, never replaced.
    """

    start: Positions = field(default_factory=dict)
    read: Positions = field(default_factory=dict)
    ends: Positions = field(default_factory=dict)
    floors: Positions = field(default_factory=dict)

    def started(self, committed: Positions) -> Positions:
        """A start from ``committed`` (the group's positions); returns them."""
        self.start = dict(committed)
        for key, off in committed.items():
            if off > self.floors.get(key, -1):
                self.floors[key] = off
        self.read = {k: v for k, v in committed.items() if v >= 0}
        return committed


def committed_positions(consumer: Consumer, partitions: Iterable[tuple[str, int]]
                        ) -> dict[tuple[str, int], tuple[int, str]]:
    """The group's committed offsets of ``partitions`` with their commit metadata
    (``Consumer.committed``, 30 s): ``{(topic, partition): (offset, metadata)}``, the
    offset negative where none is committed, the metadata ``""`` where none was given.

    Raises:
        SubstrateError: the request failed (classified).
    """
    tps = [TopicPartition(t, p) for t, p in sorted(partitions)]
    try:
        got = call("committed", consumer.committed, tps, timeout=30)
    except KafkaException as exc:
        raise to_exception(exc, "reading the group's committed offsets") from exc
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata or "") for tp in got}
