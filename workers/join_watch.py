"""The join watch: a consumer that lost its assignment and is never handed another (pure).

A task's consumer loses its assignment at every rebalance (a revoke), when its session
times out on its side (a lost assignment, e.g. while a broker restarts) and before its
first join; it normally rejoins and is assigned within one rebalance. After a broker
restart under load, librdkafka's consumer was seen never rejoining: revoked, then nothing
for minutes while the cluster answered every other client, the task ``REBALANCING`` with
nothing failing, so no recovery began and the task timeout never ran (a fresh consumer
joined at once). The watch bounds that wait: past :func:`join_bound_s` without an
assignment of any kind, while the cluster answers, the worker recovers in place with a
fresh consumer (docs/operations.md, "The task timeout").

An assignment of any kind ends the wait, an inexact or empty one too: the consumer is a
member then, and a wait for siblings is not a wedged consumer (workers.assignment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from workers.kafka_errors import ErrorKind, SubstrateError

__all__ = ["JOIN_BOUND_MIN_S", "JoinStalled", "JoinWatch", "join_bound_s"]

JOIN_BOUND_MIN_S: Final = 45.0
"""The shortest join bound, s. A rebalance waits for every member to rejoin; a member
that crashed holds it up to its session timeout, and a sibling inside a handler until its
handler returns. 45 s is well past both at the defaults (6 s sessions)."""


def join_bound_s(session_timeout_ms: int) -> float:
    """The join bound for a consumer with ``session.timeout.ms = session_timeout_ms``, s:
    :data:`JOIN_BOUND_MIN_S`, or three session timeouts when that is longer (a crashed
    member holds a rebalance up to one)."""
    return max(JOIN_BOUND_MIN_S, 3 * session_timeout_ms / 1000.0)


class JoinStalled(SubstrateError):
    """The task's consumer has had no assignment for the join bound while the cluster
    answered: recovered in place with a fresh consumer (``SUBSTRATE_TRANSIENT``)."""

    def __init__(self, detail: str) -> None:
        super().__init__(ErrorKind.SUBSTRATE_TRANSIENT, detail)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.detail,))


@dataclass(slots=True)
class JoinWatch:
    """How long the task's consumer has been without an assignment.

    Args:
        bound_s: the join bound, s (:func:`join_bound_s`).
    """

    bound_s: float
    since: float | None = None
    """Monotonic s since when the consumer has had no assignment, or ``None``."""
    why: str = ""
    """What began the wait: ``"subscribed"``, ``"was revoked"``."""

    def subscribed(self, now: float) -> None:
        """A new consumer subscribed at ``now`` (monotonic s): a wait begins afresh."""
        self.since, self.why = now, "subscribed"

    def revoked(self, now: float) -> None:
        """The consumer's assignment was revoked or lost at ``now`` (monotonic s); a wait
        already under way keeps its start."""
        if self.since is None:
            self.since, self.why = now, "was revoked"

    def cluster_back(self, now: float) -> None:
        """The cluster answers again at ``now`` (monotonic s) after it did not: a wait under
        way counts from here (no consumer rejoins a cluster that does not answer)."""
        if self.since is not None:
            self.since = now

    def assigned(self) -> None:
        """The consumer was handed an assignment (of any kind): the wait ends."""
        self.since = None

    def overdue(self, now: float) -> float | None:
        """Seconds without an assignment, once they reach :attr:`bound_s`; else ``None``."""
        if self.since is None or now - self.since < self.bound_s:
            return None
        return now - self.since

    def stalled(self, now: float) -> JoinStalled:
        """The error that renews the consumer, naming how long it waited and why."""
        waited = 0.0 if self.since is None else now - self.since
        return JoinStalled(
            f"the task's consumer has had no assignment for {waited:.0f} s since it "
            f"{self.why or 'subscribed'}, while the cluster answers (join bound "
            f"{self.bound_s:g} s): renewing it")
