"""The pure part of ``parsley-coordinator reset``: the target, the positions it chooses,
the refusal naming live members, and the plan with its record and Kafka commands.

No I/O: :mod:`coordinator.reset` reads the boundary from Kafka, feeds it here, and
carries the plan out (docs/runbooks.md, "Resetting a process").
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator.bootstrap.common import BOOTSTRAP_METADATA
from parsley.declarations import application_id
from parsley.engine.channel import FED_TO_END
from workers.positions import TASK_METADATA, GroupMember

__all__ = [
    "PartitionBoundary",
    "ResetPlan",
    "ResetRefused",
    "Target",
    "choose_positions",
    "current_positions",
    "iso_utc",
    "members_refusal",
    "parse_target",
]


class ResetRefused(Exception):
    """The reset did not change anything: a condition named in the message must be
    removed first (a live member, a running coordinator, an offset out of range)."""


# ------------------------------------------------------------------ the target (pure)


@dataclass(frozen=True)
class Target:
    """Where the new causal lifetime starts on each received partition.

    Attributes:
        mode: ``earliest``, ``latest``, ``offset`` or ``datetime``.
        offset: with ``offset``, the offset for every partition not in ``per_partition``.
        per_partition: with ``offset``, ``{(topic, partition): offset}``.
        timestamp_ms: with ``datetime``, ms since the epoch (UTC).
    """

    mode: str
    offset: int | None = None
    per_partition: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp_ms: int | None = None

    def describe(self) -> str:
        """``earliest``, ``latest``, ``offset 5``, ``offset orders:0=5, ...`` (``, the others
        where the process stands`` without a plain ``N``) or
        ``datetime 2026-12-01T05:00:00.000+00:00 (1796101200000 ms)``."""
        if self.mode == "offset":
            parts = [] if self.offset is None else [str(self.offset)]
            parts += [f"{t}:{p}={o}" for (t, p), o in sorted(self.per_partition.items())]
            if self.offset is None:
                parts.append("the others where the process stands")
            return "offset " + ", ".join(parts)
        if self.mode == "datetime":
            assert self.timestamp_ms is not None
            return f"datetime {iso_utc(self.timestamp_ms)} ({self.timestamp_ms} ms)"
        return self.mode


def iso_utc(ms: int) -> str:
    """``2026-12-01T05:00:00.000+00:00``: the form ``kafka-consumer-groups --to-datetime``
    reads (UTC, milliseconds)."""
    t = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}+00:00"


def parse_target(*, to_earliest: bool = False, to_latest: bool = False,
                 to_offset: Sequence[str] = (), to_datetime: str | None = None) -> Target:
    """The one target the options name (pure).

    Args:
        to_earliest, to_latest: the flags.
        to_offset: ``N`` (every partition) and/or ``TOPIC:PARTITION=N`` entries.
        to_datetime: ISO 8601; without a UTC offset it is read as UTC.

    Returns:
        The :class:`Target`.

    Raises:
        ValueError: none or several modes, a malformed entry, a negative offset,
            two defaults, or a time that is not ISO 8601.
    """
    chosen = [m for m, on in (("earliest", to_earliest), ("latest", to_latest),
                              ("offset", bool(to_offset)),
                              ("datetime", to_datetime is not None)) if on]
    if len(chosen) != 1:
        raise ValueError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                         f"--to-datetime (got {chosen or 'none'})")
    mode = chosen[0]
    if mode == "offset":
        default: int | None = None
        per: dict[tuple[str, int], int] = {}
        for entry in to_offset:
            where, eq, value = entry.rpartition("=")
            try:
                offset = int(value)
            except ValueError:
                raise ValueError(f"--to-offset {entry!r}: give N or TOPIC:PARTITION=N") from None
            if offset < 0:
                raise ValueError(f"--to-offset {entry!r}: an offset is >= 0")
            if not eq:
                if default is not None:
                    raise ValueError("--to-offset N given twice")
                default = offset
                continue
            topic, colon, part = where.rpartition(":")
            if not colon or not topic or not part.isdigit():
                raise ValueError(f"--to-offset {entry!r}: give N or TOPIC:PARTITION=N")
            per[(topic, int(part))] = offset
        return Target("offset", offset=default, per_partition=per)
    if mode == "datetime":
        assert to_datetime is not None
        try:
            when = dt.datetime.fromisoformat(to_datetime.strip())
        except ValueError:
            raise ValueError(f"--to-datetime {to_datetime!r} is not ISO 8601 "
                             "(2026-12-01T05:00:00Z, 2026-12-01T06:00:00+01:00)") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
        return Target("datetime", timestamp_ms=round(when.timestamp() * 1000))
    return Target(mode)


@dataclass(frozen=True)
class PartitionBoundary:
    """One received partition at the reset.

    Attributes:
        topic, partition: the channel.
        committed: the group's committed offset before the reset (``None``: none).
        metadata: that commit's metadata (``parsley.bootstrap``, the task's, or other).
        log_start: the partition's earliest offset.
        log_end: its last stable offset (``read_committed`` latest).
        covered: the ordering state's covered position (inclusive) on it, ``None``
            when the state never covered it; ``FED_TO_END`` for a deleted topic.
        held: messages of it held in the ordering state, which the reset discards.
        chosen: the read position the reset commits (next offset to fetch).
    """

    topic: str
    partition: int
    committed: int | None
    metadata: str | None
    log_start: int
    log_end: int
    covered: int | None
    held: int
    chosen: int

    def as_dict(self) -> dict[str, Any]:
        """The record's form of this partition."""
        return {"topic": self.topic, "partition": self.partition,
                "committed": self.committed, "committed_metadata": self.metadata,
                "log_start": self.log_start, "log_end": self.log_end,
                "covered": None if self.covered == FED_TO_END else self.covered,
                "fed_to_end": self.covered == FED_TO_END, "held": self.held,
                "chosen": self.chosen}


def current_positions(
    heads: Mapping[tuple[str, int], int],
    covered: Mapping[tuple[str, int], int],
    committed: Mapping[tuple[str, int], tuple[int, str]],
) -> dict[tuple[str, int], int]:
    """Where the process stands on each partition: the first offset it has not delivered (pure).

    The head of a channel's held messages where it holds any (they are re-read and
    delivered in the new lifetime rather than discarded with the ordering state); else
    the coverage + 1 (what it reads next: docs/model.md, "Covered and settled"), or the
    group's committed offset where a task's transaction committed it past that (past
    trailing markers and aborted records it never fed: docs/failing-closed.md, "Read
    positions"; nothing is read twice, and retention emptying the partition leaves the
    position at the log start); else the group's committed offset. A channel fed to its
    end (a deleted topic) has none.

    Args:
        heads: ``{(topic, partition): held head}`` from the ordering state.
        covered: ``{(topic, partition): covered position}`` from the ordering state.
        committed: ``{(topic, partition): (offset, metadata)}`` of the group.

    Returns:
        ``{(topic, partition): offset}`` for every partition one of the three names.
    """
    out = {k: o for k, (o, _m) in committed.items()}
    for k, c in covered.items():
        if c == FED_TO_END:
            continue
        offset, metadata = committed.get(k, (-1, ""))
        out[k] = offset if metadata == TASK_METADATA and offset > c + 1 else c + 1
    out.update(heads)
    return out


def choose_positions(
    target: Target,
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    by_time: Mapping[tuple[str, int], int] | None = None,
    current: Mapping[tuple[str, int], int] | None = None,
) -> dict[tuple[str, int], int]:
    """The read position of each received partition under ``target`` (pure).

    Args:
        target: the :class:`Target`.
        bounds: ``{(topic, partition): (log start, log end)}`` of every received partition.
        by_time: with ``datetime``, ``{(topic, partition): offset}`` ListOffsets answered
            for the time (``-1``: no record at or after it, so the log end, as
            ``kafka-consumer-groups --to-datetime`` does).
        current: with ``offset`` and no default ``N``, where the process stands on each
            partition (:func:`current_positions`): the partitions no
            ``TOPIC:PARTITION=N`` names are left there.

    Returns:
        ``{(topic, partition): offset}`` for every key of ``bounds``.

    Raises:
        ResetRefused: an offset outside ``[log start, log end]`` (below the start, the
            first fetch refuses ``POSITIONS_DISCARDED_UNREAD``; beyond the end, the
            position names records that do not exist), a ``TOPIC:PARTITION`` that is
            not a received partition, or a partition neither an entry nor ``current``
            gives an offset for.
    """
    out: dict[tuple[str, int], int] = {}
    if target.mode == "offset":
        unknown = sorted(k for k in target.per_partition if k not in bounds)
        if unknown:
            raise ResetRefused(
                f"--to-offset names {[f'{t}:{p}' for t, p in unknown]}, not received "
                f"partitions of the process (they are {[f'{t}:{p}' for t, p in sorted(bounds)]})")
        bad: list[str] = []
        unset: list[str] = []
        for key, (start, end) in sorted(bounds.items()):
            offset = target.per_partition.get(key, target.offset)
            if offset is None:
                offset = (current or {}).get(key)
            if offset is None:
                unset.append(f"{key[0]}:{key[1]}")
                continue
            if not start <= offset <= end:
                bad.append(f"{key[0]}:{key[1]} offset {offset} (log start {start}, end {end})")
            out[key] = offset
        if unset:
            raise ResetRefused(f"--to-offset gives no offset for {unset}, and the process "
                               "has no position there to leave it at (no ordering state "
                               "covers it and the group committed none); add --to-offset "
                               "TOPIC:PARTITION=N for it, or --to-offset N for every "
                               "partition not named")
        if bad:
            raise ResetRefused(
                f"offsets outside their partition's retained range: {bad}. Below the log "
                "start the first fetch refuses POSITIONS_DISCARDED_UNREAD; beyond the end "
                "no such record exists. Choose an offset in [log start, log end].")
        return out
    for key, (start, end) in bounds.items():
        if target.mode == "earliest":
            out[key] = start
        elif target.mode == "latest":
            out[key] = end
        elif target.mode == "datetime":
            found = (by_time or {}).get(key, -1)
            out[key] = end if found < 0 else min(max(found, start), end)
        else:
            raise ValueError(f"unknown reset mode {target.mode!r}")
    return out


def members_refusal(group: str, members: Sequence[GroupMember], waited_s: float,
                    bootstrap_servers: str) -> ResetRefused:
    """The refusal naming every live member of ``group`` (pure; docs/runbooks.md,
    "Resetting a process": a live worker commits offsets and writes the changelog
    underneath the reset)."""
    named = "; ".join(sorted(m.describe() for m in members))
    return ResetRefused(
        f"group '{group}' still has {len(members)} live member(s) after {waited_s:g} s: "
        f"[{named}]. A live member commits offsets and writes the changelog underneath a "
        "reset. Stop every coordinator running the process (parsley-coordinator stop) and "
        "any other consumer of the group, check with kafka-consumer-groups "
        f"--bootstrap-server {bootstrap_servers} --describe --group {group} --members, "
        "then run the reset again.")


# ------------------------------------------------------------------ the plan (pure)


@dataclass(frozen=True)
class ResetPlan:
    """What a reset of one process will do, with the boundary it reads (the record).

    Attributes:
        process: the process name.
        prefix: the application id prefix.
        bootstrap_servers: the cluster, for the printed commands.
        target: the :class:`Target`.
        partitions: every received partition, in (topic, partition) order.
        ordering_changelog: its name, and whether it exists (``changelogs``).
        changelogs: ``{name: exists}``: the ordering changelog, then each store's.
        local_state: ``<state_dir>/<app-id>``.
        read_at_ms: when the boundary was read, ms since the epoch.
        ordering_state: ``absent``, ``read (<n> partition(s))`` or ``unreadable: <detail>``
            (the held and covered figures are then unknown, not zero).
        last_status: the process's entry in the last report ``run`` kept in the state
            dir, with its exit time and code, or ``None`` when there is none.
    """

    process: str
    prefix: str
    bootstrap_servers: str
    target: Target
    partitions: tuple[PartitionBoundary, ...]
    ordering_changelog: str
    changelogs: Mapping[str, bool]
    local_state: Path
    read_at_ms: int
    ordering_state: str = "absent"
    last_status: Mapping[str, Any] | None = None

    @property
    def group(self) -> str:
        """``<prefix>-<process>``: the application id and consumer group."""
        return application_id(self.prefix, self.process)

    @property
    def positions(self) -> dict[tuple[str, int], int]:
        """``{(topic, partition): chosen offset}``."""
        return {(b.topic, b.partition): b.chosen for b in self.partitions}

    def kafka_commands(self) -> list[str]:
        """The Kafka CLI commands the reset stands for, in its order (the tools' names as
        docs/runbooks.md writes them). The positions are shown with ``--dry-run``: the
        tool commits without the metadata ``parsley.bootstrap``, and such a commit over
        no ordering state refuses the next start ``ORDERING_STATE_LOST``."""
        s = shlex.quote(self.bootstrap_servers)
        out = [f"kafka-topics --bootstrap-server {s} --delete --if-exists --topic "
               f"{shlex.quote(name)}" for name in self.changelogs]
        out.append(f"kafka-consumer-groups --bootstrap-server {s} --delete --group "
                   f"{shlex.quote(self.group)}")
        base = (f"kafka-consumer-groups --bootstrap-server {s} --group "
                f"{shlex.quote(self.group)} --reset-offsets")
        by_topic: dict[str, list[int]] = {}
        for b in self.partitions:
            by_topic.setdefault(b.topic, []).append(b.partition)
        if self.target.mode == "offset":
            for b in self.partitions:
                out.append(f"{base} --topic {shlex.quote(f'{b.topic}:{b.partition}')} "
                           f"--to-offset {b.chosen} --dry-run")
        else:
            topics = " ".join(f"--topic {shlex.quote(t)}" for t in by_topic)
            how = {"earliest": "--to-earliest", "latest": "--to-latest"}.get(self.target.mode)
            if how is None:
                assert self.target.timestamp_ms is not None
                how = f"--to-datetime {iso_utc(self.target.timestamp_ms)}"
            out.append(f"{base} {topics} {how} --dry-run")
        out.append(f"rm -rf {shlex.quote(str(self.local_state))}")
        return out

    def lines(self) -> list[str]:
        """The plan as text, one step or partition a line."""
        out = [f"reset of process '{self.process}' (group {self.group}) to "
               f"{self.target.describe()}"]
        for name, exists in self.changelogs.items():
            out.append(f"  delete changelog {name}" + ("" if exists else " (absent)"))
        out.append(f"  ordering state: {self.ordering_state}")
        out.append(f"  delete the committed offsets of group {self.group}, then commit "
                   f"(metadata {BOOTSTRAP_METADATA}):")
        for b in self.partitions:
            was = "none" if b.committed is None else str(b.committed)
            cov = ("never" if b.covered is None else "fed to end" if b.covered == FED_TO_END
                   else str(b.covered))
            out.append(f"    {b.topic}[{b.partition}] {was} -> {b.chosen}  (log {b.log_start}.."
                       f"{b.log_end}, covered {cov}, held {b.held})")
        out.append(f"  remove local state {self.local_state} (on every other machine that "
                   "ran the process too)")
        return out

    def record(self) -> dict[str, Any]:
        """The boundary record (docs/runbooks.md, "Resetting a process", "Record the
        boundary"): what was committed, retained, covered and held before, and the
        positions chosen."""
        return {"process": self.process, "group": self.group, "prefix": self.prefix,
                "bootstrap_servers": self.bootstrap_servers,
                "target": self.target.describe(), "read_at_ms": self.read_at_ms,
                "read_at": iso_utc(self.read_at_ms),
                "changelogs_deleted": [n for n, e in self.changelogs.items() if e],
                "ordering_state": self.ordering_state, "last_status": self.last_status,
                "partitions": [b.as_dict() for b in self.partitions]}
