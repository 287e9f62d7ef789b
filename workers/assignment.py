"""When an incomplete assignment deserves a warning (pure).

A task processes nothing unless its consumer is assigned exactly its own partitions
(docs/operations.md, "The consumer group at a start"). At a start the tasks join their
group one after another, so the first to join is briefly assigned its siblings'
partitions too: that is how every start goes, logged at INFO. It deserves a WARNING
only when it lasts: past :data:`FIRST_JOIN_GRACE_S` before the task first ran, or at
once on a rebalance after the task had run (a member left or was fenced).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

__all__ = ["FIRST_JOIN_GRACE_S", "IncompleteAssignment"]

FIRST_JOIN_GRACE_S: Final = 30.0
"""How long a task that has not yet run may hold an incomplete assignment before the
warning, s: its siblings join after their transactional init and state restore, which
takes seconds for small state; a sibling restoring large state may take longer, and
the warning then says how long the task has waited."""


@dataclass
class IncompleteAssignment:
    """Tracks one task's incomplete assignments and says which log level each deserves.

    Args:
        grace_s: :data:`FIRST_JOIN_GRACE_S` unless a test shortens it, s.
    """

    grace_s: float = FIRST_JOIN_GRACE_S
    ran: bool = False
    since: float | None = None
    warned: bool = False

    def running(self) -> None:
        """The task got its exact assignment and runs: later incomplete ones warn at once."""
        self.ran = True
        self.since = None
        self.warned = False

    def assigned(self, incomplete: bool, now: float) -> int | None:
        """A new assignment; the level to log it at, or ``None`` for no line.

        Args:
            incomplete: the assignment is non-empty and not exactly the task's.
            now: monotonic s.

        Returns:
            ``logging.WARNING`` for an incomplete assignment after the task ran,
            ``logging.INFO`` for one before it first ran (a start), ``None`` for a
            complete or empty assignment.
        """
        if not incomplete:
            return None
        if self.ran:
            self.warned = True
            return logging.WARNING
        if self.since is None:
            self.since = now
        return logging.INFO

    def overdue(self, now: float) -> float | None:
        """While the task has not run: seconds since its first incomplete assignment,
        once, when they pass the grace; ``None`` otherwise (monotonic s ``now``)."""
        if self.since is None or self.warned or now - self.since < self.grace_s:
            return None
        self.warned = True
        return now - self.since
