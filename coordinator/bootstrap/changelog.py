"""Bootstrap step 3: read the ordering changelog end to end, with progress (docs/model.md, "The
stored form")."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.common import (
    StartError,
    StartRetryableError,
    refuse,
)
from parsley.engine import state_codec as sc
from parsley.inspector import OrderingStateInspector
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.changelog import RestoreProgress, read_partition
from workers.kafka_errors import SubstrateError, unknown_topic

__all__ = [
    "LOST_HEAD_DETAIL",
    "TaskState",
    "progress_logger",
    "read_ordering_state",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

LOST_HEAD_DETAIL: Final = (
    "ordering state present without its format version entry; the earliest records of "
    "the ordering changelog have been lost, so this state is incomplete and cannot be "
    "trusted. Check the changelog topic's cleanup.policy, then reset the process's state "
    "and group offsets deliberately to proceed."
)
"""``state_codec.load_image``'s detail for state without its version entry (docs/model.md, "The
stored form",
"Version entry"); repeated here for a partition whose only live rows are held
bodies, which this module keeps apart (a unit test checks the two texts agree)."""


@dataclass
class TaskState:
    """One task's ordering state as read from changelog partition ``task``.

    Attributes:
        task: the task (= changelog partition) index.
        records: records read (tombstones included); 0 means the partition
            holds no ordering records.
        inspector: the latest value per key (held bodies as markers).
    """

    task: int
    records: int
    inspector: OrderingStateInspector

    @property
    def has_state(self) -> bool:
        """True when any key is live."""
        return not self.inspector.is_empty()


class _Collector:
    """Latest value per key of one partition, validating held blobs as they arrive."""

    def __init__(self) -> None:
        self.records = 0
        self.plain: dict[bytes, bytes] = {}
        self.held: dict[bytes, str | None] = {}  # key -> blob diagnosis (None = valid)

    def add(self, key: bytes, value: bytes | None) -> None:
        self.records += 1
        key = bytes(key)
        if key[:1] == b"h":
            if value is None:
                self.held.pop(key, None)
            else:
                try:
                    sc.validate_held(bytes(value))
                    self.held[key] = None
                except ParsleyFailClosedError as exc:
                    self.held[key] = exc.detail
        elif value is None:
            self.plain.pop(key, None)
        else:
            self.plain[key] = bytes(value)

    def check(self, where: str) -> OrderingStateInspector:
        """Validate every live row (state_codec's restore checks) and build the inspector.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` naming ``where``.
        """
        try:
            if self.held and sc.VERSION_KEY not in self.plain:
                # Held rows are kept apart from load_image's input: judge the lost head here.
                raise refuse(Reason.UNKNOWN_ORDERING_STATE_FORMAT, LOST_HEAD_DETAIL)
            sc.load_image(sorted(self.plain.items()))
            for key in sorted(self.held):
                sc.held_key_parts(key)
                if self.held[key] is not None:
                    raise refuse(Reason.UNKNOWN_ORDERING_STATE_FORMAT, str(self.held[key]))
        except ParsleyFailClosedError as exc:
            raise refuse(exc.reason, f"{exc.detail} (read from {where} at start)") from exc
        rows: list[tuple[bytes, bytes | None]] = list(self.plain.items())
        rows += [(k, b"") for k in self.held]
        return OrderingStateInspector(rows)


def read_ordering_state(
    admin: AdminClient,
    consumer: Consumer,
    topic: str,
    partitions: int,
    *,
    on_progress: Callable[[RestoreProgress], None] | None = None,
    stall_timeout_s: float = 30.0,
) -> list[TaskState]:
    """Read every partition of an ordering changelog to its end (docs/model.md, "The stored form").

    Args:
        admin: an AdminClient (offset listings).
        consumer: an assign-only ``read_committed`` consumer
            (``workers.kafka_config.restore_consumer_config``).
        topic: the changelog.
        partitions: its partition count as described.
        on_progress: called with each partition's :class:`RestoreProgress`.
        stall_timeout_s: s without progress before the read fails.

    Returns:
        One :class:`TaskState` per partition, in partition order.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a corrupt
            row, a version this build cannot read, or state without its
            version entry; the detail starts with ``<topic>[<partition>]``.
        StartError: the read failed or stalled.
        StartRetryableError: the changelog has fewer partitions than described
            (a lagging metadata view).
    """
    states: list[TaskState] = []
    for p in range(partitions):
        collector = _Collector()
        try:
            for key, value in read_partition(
                consumer, admin, topic, p, on_progress=on_progress,
                stall_timeout_s=stall_timeout_s,
            ):
                collector.add(key, value)
        except SubstrateError as exc:
            if unknown_topic(exc):
                raise StartRetryableError(
                    f"partition {p} of {topic} is not known to the broker that was asked, "
                    f"although the topic was described with {partitions} partitions"
                ) from exc
            raise StartError(f"could not read the ordering changelog {topic}[{p}]: {exc}") from exc
        states.append(TaskState(p, collector.records, collector.check(f"{topic}[{p}]")))
    return states


def progress_logger(every_s: float = 5.0) -> Callable[[RestoreProgress], None]:
    """An ``on_progress`` that logs each partition's end, and its progress every ``every_s`` s."""
    last: dict[tuple[str, int], float] = {}

    def report(p: RestoreProgress) -> None:
        key = (p.topic, p.partition)
        now = time.monotonic()
        if p.done:
            log.info("read %s[%d] to its end: %d record(s), offsets %d..%d", p.topic,
                     p.partition, p.records_read, p.start_offset, p.end_offset)
        elif now - last.setdefault(key, now) >= every_s:
            last[key] = now
            log.info("reading %s[%d]: position %d of %d (%d record(s))", p.topic, p.partition,
                     p.position, p.end_offset, p.records_read)

    return report
