"""Held-message diagnosis: what a task is waiting for (docs/failing-closed.md, "Diagnosis").

A held message is not a failure: it waits for a cause. A task reports, per
channel with held messages, how many are held, the position of the head,
and each cause the head waits for (topic, partition, the position required,
the position the channel has settled to), plus the frontier's size in
channels and bytes against the metadata budget. A head with no blockers is
deliverable and goes on the next drain.

These values are produced by :meth:`parsley.engine.engine.ProcessEngine.diagnose`;
their :meth:`to_json` forms use the field names of the status JSON (docs/operations.md, "Status"):
``held[{topic, partition, count, head, blockers[{topic, partition, required,
settled}]}], frontier_channels, frontier_bytes, budget_bytes,
cross_partition_causes``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Blocker", "HeldChannel", "TaskDiagnosis"]


@dataclass(frozen=True, slots=True)
class Blocker:
    """One cause a held head waits for, as status shows it.

    Attributes:
        topic: the topic's name when the task has a binding for its id, else
            the topic id as a UUID string.
        partition: the partition of the cause's channel.
        required: the cause's position (inclusive offset).
        settled: the position the channel has settled to (inclusive offset),
            or ``None`` when it has settled nothing yet (docs/failing-closed.md, "Diagnosis": "a
            channel
            the task starts at position 0 and has received nothing on yet").
    """

    topic: str
    partition: int
    required: int
    settled: int | None

    def to_json(self) -> dict[str, Any]:
        """``{"topic", "partition", "required", "settled"}``; ``settled`` may be ``None``."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "required": self.required,
            "settled": self.settled,
        }


@dataclass(frozen=True, slots=True)
class HeldChannel:
    """One channel's hold-back buffer, as status shows it.

    Attributes:
        topic: bound topic name, else the topic id string.
        partition: the channel's partition.
        count: how many messages are held on the channel (>= 1).
        head: the position (offset) of the oldest held message, the only one
            the decision reads.
        blockers: every cause the head waits for, in channel order; empty
            means the head is deliverable on the next drain.
    """

    topic: str
    partition: int
    count: int
    head: int
    blockers: tuple[Blocker, ...]

    @property
    def deliverable(self) -> bool:
        """``True`` when the head waits for nothing (docs/failing-closed.md, "Diagnosis")."""
        return not self.blockers

    def to_json(self) -> dict[str, Any]:
        """``{"topic", "partition", "count", "head", "blockers": [...]}``."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "count": self.count,
            "head": self.head,
            "blockers": [b.to_json() for b in self.blockers],
        }


@dataclass(frozen=True, slots=True)
class TaskDiagnosis:
    """One task's held messages and frontier size (docs/failing-closed.md, "Diagnosis").

    Attributes:
        held: one entry per channel with held messages, in channel order.
        frontier_channels: how many channels the frontier names.
        frontier_bytes: the frontier's encoded size in bytes (the
            ``parsley.causes`` value every send of this task carries).
        budget_bytes: the configured metadata budget, in bytes.
        cross_partition_causes: messages this execution accepted with a cause on
            a partition of a received topic that another task reads: carried
            unenforced, warned once per pair of partitions (docs/failing-closed.md,
            ``CROSS_PARTITION_CAUSE``).
        waited: heads this execution found waiting for a cause not delivered yet:
            each held its channel back (itself and every message behind it) until
            the cause was delivered; a head counted once however long it waited
            (docs/operations.md, "Status"). Holds too short for a status sample to
            show are counted here.
    """

    held: tuple[HeldChannel, ...]
    frontier_channels: int
    frontier_bytes: int
    budget_bytes: int
    cross_partition_causes: int = 0
    waited: int = 0

    @property
    def held_count(self) -> int:
        """Total messages held across channels."""
        return sum(h.count for h in self.held)

    def to_json(self) -> dict[str, Any]:
        """The status JSON fields for one task (without task, pid, lag, age)."""
        return {
            "held": [h.to_json() for h in self.held],
            "frontier_channels": self.frontier_channels,
            "frontier_bytes": self.frontier_bytes,
            "budget_bytes": self.budget_bytes,
            "cross_partition_causes": self.cross_partition_causes,
            "waited": self.waited,
        }
