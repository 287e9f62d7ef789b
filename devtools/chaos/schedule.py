"""A seeded schedule of faults for the chaos run (pure: the same seed gives the same schedule).

Fault kinds (docs/operations.md, "Chaos test and soak"):

* ``broker_restart``: stop the broker (SIGTERM, data kept), leave it down for
  ``duration_s``, start it again on the same port and data;
* ``worker_kill``: SIGKILL the worker of task ``task``;
* ``coordinator_kill``: SIGKILL the coordinator, wait ``duration_s``, start a new one;
* ``worker_stop``: SIGSTOP the worker of task ``task`` for ``duration_s``, then SIGCONT.

On a cluster of three brokers (:data:`CLUSTER_KINDS`; docs/operations.md, "Production
clusters"):

* ``leader_kill``: SIGKILL the broker leading the received partition of task ``task``,
  leave it down ``duration_s``, start it again;
* ``txn_coordinator_kill``: SIGKILL the broker coordinating the transactions of task
  ``task``'s transactional id, leave it down ``duration_s``, start it again;
* ``rolling_restart``: stop (SIGTERM) and start each broker in turn, the next once the
  cluster is in sync again, as a rolling upgrade does;
* ``broker_freeze``: SIGSTOP the broker leading the received partition of task ``task``
  for ``duration_s`` (past the consumers' 6 s session timeout), then SIGCONT.

Each fault comes ``gap_s`` after the previous recovery.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

KINDS: tuple[str, ...] = ("broker_restart", "worker_kill", "coordinator_kill", "worker_stop")
"""The fault kinds of one broker, in the order a schedule's first round covers them when
shuffled."""
CLUSTER_KINDS: tuple[str, ...] = ("leader_kill", "txn_coordinator_kill", "rolling_restart",
                                  "broker_freeze")
"""The fault kinds that need a cluster of three brokers (each leaves two running)."""
ALL_KINDS: tuple[str, ...] = KINDS + CLUSTER_KINDS

_DURATION_S = {
    "broker_restart": (2.0, 12.0),
    "worker_kill": (0.0, 0.0),
    "coordinator_kill": (0.0, 3.0),
    "worker_stop": (2.0, 14.0),
    "leader_kill": (2.0, 10.0),
    "txn_coordinator_kill": (2.0, 10.0),
    "rolling_restart": (0.0, 0.0),
    "broker_freeze": (8.0, 14.0),
}
_TASK_KINDS = frozenset({"worker_kill", "worker_stop", "leader_kill", "txn_coordinator_kill",
                         "broker_freeze"})


@dataclass(frozen=True, slots=True)
class Fault:
    """One scheduled fault.

    Attributes:
        index: its place in the schedule, from 0.
        kind: one of :data:`KINDS`.
        gap_s: seconds of normal running before it, after the previous recovery.
        duration_s: seconds the broker stays down, the coordinator stays dead
            before its successor starts, or the worker stays stopped; 0 for a kill.
        task: the task whose worker is hit (``worker_kill``, ``worker_stop``), else -1.
    """

    index: int
    kind: str
    gap_s: float
    duration_s: float
    task: int

    def describe(self) -> str:
        """E.g. ``#2 worker_stop task 1 for 4.2 s after 3.1 s``."""
        what = self.kind + (f" task {self.task}" if self.task >= 0 else "")
        held = f" for {self.duration_s:.1f} s" if self.duration_s > 0 else ""
        return f"#{self.index} {what}{held} after {self.gap_s:.1f} s"


def schedule(seed: int, count: int, kinds: Sequence[str] = KINDS, tasks: int = 2,
             gap_s: tuple[float, float] = (2.0, 6.0)) -> list[Fault]:
    """``count`` faults drawn with ``random.Random(seed)``.

    Every kind in ``kinds`` comes once, in a shuffled order, before any comes twice
    (rounds), so a run of ``len(kinds)`` faults covers each kind.

    Args:
        seed: the seed.
        count: number of faults, >= 0.
        kinds: the kinds to draw from (a subset of :data:`KINDS`).
        tasks: the task count (a hit worker's task is drawn from ``range(tasks)``).
        gap_s: (low, high) seconds of running before each fault.

    Raises:
        ValueError: an unknown kind, no kinds, or a negative count.
    """
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown or not kinds or count < 0:
        raise ValueError(f"kinds must be a non-empty subset of {ALL_KINDS} and count >= 0, "
                         f"got {list(kinds)}, {count}")
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < count:
        round_ = list(kinds)
        rng.shuffle(round_)
        order.extend(round_)
    faults = []
    for i, kind in enumerate(order[:count]):
        low, high = _DURATION_S[kind]
        faults.append(Fault(
            index=i, kind=kind, gap_s=round(rng.uniform(*gap_s), 1),
            duration_s=round(rng.uniform(low, high), 1),
            task=rng.randrange(tasks) if kind in _TASK_KINDS else -1))
    return faults


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``"worker_kill,worker_stop"`` -> the kinds; ``None``, ``""`` or ``"all"`` -> :data:`KINDS`;
    ``"cluster"`` -> :data:`CLUSTER_KINDS` (three brokers).

    Raises:
        ValueError: an unknown kind.
    """
    if not text or text.strip() == "all":
        return KINDS
    if text.strip() == "cluster":
        return CLUSTER_KINDS
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    unknown = [k for k in kinds if k not in ALL_KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind(s) {unknown}; known: {', '.join(ALL_KINDS)}")
    return kinds
