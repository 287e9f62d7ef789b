"""Committed read positions against the ordering state and the group: the pure rules.

Parsley's read positions are written only by the bootstrap (commit metadata
``parsley.bootstrap``) and by a task's transaction, which commits them with the
ordering state they belong to. These rules judge what the cluster shows against that:

* :func:`lost_positions` / :func:`ordering_state_lost`: committed positions with no
  ordering records behind them (``ORDERING_STATE_LOST``), at the bootstrap and at every
  rebuild of a worker's engine;
* :func:`foreign_positions` / :func:`foreign_position_warning`: a position Parsley did
  not commit over ordering state, which a start overrides with coverage + 1;
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
    "ForeignPosition",
    "GroupMember",
    "engine_start_positions",
    "foreign_member_refusal",
    "foreign_members",
    "foreign_position_warning",
    "foreign_positions",
    "lost_positions",
    "ordering_state_lost",
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


class ForeignPosition(NamedTuple):
    """A committed read position Parsley did not commit, over ordering state that covers it.

    Attributes:
        topic, partition: the channel.
        committed: the group's committed offset (next offset to fetch).
        covered: the channel's coverage in the ordering state (inclusive
            offset), or ``None`` when the state never covered it.
        metadata: the commit's metadata ("" when none).
    """

    topic: str
    partition: int
    committed: int
    covered: int | None
    metadata: str


def foreign_positions(
    committed: Mapping[tuple[str, int], tuple[int, str]],
    covered: Mapping[tuple[str, int], int | None],
) -> list[ForeignPosition]:
    """Committed positions Parsley did not commit itself, on channels the ordering state holds.

    A task commits its read positions with :data:`TASK_METADATA` in the transaction
    that commits the ordering state they belong to, and the bootstrap commits with
    :data:`BOOTSTRAP_METADATA`; a commit with any other metadata (a
    ``kafka-console-consumer --group <app-id>``, ``kafka-consumer-groups
    --reset-offsets``) over state is not where the process stopped reading, which the
    state itself records as its coverage (docs/model.md, "The session floor: replays
    and feed order"). The caller overrides each one with the position the bootstrap
    would have pre-committed (docs/failing-closed.md, "Read positions").

    Args:
        committed: ``{(topic, partition): (offset, metadata)}``, committed only.
        covered: ``{(topic, partition): coverage}`` for every channel of a
            changelog partition that holds state (``None``: never covered);
            channels absent here are not judged (no state behind them:
            :func:`lost_positions` decides).

    Returns:
        Every such commit in (topic, partition) order, whatever its offset; a channel
        at the fed-to-end sentinel (its topic deleted) is never one.
    """
    out: list[ForeignPosition] = []
    for key, (offset, metadata) in sorted(committed.items()):
        if metadata in (BOOTSTRAP_METADATA, TASK_METADATA) or key not in covered:
            continue
        cov = covered[key]
        if cov == FED_TO_END:
            continue
        out.append(ForeignPosition(key[0], key[1], offset, cov, metadata))
    return out


def engine_start_positions(
    committed: Mapping[tuple[str, int], tuple[int, str]],
    covered: Mapping[tuple[str, int], int | None],
) -> dict[tuple[str, int], int]:
    """The start position the engine is given per partition, from the group's commits.

    A start settles every position below its start position (docs/model.md, "The
    session floor"). A position a task's transaction committed (:data:`TASK_METADATA`)
    may lie past trailing transaction markers and aborted records that the task never
    fed (``workers.offsets.positions_past_markers``); the ordering state committed with
    it records what was fed, its coverage. Such a start begins at coverage + 1 instead,
    so that a cause at a marker's offset is held after a start as it was before it, until
    a later record on the channel arrives (docs/failing-closed.md, ``no_record``; seed
    001's runbook: a restart rebuilds the same hold). Any other commit (the bootstrap's:
    a starting position, a reset) is taken as it is.

    Args:
        committed: ``{(topic, partition): (offset, metadata)}``; negative offsets
            (none committed) are left out of the result.
        covered: ``{(topic, partition): coverage}`` of the restored ordering state
            (``None`` or absent: never covered).

    Returns:
        ``{(topic, partition): start position}``, never above the committed offset.
    """
    out: dict[tuple[str, int], int] = {}
    for key, (offset, metadata) in committed.items():
        if offset < 0:
            continue
        cov = covered.get(key)
        if metadata == TASK_METADATA and cov != FED_TO_END:
            offset = min(offset, (-1 if cov is None else cov) + 1)
        out[key] = offset
    return out


def foreign_position_warning(found: ForeignPosition, resume: int, group: str) -> str:
    """The WARNING a start logs when it overrides ``found`` with ``resume`` (pure).

    Names the group, the partition, the foreign commit's offset and metadata, the
    coverage and the position resumed at; says what became of the records between
    (read and delivered once: forward; dropped as replays had the commit been kept:
    backward). Source: docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``, "Read positions
    Parsley did not commit".

    Args:
        found: from :func:`foreign_positions`.
        resume: the offset the start commits instead (coverage + 1, or the
            bootstrap's rule for a channel never covered); never ``found.committed``
            (a foreign commit already there is kept, with nothing to warn about).
        group: the consumer group (the application id).
    """
    tp = f"{found.topic}-{found.partition}"
    cov = ("never covered it" if found.covered is None
           else f"covers it up to offset {found.covered}")
    if found.committed > resume:
        what = (f"this process never read offsets {resume}..{found.committed - 1}; it reads "
                "them now and delivers each record among them once")
    else:
        what = (f"offsets {found.committed}..{resume - 1} were delivered already and would be "
                "dropped as replays; to deliver them again, reset the process "
                "(parsley-coordinator reset --to-offset)")
    return (f"group '{group}' has a read position on {tp} that Parsley did not commit: offset "
            f"{found.committed}, commit metadata {found.metadata!r} (a consumer outside "
            f"Parsley with group.id {group}, or kafka-consumer-groups --reset-offsets); the "
            f"ordering state {cov}, so this start overrides it and resumes at offset {resume}: "
            f"{what} (docs/runbooks.md, SUBSTRATE_MISCONFIGURED, read positions Parsley did "
            "not commit)")


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
