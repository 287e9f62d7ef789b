"""Committed read positions against the ordering state and the group: the pure rules.

Parsley's read positions are written only by the bootstrap (commit metadata
``parsley.bootstrap``) and by a task's transaction, which commits them with the
ordering state they belong to. These rules judge what the cluster shows against that:

* :func:`lost_positions` / :func:`ordering_state_lost`: committed positions with no
  ordering records behind them (``ORDERING_STATE_LOST``), at the bootstrap and at every
  rebuild of a worker's engine;
* :func:`unaccounted_positions` / :func:`skipped_positions_refusal`: a position beyond
  the channel's coverage + 1 over records Parsley never read (``SUBSTRATE_MISCONFIGURED``);
* :func:`foreign_members` / :func:`foreign_member_refusal`: a group member that is not
  one of the process's tasks (``SUBSTRATE_MISCONFIGURED``); :class:`GroupMember` is how
  every refusal and warning describes a member.

Pure: the callers at the edge (``coordinator.bootstrap``, ``workers.admin``) look the
numbers up. Rules and remedies: docs/failing-closed.md and docs/runbooks.md.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from parsley import refusal_shapes as shapes
from parsley.engine.channel import FED_TO_END
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "BOOTSTRAP_METADATA",
    "TASK_METADATA",
    "ForeignCommit",
    "GroupMember",
    "Unaccounted",
    "foreign_member_refusal",
    "foreign_members",
    "lost_positions",
    "ordering_state_lost",
    "skipped_offset",
    "skipped_positions_refusal",
    "unaccounted_positions",
]

BOOTSTRAP_METADATA: Final = "parsley.bootstrap"
"""Commit metadata of every offset the bootstrap writes (the same value as
``coordinator.bootstrap.common.BOOTSTRAP_METADATA``; a unit test holds them equal)."""
TASK_METADATA: Final = "parsley.task"
"""Commit metadata of every read position a task's transaction commits. Any other
metadata (none, from ``kafka-console-consumer`` or ``kafka-consumer-groups
--reset-offsets``) marks a position Parsley did not commit itself."""


class ForeignCommit(NamedTuple):
    """A committed read position the bootstrap did not write.

    Attributes:
        topic: the received topic.
        partition: its partition (= the task, = the changelog partition).
        offset: the committed offset (next offset to fetch).
        metadata: its commit metadata ("" when none).
    """

    topic: str
    partition: int
    offset: int
    metadata: str


def lost_positions(
    committed: Mapping[tuple[str, int], tuple[int, str]],
    records: Sequence[int] | None,
) -> list[ForeignCommit]:
    """Committed positions with no ordering records behind them (docs/failing-closed.md).

    Every committed step writes ordering state and read positions together,
    so a position the bootstrap did not write (metadata other than
    ``parsley.bootstrap``) over a changelog partition without records means
    the state was lost.

    Args:
        committed: ``{(topic, partition): (offset, metadata)}``, committed only.
        records: records read per changelog partition, or ``None`` when the
            changelog does not exist.

    Returns:
        The suspects in (topic, partition) order; empty when nothing is lost.
    """
    out: list[ForeignCommit] = []
    for (topic, p), (offset, metadata) in sorted(committed.items()):
        if metadata == BOOTSTRAP_METADATA:
            continue
        if records is not None and p < len(records) and records[p] > 0:
            continue
        out.append(ForeignCommit(topic, p, offset, metadata))
    return out


def ordering_state_lost(
    suspect: ForeignCommit, changelog_name: str, changelog_exists: bool, app_id: str
) -> ParsleyFailClosedError:
    """The ``ORDERING_STATE_LOST`` refusal for ``suspect`` (docs/failing-closed.md, "Detail
    shapes"; remedy in docs/runbooks.md)."""
    shape = shapes.ordering_state_lost(
        suspect.topic, suspect.partition, stamped=bool(suspect.metadata),
        changelog_partition=suspect.partition if changelog_exists else None)
    return ParsleyFailClosedError(
        Reason.ORDERING_STATE_LOST,
        f"{shape} (committed offset {suspect.offset}, metadata "
        f"{suspect.metadata or 'none'}; ordering changelog {changelog_name}). If the "
        "changelog's records can be restored from a backup, restore them and start; "
        f"otherwise finish the reset (kafka-consumer-groups --delete --group {app_id}).",
    )


class Unaccounted(NamedTuple):
    """A committed read position the ordering state's coverage does not reach.

    Attributes:
        topic, partition: the channel.
        committed: the group's committed offset (next offset to fetch).
        covered: the channel's coverage in the ordering state (inclusive
            offset), or ``None`` when the state never covered it.
        metadata: the commit's metadata.
    """

    topic: str
    partition: int
    committed: int
    covered: int | None
    metadata: str

    @property
    def first_unread(self) -> int:
        """The first offset Parsley would read next: coverage + 1 (0 when never covered)."""
        return 0 if self.covered is None else self.covered + 1


def unaccounted_positions(
    committed: Mapping[tuple[str, int], tuple[int, str]],
    covered: Mapping[tuple[str, int], int | None],
) -> list[Unaccounted]:
    """Committed positions Parsley did not commit itself, beyond coverage + 1.

    A task commits the last fed offset + 1, or its consumer's position when
    only transaction markers or aborted records follow (docs/failing-closed.md,
    "Read positions"), with the metadata :data:`TASK_METADATA`; the bootstrap
    commits covered + 1 or a declared start with :data:`BOOTSTRAP_METADATA`.
    Any other commit beyond coverage + 1 is a suspect: whether it skipped a
    record is for the caller to read (the records' offsets, never a guess:
    :func:`skipped_offset`).

    Args:
        committed: ``{(topic, partition): (offset, metadata)}``, committed only.
        covered: ``{(topic, partition): coverage}`` for every channel of a
            changelog partition that holds state (``None``: never covered);
            channels absent here are not judged (no state behind them:
            :func:`lost_positions` decides).

    Returns:
        The suspects in (topic, partition) order; a channel at the fed-to-end
        sentinel (deleted) is never one.
    """
    out: list[Unaccounted] = []
    for key, (offset, metadata) in sorted(committed.items()):
        if metadata in (BOOTSTRAP_METADATA, TASK_METADATA) or key not in covered:
            continue
        cov = covered[key]
        if cov == FED_TO_END:
            continue
        first = 0 if cov is None else cov + 1
        if offset > first:
            out.append(Unaccounted(key[0], key[1], offset, cov, metadata))
    return out


def skipped_offset(suspect: Unaccounted, log_start: int, first_record: int | None) -> int | None:
    """The first offset a suspect commit skipped without Parsley reading it, or ``None``.

    Args:
        suspect: from :func:`unaccounted_positions`.
        log_start: the partition's log start now.
        first_record: the first committed record at or after
            ``max(suspect.first_unread, log_start)``, or ``None`` when none is.

    Returns:
        ``suspect.first_unread`` when it lies below the log start (whatever was
        there is gone, and a commit Parsley did not make cannot vouch that it
        was only markers); else ``first_record`` when it lies below the
        committed position; else ``None`` (only markers or aborted records between).
    """
    if suspect.first_unread < log_start:
        return suspect.first_unread
    if first_record is not None and first_record < suspect.committed:
        return first_record
    return None


def skipped_positions_refusal(
    suspect: Unaccounted, first_record: int, app_id: str
) -> ParsleyFailClosedError:
    """``SUBSTRATE_MISCONFIGURED`` for records below a committed position Parsley never read.

    Args:
        suspect: the committed position (:func:`unaccounted_positions`).
        first_record: the first offset skipped (:func:`skipped_offset`).
        app_id: the application id (the group).

    Source: docs/failing-closed.md ("Read positions"); remedy: docs/runbooks.md,
    ``SUBSTRATE_MISCONFIGURED``, "Read positions Parsley did not commit".
    """
    tp = f"{suspect.topic}-{suspect.partition}"
    cov = "none" if suspect.covered is None else str(suspect.covered)
    return ParsleyFailClosedError(
        Reason.SUBSTRATE_MISCONFIGURED,
        f"read positions were committed in group '{app_id}' by something other than "
        f"Parsley: {tp} committed read position {suspect.committed} is beyond what the "
        f"ordering state accounts for (coverage {cov}), and {tp}@{first_record} between "
        "them was never read by this process (a consumer outside Parsley with "
        f"group.id {app_id}, or an offset reset). Remove the foreign consumer, then reset "
        f"the position to coverage + 1 so the skipped records are delivered: "
        f"kafka-consumer-groups --bootstrap-server <servers> --group {app_id} "
        f"--reset-offsets --topic {suspect.topic}:{suspect.partition} "
        f"--to-offset {suspect.first_unread} --execute; then start (runbook: "
        "SUBSTRATE_MISCONFIGURED, read positions Parsley did not commit).",
    )


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a consumer group as ``describe_consumer_groups`` reports it.

    Attributes:
        member_id: the broker-assigned member id.
        client_id: the member's ``client.id``.
        host: the host the member connected from (``/127.0.0.1``).
        group_instance_id: its ``group.instance.id`` (static members), else ``None``.
    """

    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None = None

    def describe(self) -> str:
        """``client id 'c' on host /h, group.instance.id i`` (or ``member id m``): how the
        coordinator's waits, refusals and warnings name a member."""
        who = (f"group.instance.id {self.group_instance_id}" if self.group_instance_id
               else f"member id {self.member_id}")
        return f"client id '{self.client_id}' on host {self.host}, {who}"

    def describe_with_member_id(self) -> str:
        """``client id c on host h (member m, group.instance.id i)``: how the worker's
        foreign-member refusal names a member; the member id is always given, as
        ``kafka-consumer-groups --describe --members`` lists it."""
        return (f"client id {self.client_id} on host {self.host.lstrip('/')} (member "
                f"{self.member_id}"
                + (f", group.instance.id {self.group_instance_id})"
                   if self.group_instance_id else ")"))


def foreign_members(members: Iterable[GroupMember],
                    own_instance_ids: Collection[str]) -> list[GroupMember]:
    """Members that are not one of the process's own tasks, by ``group.instance.id``.

    A task's consumer is a static member whose ``group.instance.id`` is
    ``<app-id>-task-<i>`` (``parsley.naming.group_instance_id``); anything
    else in the group (a dynamic member, another instance id) is foreign.

    Returns:
        The foreign members, sorted by client id then member id.
    """
    out = [m for m in members if m.group_instance_id not in own_instance_ids]
    return sorted(out, key=lambda m: (m.client_id, m.member_id))


def foreign_member_refusal(
    members: Sequence[GroupMember], group: str, seen_s: float
) -> ParsleyFailClosedError:
    """``SUBSTRATE_MISCONFIGURED`` naming the foreign members (the group-protocol
    conflict of docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``).

    Args:
        members: the foreign members (non-empty).
        group: the application id.
        seen_s: how long they have been seen in the group, s.
    """
    names = ", ".join(m.describe_with_member_id() for m in members)
    return ParsleyFailClosedError(
        Reason.SUBSTRATE_MISCONFIGURED,
        f"{shapes.substrate_group_conflict(f'{seen_s:.1f} s')}: group '{group}' holds a "
        f"member that is not one of this process's tasks: {names}. Something is in the "
        "consumer group under this "
        "application id that is not this process: a consumer configured with the "
        "application id as its group.id takes partitions from the tasks and may commit "
        "positions Parsley never read. List the members with kafka-consumer-groups "
        f"--describe --group {group} --members, remove the foreign consumer, then restart "
        "(runbook: SUBSTRATE_MISCONFIGURED, a persistent group-protocol conflict).",
    )
