"""What a task holds and why: the diagnosis a host shows an operator.

Source: docs/failing-closed.md, "Diagnosis"; docs/model.md, "Covered and
settled" and "The decision rule" (settled, the blockers of a held head).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from uuid import UUID

from parsley.engine.channel import ChannelId
from parsley.engine.deliverability import Held, Verdict
from parsley.status import Blocker, HeldChannel, TaskDiagnosis

__all__ = ["diagnose_task"]


def diagnose_task(
    *,
    held: Sequence[tuple[ChannelId, Sequence[int]]],
    verdict_of_head: Callable[[ChannelId, int], Verdict],
    names: Mapping[str, UUID],
    frontier_channels: int,
    frontier_bytes: int,
    budget_bytes: int,
    cross_partition_causes: int = 0,
    waited: int = 0,
) -> TaskDiagnosis:
    """Build the task's diagnosis.

    Args:
        held: per channel with held messages, in channel order, its held
            positions (head first).
        verdict_of_head: the deliverability verdict of a channel's head.
        names: topic name -> topic id; a channel is labelled with the first
            name bound to its topic id, else the id itself.
        frontier_channels: entries in the frontier.
        frontier_bytes: encoded size of the frontier, bytes.
        budget_bytes: the metadata budget, bytes.
        cross_partition_causes: messages accepted with a cause the task could
            not enforce (a cause on another task's partition of a received topic).
        waited: heads found waiting for a cause (``ProcessEngine.waited_count``).

    Returns:
        Per held channel: topic label, partition, count, head position and
        every cause the head waits for (required and settled positions); a
        head with no blockers is deliverable on the next drain.

    Raises:
        Whatever ``verdict_of_head`` raises (the engine's
        ``UNKNOWN_ORDERING_STATE_FORMAT`` for a head body gone from the store).
    """
    labels = {t: name for name, t in reversed(list(names.items()))}

    def _label(topic_id: UUID) -> str:
        return labels.get(topic_id, str(topic_id))

    channels: list[HeldChannel] = []
    for ch, positions in held:
        head = positions[0]
        verdict = verdict_of_head(ch, head)
        blockers = tuple(
            Blocker(_label(b.channel.topic_id), b.channel.partition, b.required, b.settled)
            for b in verdict.blockers
        ) if isinstance(verdict, Held) else ()
        channels.append(HeldChannel(_label(ch.topic_id), ch.partition, len(positions), head,
                                    blockers))
    return TaskDiagnosis(tuple(channels), frontier_channels, frontier_bytes, budget_bytes,
                         cross_partition_causes, waited)
