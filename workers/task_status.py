"""A worker's own status and metric fields: its counters, and when its status is pushed.

:class:`Counters` counts what committed transactions carried and times the drain passes
(the handler latency histogram); :meth:`Counters.metric_fields` is the ``metrics`` field
of the status and final messages (:mod:`workers.protocol`; docs/operations.md,
"Metrics"). :class:`StatusClock` pushes a status through :class:`workers.status.StatusReporter`
once per status interval. It imports nothing of :mod:`workers.main`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil  # type: ignore[import-untyped]

from workers.histogram import HANDLER_BUCKETS_S, BucketCounts
from workers.memory import HeapTrimmer, heap_trimmer
from workers.protocol import TaskState
from workers.status import StatusReporter
from workers.step import TaskStep
from workers.transaction import TaskTransaction

__all__ = ["Counters", "StatusClock"]


@dataclass(slots=True)
class Counters:
    """A worker's counters, from its start, over every step it built.

    Attributes:
        delivered_before: messages delivered in committed transactions of earlier steps.
        batches_before: batch-handler calls in committed transactions of earlier steps.
        fed_committed: records fed in transactions that committed, over every step.
        fed_mark: the current step's ``fed`` at its last commit.
        commit_s: time spent committing, s (taken out of the drain timing).
        handler_latency: per drain pass, its time per delivered message, s.
    """

    delivered_before: int = 0
    batches_before: int = 0
    fed_committed: int = 0
    fed_mark: int = 0
    commit_s: float = 0.0
    handler_latency: BucketCounts = field(
        default_factory=lambda: BucketCounts(HANDLER_BUCKETS_S))

    def new_step(self, old: TaskStep | None) -> None:
        """A new step replaces ``old``: only what it committed counts (an aborted
        transaction's deliveries are made again)."""
        if old is not None:
            self.delivered_before += old.delivered_committed
            self.batches_before += old.handler_batches_committed
        self.fed_mark = 0

    def committed(self, step: TaskStep) -> None:
        """``step`` committed a transaction: count the records it fed since the last one."""
        self.fed_committed += step.fed - self.fed_mark
        self.fed_mark = step.fed

    def timed_drain(self, step: TaskStep) -> int:
        """One :meth:`TaskStep.drain` pass, timed for the handler latency histogram.

        The pass's time, less any commit made inside it, divided by the messages it
        delivered, is counted once per delivered message: two clock reads per pass,
        nothing per message (docs/operations.md, "Metrics"). It covers the engine's
        delivery decision, the handler, its store writes and handing its sends to the
        producer.

        Returns:
            How many messages the pass delivered.
        """
        commit_s = self.commit_s
        began = time.perf_counter()
        count = step.drain()
        if count:
            spent = time.perf_counter() - began - (self.commit_s - commit_s)
            self.handler_latency.observe(max(0.0, spent) / count, count)
        return count

    def delivered(self, step: TaskStep | None) -> int:
        """Messages delivered since the worker started (the current step's uncommitted too)."""
        return self.delivered_before + (step.delivered if step else 0)

    def metric_fields(self, step: TaskStep | None, txn: TaskTransaction) -> dict[str, Any]:
        """The ``metrics`` field of the status and final messages (:mod:`workers.protocol`).

        Each counts from this worker's start and never decreases; the coordinator adds
        up the task's successive workers. ``received`` and ``delivered`` count what
        committed transactions carry (an aborted transaction's records are fed and
        delivered again, and counted then).
        """
        return {
            "received": self.fed_committed,
            "delivered": self.delivered_before + (step.delivered_committed if step else 0),
            "commits": txn.commits,
            "aborts": txn.aborts,
            "handler_batches": self.batches_before + (step.handler_batches_committed
                                                      if step else 0),
            "transaction_seconds": txn.durations.to_json(),
            "handler_seconds": self.handler_latency.to_json(),
        }


class StatusClock:
    """When a worker's status is pushed: once per ``interval_s``, or at once when forced.

    Args:
        reporter: where status goes (``None``: nowhere; the schedule still runs, for the
            punctuation that follows it).
        interval_s: the status interval, s.
    """

    def __init__(self, reporter: StatusReporter | None, interval_s: float) -> None:
        self.reporter = reporter
        self.interval_s = interval_s
        self.next_at = 0.0
        """Monotonic s of the next push (the loop punctuates once it has passed)."""
        me = psutil.Process()
        self._trim = HeapTrimmer(heap_trimmer(), lambda: int(me.memory_info().rss))

    def maybe(self, state: TaskState, fields: Callable[[], dict[str, Any]],
              force: bool = False) -> None:
        """Push ``state`` with ``fields()`` if due (or ``force``), and schedule the next."""
        now = time.monotonic()
        if not force and now < self.next_at:
            return
        self.next_at = now + self.interval_s
        if self.reporter is None:
            return
        # Free heap back to the system first, so the status's rss_bytes is what is in use
        # (workers.memory: glibc keeps a burst's freed records otherwise).
        self._trim.maybe(now)
        self.reporter.status(state, fields())
