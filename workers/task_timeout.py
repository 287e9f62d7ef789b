"""The task timeout: how long a task may recover in place before its stop reaches the policy.

A fault that a restart cures (a client call past its bound, an unreachable broker, a
coordinator that moved, a transaction the broker aborted) is recovered inside the worker:
fresh clients, a rebuild from the changelogs, a rewind to the committed offsets, retried
with backoff. Only when the task makes no progress for ``task_timeout`` (default 300 s,
as Kafka Streams' ``task.timeout.ms``, KIP-572) does it stop ``SUBSTRATE`` and the
restart policy apply. Progress is a committed transaction, or an idle loop after a
recovery (nothing to commit, nothing failing). docs/operations.md, "The task timeout".
Pure: the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from workers.kafka_errors import TransientSubstrateError
from workers.protocol import DEFAULT_TASK_TIMEOUT_MS

__all__ = ["DEFAULT_TASK_TIMEOUT_MS", "FIRST_BACKOFF_S", "MAX_BACKOFF_S", "TaskTimedOut",
           "TaskTimeout"]

FIRST_BACKOFF_S: Final = 1.0
"""The wait before the second attempt, s (the first is made at once: a fresh client
usually cures a wedged one); it doubles per attempt up to :data:`MAX_BACKOFF_S`."""
MAX_BACKOFF_S: Final = 15.0
"""The longest wait between two attempts, s."""


class TaskTimedOut(TransientSubstrateError):
    """The task made no progress for the task timeout: the stop the restart policy sees
    (``SUBSTRATE_TRANSIENT``)."""


@dataclass(slots=True)
class TaskTimeout:
    """The stall clock of one task: when its first unrecovered failure was, how many
    recoveries it tried since, and what the last one met.

    Args:
        timeout_s: the task timeout, s (> 0).
        first_backoff_s: the wait before the second attempt, s.
        max_backoff_s: the longest wait, s.
    """

    timeout_s: float
    first_backoff_s: float = FIRST_BACKOFF_S
    max_backoff_s: float = MAX_BACKOFF_S
    since: float | None = None
    """Monotonic s of the first failure not followed by progress, or ``None``."""
    attempts: int = 0
    """Recoveries begun since :attr:`since`."""
    cause: str | None = None
    """The last failure's detail."""
    recoveries: int = 0
    """Recoveries completed over the worker's life (the status's ``recoveries``)."""

    def failed(self, now: float, cause: str) -> float:
        """Record a failure; the wait before the next recovery attempt, s.

        Raises:
            TaskTimedOut: no progress since :attr:`since` for :attr:`timeout_s`; its detail
                names the time, the setting and ``cause``.
        """
        if self.since is None:
            self.since = now
        self.cause = cause
        stalled = now - self.since
        if stalled >= self.timeout_s:
            raise TaskTimedOut(
                f"no progress for {stalled:.1f} s (task_timeout_ms="
                f"{round(self.timeout_s * 1000)}) over {self.attempts} recovery attempt(s) "
                f"in place: {cause}")
        self.attempts += 1
        if self.attempts == 1:
            return 0.0
        delay = min(self.max_backoff_s, self.first_backoff_s * 2.0 ** (self.attempts - 2))
        return max(0.0, min(delay, self.timeout_s - stalled))

    def recovered(self) -> None:
        """A recovery completed (the clock runs on until :meth:`progressed`)."""
        self.recoveries += 1

    def progressed(self) -> None:
        """The task made progress: the clock stops and the backoff starts again."""
        self.since = None
        self.attempts = 0
        self.cause = None

    @property
    def renews_consumer(self) -> bool:
        """Whether the attempt under way renews the main consumer too: from the second
        attempt without progress between. The first keeps it unless it was fenced or its
        own call stalled (a new member costs the group a rebalance); a second failure may
        come from that consumer itself: after a broker restart under load one was seen
        timing out ``committed()`` and its heartbeats for two minutes while a fresh one
        read the same offsets at once (tests/e2e/test_coordinator_broker_outage.py)."""
        return self.attempts > 1

    @property
    def stalled(self) -> bool:
        """Whether a failure awaits progress."""
        return self.since is not None

    def status(self, now: float) -> dict[str, Any] | None:
        """The status's ``recovery`` field: ``{"stalled_s", "attempts", "timeout_s",
        "cause"}`` while a failure awaits progress, else ``None``."""
        if self.since is None:
            return None
        return {"stalled_s": round(now - self.since, 1), "attempts": self.attempts,
                "timeout_s": self.timeout_s, "cause": self.cause}
