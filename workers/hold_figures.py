"""The figures that class a held head's blockers: last stable offset and log end, never waited for.

A status names, for every blocker, whether its required position is behind, inside an open
transaction, not produced yet or at an offset no committed record occupies
(:class:`parsley.status.HoldClass`; docs/runbooks.md, "A message is held and not moving").
That takes each blocker partition's last stable offset and log end, which only the broker
knows. The status may be pushed with a transaction open, where no blocking call may run
(docs/operations.md, "Transaction time bound"), so :class:`HoldFigures` asks with the
AdminClient's ``list_offsets`` (``READ_COMMITTED`` for the last stable offset,
``READ_UNCOMMITTED`` for the end), at most once per status interval, and reads only answers
that have arrived: a blocker's class is at most about two intervals old, and ``None`` until the
first answer. The reader's position comes from the consumer's own (local) ``position``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from parsley.status import ChannelFigures, TaskDiagnosis

__all__ = ["HoldFigures", "consumer_positions"]

log = logging.getLogger("parsley.worker")

ASK_TIMEOUT_S = 10.0
"""The ``request_timeout`` of each ``list_offsets`` request, s: an unanswered one is given
up after this and asked again."""


class HoldFigures:
    """Asks for the offsets of the partitions blockers name, and classes a diagnosis with them.

    Args:
        interval_s: at most one request per this many seconds (the status interval).
        now: monotonic seconds (tests pass a fake).
    """

    def __init__(self, interval_s: float, *, now: Callable[[], float] = time.monotonic) -> None:
        self.interval_s = interval_s
        self._now = now
        self._asked_at = float("-inf")
        self._pending: tuple[dict[Any, Any], dict[Any, Any]] | None = None
        self._offsets: dict[tuple[str, int], tuple[int, int]] = {}

    def _ask(self, admin: AdminClient, channels: Collection[tuple[str, int]]) -> None:
        spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        request = {TopicPartition(t, p): spec for t, p in sorted(channels)}
        try:
            stable = admin.list_offsets(request, isolation_level=IsolationLevel.READ_COMMITTED,
                                        request_timeout=ASK_TIMEOUT_S)
            end = admin.list_offsets(request, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                     request_timeout=ASK_TIMEOUT_S)
        except KafkaException as exc:
            log.debug("listing the offsets of blocker partitions failed: %s", exc)
            return
        self._pending = (stable, end)

    def _harvest(self) -> None:
        if self._pending is None:
            return
        stable, end = self._pending
        if not all(f.done() for f in (*stable.values(), *end.values())):
            if self._now() - self._asked_at > ASK_TIMEOUT_S + self.interval_s:
                self._pending = None  # never answered: ask again
            return
        self._pending = None
        for tp, f in stable.items():
            e = end.get(tp)
            if f.cancelled() or f.exception() is not None or e is None or e.cancelled() \
                    or e.exception() is not None:
                continue
            self._offsets[(tp.topic, tp.partition)] = (int(f.result().offset),
                                                       int(e.result().offset))

    def classify(self, diagnosis: TaskDiagnosis, admin: AdminClient | None,
                 positions: Callable[[Collection[tuple[str, int]]], dict[tuple[str, int], int]],
                 ) -> TaskDiagnosis:
        """``diagnosis`` with its blockers classed by the offsets known so far.

        Asks again for the blocker partitions when an interval has passed and no request
        is in flight; never waits for an answer.

        Args:
            diagnosis: the engine's diagnosis.
            admin: the task's AdminClient, or ``None`` (nothing is asked).
            positions: the reader's position per partition asked (local; a partition
                it does not know is left out).

        Returns:
            The classed diagnosis (:meth:`parsley.status.TaskDiagnosis.with_figures`).
        """
        channels = {(b.topic, b.partition) for h in diagnosis.held for b in h.blockers}
        self._harvest()
        if not channels:
            return diagnosis
        now = self._now()
        if admin is not None and self._pending is None and now - self._asked_at >= self.interval_s:
            self._asked_at = now
            self._ask(admin, channels)
        known = {c: self._offsets[c] for c in channels if c in self._offsets}
        if not known:
            return diagnosis
        at = positions(known.keys())
        return diagnosis.with_figures({c: ChannelFigures(lso, end, at.get(c))
                                       for c, (lso, end) in known.items()})


def consumer_positions(
    consumer: Any, committed: Mapping[tuple[str, int], int],
) -> Callable[[Collection[tuple[str, int]]], dict[tuple[str, int], int]]:
    """The reader's positions for :meth:`HoldFigures.classify`: ``consumer.position``, a local
    call (no request), and where the consumer has no position yet (nothing fetched since a
    start: a partition at its end, or past trailing markers) the committed read position
    in ``committed``, where it starts reading; a partition in neither, or a failed client's
    without a committed one, is left out."""
    def positions(channels: Collection[tuple[str, int]]) -> dict[tuple[str, int], int]:
        out = {c: committed[c] for c in channels if committed.get(c, -1) >= 0}
        if consumer is None:
            return out
        try:
            found = consumer.position([TopicPartition(t, p) for t, p in sorted(channels)])
        except KafkaException:
            return out
        for tp in found:
            key = (tp.topic, tp.partition)
            if tp.offset >= 0 and tp.offset > out.get(key, -1):
                out[key] = int(tp.offset)
        return out
    return positions
