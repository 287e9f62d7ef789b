"""Held-message diagnosis: what a task is waiting for (docs/failing-closed.md, "Diagnosis").

A held message is not a failure: it waits for a cause. A task reports, per
channel with held messages, how many are held, the position of the head,
and each cause the head waits for (topic, partition, the position required,
the position the channel has settled to), plus the frontier's size in
channels and bytes against the metadata budget. A head with no blockers is
deliverable and goes on the next drain.

These values are produced by :meth:`parsley.engine.engine.ProcessEngine.diagnose`;
a host that knows each blocker channel's last stable offset and log end classes every
blocker (:class:`HoldClass`, :meth:`TaskDiagnosis.with_figures`). The :meth:`to_json`
forms use the field names of the status JSON (docs/operations.md, "Status"):
``held[{topic, partition, count, head, blockers[{topic, partition, required,
settled, class, last_stable, end}]}], frontier_channels, frontier_bytes, budget_bytes,
cross_partition_causes``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Blocker", "ChannelFigures", "HeldChannel", "HoldClass", "TaskDiagnosis",
           "classify_blocker"]


class HoldClass(enum.Enum):
    """Why a blocker's required position has not settled: the classes of docs/runbooks.md,
    "A message is held and not moving", each with its next command there.

    The value is the status JSON's ``class`` and the metrics' ``class`` label.
    """

    BEHIND = "behind"
    """The required position lies below the last stable offset: the record is there,
    committed, and this task has not delivered it yet (lag, or a chain of holds)."""
    OPEN_TRANSACTION = "open_transaction"
    """Between the last stable offset and the log end: inside a transaction still open
    on that partition; it settles when the transaction commits or is aborted."""
    NOT_PRODUCED = "not_produced"
    """At or beyond the log end: not produced yet, or a stale or forged stamp."""
    NO_RECORD = "no_record"
    """Below the last stable offset, and the reader's position is already past it
    without having fed a record there: no committed record occupies it (a transaction
    marker, an aborted batch); held until a later record on the channel arrives."""

    @property
    def label(self) -> str:
        """The words the status table uses: ``behind``, ``in open txn``,
        ``not produced``, ``no record``."""
        return _LABELS[self]


_LABELS = {HoldClass.BEHIND: "behind", HoldClass.OPEN_TRANSACTION: "in open txn",
           HoldClass.NOT_PRODUCED: "not produced", HoldClass.NO_RECORD: "no record"}


@dataclass(frozen=True, slots=True)
class ChannelFigures:
    """The figures that class a blocker on one partition.

    Attributes:
        last_stable: the partition's last stable offset (what a ``read_committed``
            reader may read up to, exclusive): the log end unless a transaction is open,
            else the offset of its first record.
        end: the log end offset (the high watermark, exclusive; what
            ``kafka-get-offsets --time latest`` prints).
        position: the reader's position on the partition (the next offset it returns;
            the worker's consumer, or the group's committed offset for a stopped
            process), ``None`` when not known.
    """

    last_stable: int
    end: int
    position: int | None = None


def classify_blocker(required: int, figures: ChannelFigures, held_head: int | None) -> HoldClass:
    """The class of a blocker needing ``required`` on a partition with ``figures`` (pure).

    Args:
        required: the cause's position (inclusive offset).
        figures: the partition's offsets.
        held_head: the head of this task's own held messages on that partition, if any
            (a chain: the cause was fed and is itself held).

    Returns:
        ``NOT_PRODUCED`` at or beyond the end; ``OPEN_TRANSACTION`` at or beyond the last
        stable offset; below it, ``NO_RECORD`` when the reader is past ``required`` and
        did not hold a record there, else ``BEHIND``.

    Source: docs/runbooks.md, "A message is held and not moving"; docs/failing-closed.md,
    "Diagnosis".
    """
    if required >= figures.end:
        return HoldClass.NOT_PRODUCED
    if required >= figures.last_stable:
        return HoldClass.OPEN_TRANSACTION
    chain = held_head is not None and held_head <= required
    if not chain and figures.position is not None and figures.position > required:
        return HoldClass.NO_RECORD
    return HoldClass.BEHIND


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
        hold_class: why ``required`` has not settled (:class:`HoldClass`), once a host
            classed it; ``None`` while the figures are not known.
        last_stable: the partition's last stable offset the class was decided on.
        end: the partition's log end offset the class was decided on.
    """

    topic: str
    partition: int
    required: int
    settled: int | None
    hold_class: HoldClass | None = None
    last_stable: int | None = None
    end: int | None = None

    def to_json(self) -> dict[str, Any]:
        """``{"topic", "partition", "required", "settled", "class", "last_stable", "end"}``;
        ``settled`` may be ``None``, and the last three are ``None`` until classed."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "required": self.required,
            "settled": self.settled,
            "class": None if self.hold_class is None else self.hold_class.value,
            "last_stable": self.last_stable,
            "end": self.end,
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

    def with_figures(self, figures: Mapping[tuple[str, int], ChannelFigures]) -> TaskDiagnosis:
        """This diagnosis with every blocker on a partition in ``figures`` classed.

        Args:
            figures: ``{(topic, partition): ChannelFigures}``, keyed as the blockers
                name their channel (the topic's name, else its id).

        Returns:
            A new diagnosis; blockers without figures keep ``hold_class`` ``None``.
        """
        heads = {(h.topic, h.partition): h.head for h in self.held}

        def classed(b: Blocker) -> Blocker:
            f = figures.get((b.topic, b.partition))
            if f is None:
                return b
            return dataclasses.replace(
                b, hold_class=classify_blocker(b.required, f, heads.get((b.topic, b.partition))),
                last_stable=f.last_stable, end=f.end)

        held = tuple(dataclasses.replace(h, blockers=tuple(classed(b) for b in h.blockers))
                     for h in self.held)
        return dataclasses.replace(self, held=held)

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
