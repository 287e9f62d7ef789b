"""Status over ZeroMQ: a PUSH socket, one ``status`` message per interval and one ``final``.

The shapes are :mod:`workers.protocol`'s. Messages are pushed from the task's
own loop (issue 4 item 5), so a stalled loop shows as an ageing entry at the
coordinator (seed 000, "Diagnosis"). Resident memory and CPU come from psutil.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import orjson
import psutil  # type: ignore[import-untyped]
import zmq

from parsley.refusals import Reason
from workers.protocol import FINAL, STATUS, StopKind, TaskState

__all__ = ["StatusReporter"]

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
        self, stop_kind: StopKind, reason: Reason | None, detail: str | None
    ) -> dict[str, Any]:
        """Push the ``final`` message (the worker's last)."""
        message = {
            "kind": FINAL,
            "process": self.process,
            "task": self.task,
            "pid": self.pid,
            "sent_ms": _now_ms(),
            "stop_kind": stop_kind.value,
            "refusal_reason": None if reason is None else reason.name,
            "failure_detail": detail,
        }
        self._send(message, block=True)
        return message

    def close(self) -> None:
        """Close the socket (waiting up to 3 s for queued messages) and the context."""
        self._sock.close()
        self._ctx.term()
