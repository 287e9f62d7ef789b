"""Reaping: the watch thread alone reaps the workers (``waitpid``) and records each exit; every
other thread waits on that record, and a signal goes to a worker only while it is not yet
reaped (docs/architecture.md, "The coordinator", "Supervision": one owner per child).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Final

import psutil  # type: ignore[import-untyped]

from coordinator.runtime.supervisor.state import SupervisorBase, Task
from workers.protocol import EXIT_CODES, REFUSAL_EXIT_BASE

__all__ = ["FINAL_GRACE_S", "Reaping"]

log = logging.getLogger("parsley.coordinator.supervisor")


FINAL_GRACE_S: Final = 0.5
"""s to wait for a final message after an exit whose code promises one."""


class Reaping(SupervisorBase):
    """Records exits, waits for them, signals live workers; hands each exit to
    ``_on_exit`` (:mod:`coordinator.runtime.supervisor.restarts`)."""

    def _reap(self, t: Task) -> bool:
        """Record ``t``'s exit if it has exited (``waitpid`` without blocking); hold the lock.

        The watch thread is the one caller while it runs, so no two threads
        ever wait on one child; the record (``exit_code``, ``exited``) is what
        every other thread reads.
        """
        if t.exit_code is None:
            code = t.proc.exitcode
            if code is None:
                return False
            t.exit_code, t.exited_at = code, time.monotonic()
            t.exited.set()
            self._changed.notify_all()
        return True

    def _await_exit(self, t: Task, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the reaper to record ``t``'s exit; ``True`` if it did.

        Reaps itself only when the watch thread is not running (a start that
        failed before it did, or after it ended), so there is still one reaper.
        """
        end = time.monotonic() + max(0.0, timeout_s)
        while True:
            remaining = end - time.monotonic()
            if t.exited.wait(max(0.0, min(0.05, remaining))):
                return True
            if self._thread is None or not self._thread.is_alive():
                with self._lock:
                    if self._reap(t):
                        return True
            if remaining <= 0:
                return t.exited.is_set()

    def _signal(self, t: Task, sig: signal.Signals) -> bool:
        """Send ``sig`` to ``t``'s worker if it is still a live child of ours; ``True`` if sent.

        Checked under the reaper's lock: a worker not yet reaped keeps its PID
        (at worst as a zombie), so the PID cannot belong to another process.
        """
        with self._lock:
            if self._reap(t):
                return False
            if t.handle is not None:
                try:
                    if not t.handle.is_running() or t.handle.ppid() != os.getpid():
                        log.error("pid %d is no longer task %d's worker; not signalled",
                                  t.pid, t.index)
                        return False
                except psutil.Error:
                    return False
            try:
                os.kill(t.pid, sig)
            except ProcessLookupError:
                return False
            return True

    def _check_exits(self) -> None:
        with self._lock:
            exited = [(run, t) for run in self._runs.values() for t in list(run.tasks.values())
                      if t.exited_at is None and self._reap(t)]
        for run, t in exited:
            code = t.exit_code
            # Every stop kind's exit, a clean one included, follows its final report,
            # which carries the counts since the last status (the last commit's too).
            if t.final is None and code is not None and (
                    code in EXIT_CODES.values() or code >= REFUSAL_EXIT_BASE):
                deadline = time.monotonic() + FINAL_GRACE_S
                while t.final is None and time.monotonic() < deadline:
                    self._drain()
                    time.sleep(0.02)
            self._on_exit(run, t, code)
