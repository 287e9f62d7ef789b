"""Status over ZeroMQ: a PUSH socket, one ``status`` message per interval and one ``final``.

The shapes are :mod:`workers.protocol`'s. Messages are pushed from the task's
own loop, so a stalled loop shows as an ageing entry at the
coordinator (docs/failing-closed.md, "Diagnosis"). Resident memory and CPU come from psutil.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import orjson
import psutil  # type: ignore[import-untyped]
import zmq
from confluent_kafka import Consumer, KafkaException, TopicPartition

from parsley.refusals import Reason
from parsley.status import TaskDiagnosis
from workers.changelog import RestoreProgress
from workers.protocol import FINAL, STATUS, StopKind, TaskState

if TYPE_CHECKING:
    from parsley.engine.engine import ProcessEngine

__all__ = ["StatusReporter", "cached_lag", "final_message", "push_final", "status_fields"]

_LINGER_MS = 3000
"""How long closing the socket waits to deliver queued messages (the final one), ms."""


def _now_ms() -> int:
    return int(time.time() * 1000)


class StatusReporter:
    """Pushes one task's status and final messages to ``endpoint``.

    Args:
        endpoint: ZeroMQ endpoint (``tcp://127.0.0.1:5555``, ``ipc://...``) to connect to.
        process: the process name.
        task: the task index.

    Sends never block the task's loop: a full queue (no coordinator reading)
    drops the status message (``zmq.NOBLOCK``); the final message waits up to
    3 s at close.
    """

    def __init__(self, endpoint: str, process: str, task: int) -> None:
        self.process = process
        self.task = task
        self.pid = os.getpid()
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PUSH)
        self._sock.setsockopt(zmq.LINGER, _LINGER_MS)
        self._sock.setsockopt(zmq.SNDHWM, 100)
        self._sock.setsockopt(zmq.SNDTIMEO, _LINGER_MS)
        self._sock.connect(endpoint)
        self._proc = psutil.Process(self.pid)
        self._proc.cpu_percent(None)  # the first call only primes the counter

    def _send(self, message: dict[str, Any], block: bool) -> None:
        data = orjson.dumps(message)
        with contextlib.suppress(zmq.Again):
            self._sock.send(data, 0 if block else zmq.NOBLOCK)

    def status(self, state: TaskState, fields: dict[str, Any]) -> dict[str, Any]:
        """Push a ``status`` message.

        Args:
            state: the task's lifecycle state.
            fields: the other fields of the protocol's shape (held, lag, restore, ...).

        Returns:
            The message sent (for logging and tests).
        """
        mem = self._proc.memory_info()
        message: dict[str, Any] = {
            "kind": STATUS,
            "process": self.process,
            "task": self.task,
            "pid": self.pid,
            "sent_ms": _now_ms(),
            "state": state.value,
            **fields,
            "rss_bytes": int(mem.rss),
            "cpu_percent": float(self._proc.cpu_percent(None)),
        }
        self._send(message, block=False)
        return message

    def final(
        self, stop_kind: StopKind, reason: Reason | None, detail: str | None,
        metrics: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Push the ``final`` message (the worker's last), with the worker's last
        ``metrics`` field when given (:mod:`workers.protocol`)."""
        message = final_message(self.process, self.task, self.pid, stop_kind, reason, detail)
        if metrics is not None:
            message["metrics"] = dict(metrics)
        self._send(message, block=True)
        return message

    def close(self) -> None:
        """Close the socket (waiting up to 3 s for queued messages) and the context."""
        self._sock.close()
        self._ctx.term()


def final_message(process: str, task: int, pid: int, stop_kind: StopKind,
                  reason: Reason | None, detail: str | None) -> dict[str, Any]:
    """The ``final`` message's shape (:mod:`workers.protocol`)."""
    return {
        "kind": FINAL,
        "process": process,
        "task": task,
        "pid": pid,
        "sent_ms": _now_ms(),
        "stop_kind": stop_kind.value,
        "refusal_reason": None if reason is None else reason.name,
        "failure_detail": detail,
    }


def push_final(endpoint: str, message: dict[str, Any], linger_ms: int = 2000) -> None:
    """Push one ``final`` message on a socket of its own, waiting up to ``linger_ms`` for it
    to leave; for the worker's watchdog thread (a ZeroMQ socket is never shared between
    threads, so it cannot use the task loop's :class:`StatusReporter`)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        sock.setsockopt(zmq.LINGER, linger_ms)
        sock.setsockopt(zmq.SNDTIMEO, linger_ms)
        sock.connect(endpoint)
        with contextlib.suppress(zmq.Again):
            sock.send(orjson.dumps(message))
    finally:
        sock.close()
        ctx.term()


def cached_lag(consumer: Consumer, partitions: Iterable[tuple[str, int]],
               start_positions: Mapping[tuple[str, int], int]) -> int | None:
    """Records on ``partitions`` past the consumer's positions, from cached watermarks only.

    Never a network call: the status may be pushed with a transaction open, where no
    blocking call may run (``transaction.timeout.ms`` is 10 s; docs/operations.md, "Transaction
    time bound").

    Args:
        consumer: the task's main consumer.
        partitions: (topic, partition) pairs the task owns.
        start_positions: committed start position per pair, the position of a partition
            none of whose records the client consumed yet.

    Returns:
        The lag in records, or ``None`` while a watermark or position is unknown (before
        the first fetch response) or the client failed.
    """
    total = 0
    try:
        tps = [TopicPartition(t, p) for t, p in sorted(partitions)]
        for tp in consumer.position(tps):
            position = tp.offset if tp.offset >= 0 else start_positions.get(
                (tp.topic, tp.partition), -1)
            _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0 or position < 0:
                return None
            total += max(0, high - position)
    except KafkaException:
        return None
    return total


def status_fields(
    *,
    engine: ProcessEngine | None,
    budget_bytes: int,
    restore: Mapping[str, RestoreProgress],
    delivered: int,
    lag: int | None,
    commits: int,
    commit_latency_ms: float | None,
    from_checkpoint: bool = False,
    classify: Callable[[TaskDiagnosis], TaskDiagnosis] | None = None,
) -> dict[str, Any]:
    """A ``status`` message's fields besides kind, process, task, pid, sent_ms, state, rss
    and cpu (:mod:`workers.protocol`).

    Args:
        engine: the task's engine (its diagnosis and held count), or ``None`` before one
            is built.
        budget_bytes: the metadata budget, bytes (reported while there is no engine).
        restore: changelog topic -> its restore progress (empty: none under way).
        delivered: messages delivered by the task since it started.
        lag: from :func:`cached_lag`, or ``None``.
        commits: transactions committed; commit_latency_ms: the last one's, ms.
        from_checkpoint: the last restore trusted the local stores (a clean stop's
            checkpoint, ``workers.checkpoint``): ``restore`` then reads
            ``{"records": 0, ..., "done": true, "checkpoint": true}``.
        classify: classes the diagnosis's blockers (``workers.hold_figures.HoldFigures``);
            ``None`` leaves them unclassed.
    """
    if engine is not None:
        diagnosis = engine.diagnose()
        fields = (diagnosis if classify is None else classify(diagnosis)).to_json()
        held_total = engine.held_count()
    else:
        fields = {"held": [], "frontier_channels": 0, "frontier_bytes": 0,
                  "budget_bytes": budget_bytes, "cross_partition_causes": 0, "waited": 0}
        held_total = 0
    progress = None
    if restore:
        ps = list(restore.values())
        progress = {
            "records": sum(p.records_read for p in ps),
            "position": sum(p.position - p.start_offset for p in ps),
            "end": sum(p.end_offset - p.start_offset for p in ps),
            "done": all(p.done for p in ps),
            "checkpoint": False,
        }
    elif from_checkpoint:
        progress = {"records": 0, "position": 0, "end": 0, "done": True, "checkpoint": True}
    fields.update({
        "held_total": held_total,
        "lag": lag,
        "restore": progress,
        "delivered": delivered,
        "commits": commits,
        "commit_latency_ms": commit_latency_ms,
    })
    return fields
