"""The cross-partition rule: a cause on another task's partition of a received topic.

Such a cause names a channel the process receives but this task does not, so this task
can never enforce it (docs/failing-closed.md, "Cross-partition causes"). The host picks
the policy (:func:`cross_partition_policy`); :class:`CrossPartitionCheck` applies it to
each accepted record in the reference engine. The native core applies the same rule
(``native/src/engine/receipt.rs``, ``cross_partition``), its refusal's detail written by
:func:`parsley.engine.details.cross_partition_cause` for both.

Pure: standard library and the pure ``parsley`` modules.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Mapping
from typing import Final
from uuid import UUID

from parsley.engine import details
from parsley.engine.channel import ChannelId, describe_channel, describe_key
from parsley.engine.deltas import Causes
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "CROSS_PARTITION_SETTINGS",
    "CrossPartition",
    "CrossPartitionCheck",
    "cross_partition_policy",
    "foreign_causes",
]


class CrossPartition(enum.Enum):
    """What a task does with a cross-partition cause: a cause on a channel of a topic
    the process receives, on a partition another task of the process reads, so this
    task can never enforce it (docs/failing-closed.md, ``CROSS_PARTITION_CAUSE``)."""

    REFUSE = "REFUSE"
    """Fail closed with ``CROSS_PARTITION_CAUSE``: the ``auto`` choice when the received
    topics have equal partition counts (co-partitioned by declaration), or the
    ``refuse`` setting."""
    WARN = "WARN"
    """Carry the cause unenforced, warn once per (received channel, cause channel)
    pair and count the message in the task's status (``cross_partition_causes``)."""


CROSS_PARTITION_SETTINGS: Final = ("auto", "refuse", "warn")
"""The values of the ``cross_partition_causes`` setting (docs/operations.md,
"Configuration"): ``auto`` refuses when the received topics' partition counts are
equal and warns otherwise; ``refuse`` and ``warn`` choose one policy whatever the
counts (docs/failing-closed.md, "Cross-partition causes")."""


def cross_partition_policy(partitions: Mapping[str, int], setting: str = "auto") -> CrossPartition:
    """The policy a process's tasks apply to cross-partition causes.

    Args:
        partitions: received topic name -> partition count.
        setting: the ``cross_partition_causes`` setting, one of
            :data:`CROSS_PARTITION_SETTINGS`.

    Returns:
        ``refuse`` -> :attr:`CrossPartition.REFUSE`; ``warn`` ->
        :attr:`CrossPartition.WARN`; ``auto`` -> :attr:`CrossPartition.REFUSE` when
        the received topics all have the same partition count (co-partitioned by
        declaration: a cause on another partition is usually a keying or
        partitioner mistake), else :attr:`CrossPartition.WARN`.

    Raises:
        ValueError: ``setting`` is not one of :data:`CROSS_PARTITION_SETTINGS`.

    Source: docs/failing-closed.md, "Cross-partition causes".
    """
    if setting == "refuse":
        return CrossPartition.REFUSE
    if setting == "warn":
        return CrossPartition.WARN
    if setting != "auto":
        raise ValueError(f"cross_partition_causes must be one of {list(CROSS_PARTITION_SETTINGS)}, "
                         f"got {setting!r}")
    if len(set(partitions.values())) <= 1:
        return CrossPartition.REFUSE
    return CrossPartition.WARN


def foreign_causes(causes: Causes, received_topics: Collection[UUID],
                   received: Collection[ChannelId]) -> Causes:
    """The causes on a channel of a received topic that this task does not receive."""
    return tuple((c, p) for c, p in causes if c.topic_id in received_topics and c not in received)


class CrossPartitionCheck:
    """One task's policy applied to the records it accepts, with its warnings and count.

    Args:
        policy: the host's choice (:func:`cross_partition_policy`).
        on_warning: called with each warning's text; ``None`` discards warnings.

    Attributes:
        count: messages accepted with a cause this task could not enforce; always 0
            under :attr:`CrossPartition.REFUSE`.
    """

    __slots__ = ("_on_warning", "_policy", "_warned", "count")

    def __init__(self, policy: CrossPartition, on_warning: Callable[[str], None] | None) -> None:
        self._policy = policy
        self._on_warning = on_warning
        self._warned: set[tuple[ChannelId, ChannelId]] = set()
        self.count = 0

    def check(self, ch: ChannelId, position: int, key: bytes | None, foreign: Causes,
              names: Mapping[UUID, str]) -> None:
        """Refuse, or warn about and count, the record at ``ch@position`` whose
        ``foreign`` causes (non-empty) this task can never enforce.

        ``names`` is the task's topic id -> name, to name channels in the texts.

        Raises:
            ParsleyFailClosedError: ``CROSS_PARTITION_CAUSE`` under
                :attr:`CrossPartition.REFUSE` (docs/failing-closed.md gives the shape).
        """
        cause, cause_at = foreign[0]
        if self._policy is CrossPartition.REFUSE:
            raise ParsleyFailClosedError(
                Reason.CROSS_PARTITION_CAUSE,
                details.cross_partition_cause(ch, names, position, describe_key(key), cause,
                                              cause_at),
            )
        self.count += 1
        for cause, cause_at in foreign:
            pair = (ch, cause)
            if pair in self._warned:
                continue
            self._warned.add(pair)
            if self._on_warning is not None:
                self._on_warning(
                    f"the record at {describe_channel(ch, names, position)} "
                    f"({describe_key(key)}) names a cause at "
                    f"{describe_channel(cause, names, cause_at)}, a partition another task of "
                    "this process reads: the cause is carried unenforced (the received topics' "
                    "partition counts differ, or cross_partition_causes = \"warn\"). Said "
                    "once per pair of partitions; counted in status as "
                    "cross_partition_causes; cross_partition_causes = \"refuse\" makes it a "
                    "refusal (docs/runbooks.md, CROSS_PARTITION_CAUSE)")
