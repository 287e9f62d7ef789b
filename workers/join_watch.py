"""The join bound: a consumer that lost its assignment and is never handed another (pure).

A task's consumer loses its assignment at every rebalance (a revoke), when its session
times out on its side (a lost assignment, e.g. while a broker restarts) and before its
first join; it normally rejoins and is assigned within one rebalance. After a broker
restart under load, librdkafka's consumer was seen never rejoining: revoked, then nothing
for minutes while the cluster answered every other client, the task ``REBALANCING`` with
nothing failing, so no recovery began and the task timeout never ran (a fresh consumer
joined at once).

The watch bounds that wait (docs/operations.md, "The join bound"). Past :func:`join_bound_s`
without an assignment of any kind, while the cluster answers, the worker looks at the group
(:func:`left_out`): once the group has settled without this task's member, the consumer is
renewed in place; while a rebalance is under way, or a member holds the task's
``group.instance.id``, it waits and looks again. An assignment of any kind ends the wait,
an inexact or empty one too: the consumer is a member then, and a wait for siblings is not
a wedged consumer (workers.assignment).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from workers.admin import GroupView
from workers.kafka_errors import TransientSubstrateError

__all__ = ["BLIND_LOOKS", "JOIN_BOUND_MIN_S", "LOOK_INTERVAL_S", "JoinStalled", "JoinWatch",
           "join_bound_s", "left_out"]

JOIN_BOUND_MIN_S: Final = 45.0
"""The shortest join bound, s. A rebalance that waits for a crashed member waits up to its
session timeout (6 s by default); one that waits for a member that does not poll (a
sibling restoring its state or inside a slow handler) shows as a rebalance under way, and
:func:`left_out` keeps waiting through it however long it lasts."""

LOOK_INTERVAL_S: Final = 2.0
"""How often an overdue wait looks at the group again, s, from the end of the last look (as
the group check: workers.guards.GROUP_CHECK_INTERVAL_S)."""

BLIND_LOOKS: Final = 5
"""Looks in a row that got no answer (a describe failed or timed out) after which the
consumer is renewed anyway, with the admin client: a wait must not outlast every look
unbounded (a stale admin client after a broker restart answers nothing)."""


def join_bound_s(session_timeout_ms: int) -> float:
    """The join bound for a consumer with ``session.timeout.ms = session_timeout_ms``, s:
    :data:`JOIN_BOUND_MIN_S`, or three session timeouts when that is longer (the members
    the coordinator relists when it loads the group expire one session timeout later:
    workers.admin.GroupView)."""
    return max(JOIN_BOUND_MIN_S, 3 * session_timeout_ms / 1000.0)


def left_out(view: GroupView, instance_id: str, mine: str | None = None) -> bool:
    """Whether the group, as ``view`` shows it, has settled without the member of
    ``group.instance.id = instance_id`` that the consumer could still be handed an
    assignment as: ``Stable``, ``Empty`` or ``Dead`` (no rebalance under way, its state
    known), and either no member listed with that instance id, or, in a ``Stable`` group,
    the one listed is the consumer's own member id ``mine`` (its join and sync are done, yet
    no assignment reached it: wedged, as a consumer revoked but still heart-beating). Any
    other member listed with the instance id is an earlier member of this task the
    coordinator still counts (it expires within a session timeout) or a successor (another
    worker of the task, whose fence ends this one); a fresh consumer cures neither."""
    if not view.settled:
        return False
    listed = [m for m in view.members if m.group_instance_id == instance_id]
    if not listed:
        return True
    return view.stable and mine is not None and all(m.member_id == mine for m in listed)


class JoinStalled(TransientSubstrateError):
    """The task's consumer has had no assignment for the join bound while the cluster
    answered and its group settled without it: recovered in place with a fresh consumer
    (``SUBSTRATE_TRANSIENT``)."""


@dataclass(slots=True)
class JoinWatch:
    """How long the task's consumer has been without an assignment, and when to look at its
    group.

    Args:
        bound_s: the join bound, s (:func:`join_bound_s`).
    """

    bound_s: float
    since: float | None = None
    """Monotonic s since when the consumer has had no assignment, or ``None``."""
    why: str = ""
    """What began the wait: ``"subscribed"``, ``"was revoked"``."""
    next_look: float = 0.0
    """Monotonic s before which an overdue wait does not look at the group again."""
    blind: int = 0
    """Looks in a row that got no answer."""

    def subscribed(self, now: float) -> None:
        """A new consumer subscribed at ``now`` (monotonic s): a wait begins afresh."""
        self.since, self.why = now, "subscribed"

    def revoked(self, now: float) -> None:
        """The consumer's assignment was revoked or lost at ``now`` (monotonic s); a wait
        already under way keeps its start."""
        if self.since is None:
            self.since, self.why = now, "was revoked"

    def restart(self, now: float) -> None:
        """A wait under way counts from ``now`` (monotonic s): the cluster answers again after
        it did not, or a recovery that kept the consumer ended (it was not polled meanwhile,
        so it could not be handed an assignment)."""
        if self.since is not None:
            self.since = now

    def assigned(self) -> None:
        """The consumer was handed an assignment (of any kind): the wait ends."""
        self.since = None
        self.blind = 0

    def overdue(self, now: float) -> float | None:
        """Seconds without an assignment, once they reach :attr:`bound_s`; else ``None``."""
        if self.since is None or now - self.since < self.bound_s:
            return None
        return now - self.since

    def look_due(self, now: float) -> bool:
        """Whether the wait is overdue and a look at the group is due at ``now``."""
        return self.overdue(now) is not None and now >= self.next_look

    def looked(self, now: float, *, answered: bool) -> bool:
        """A look that ended at ``now`` found nothing to renew (``answered``) or got no
        answer; the next is due :data:`LOOK_INTERVAL_S` later. Returns whether the looks
        without an answer reached :data:`BLIND_LOOKS` in a row (then renew anyway)."""
        self.next_look = now + LOOK_INTERVAL_S
        self.blind = 0 if answered else self.blind + 1
        return self.blind >= BLIND_LOOKS

    def stalled(self, now: float) -> JoinStalled:
        """The error that renews the consumer, naming how long it waited and why (the group
        settled without it, or :data:`BLIND_LOOKS` looks got no answer)."""
        waited = 0.0 if self.since is None else max(0.0, now - self.since)
        group = (f"{self.blind} looks at its group got no answer" if self.blind
                 else "its group settled without it")
        self.blind = 0
        return JoinStalled(
            f"the task's consumer has had no assignment for {waited:.0f} s since it "
            f"{self.why or 'subscribed'}, while the cluster answers and {group} "
            f"(join bound {self.bound_s:g} s): renewing it")
