"""Aggregated status per process: what ``status()`` returns and the socket serves.

The Python objects mirror the JSON with the same field names
(:meth:`ProcessStatus.to_json`, :meth:`ProcessStatus.from_json`); ``ProcessStatus.state``
is a :class:`ProcessState` and ``TaskStatus.state`` a :class:`TaskState` (the worker's
own enum, ``workers.protocol``), ``str`` enums whose values are the JSON strings. A task's
entry is its last report, aged by ``updated_ms_ago``; one older than three status intervals
is ``stale`` (docs/failing-closed.md, "Diagnosis"). ``caught_up`` is derived, never parsed.
The JSON form, staleness and ``caught_up`` are in docs/architecture.md, "The coordinator",
"The status document", and docs/operations.md, "Status".
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from parsley.refusals import Reason
from parsley.status import Blocker, HeldChannel, HoldClass
from workers.protocol import TaskState

__all__ = [
    "STALE_INTERVALS",
    "ProcessState",
    "ProcessStatus",
    "RecoveryStatus",
    "RestoreStatus",
    "TaskState",
    "TaskStatus",
    "aggregate_state",
    "parse_status",
    "process_state",
    "status_to_json",
    "task_status_from_report",
]

STALE_INTERVALS: Final = 3
"""An entry older than this many status intervals is flagged stale (docs/operations.md,
"Status")."""


class ProcessState(enum.StrEnum):
    """A process's state as ``status()`` reports it (docs/failing-closed.md; docs/runbooks.md,
    "Triage").

    A ``str`` enum like :class:`TaskState`: each member is its JSON string.
    """

    STARTING = "STARTING"
    """Workers spawned; not every task reports RUNNING yet (a task whose worker
    exited and waits for its respawn counts as starting)."""
    RUNNING = "RUNNING"
    """Every task reports RUNNING."""
    REBALANCING = "REBALANCING"
    """A task is restoring its changelog or its consumer's assignment is moving."""
    STOPPED = "STOPPED"
    """Stopped: by a refusal (``refusal_reason``), a failure (``failure_detail`` only),
    or closed by the application (neither)."""


@dataclass(frozen=True, slots=True)
class RecoveryStatus:
    """A task recovering in place (docs/operations.md, "The task timeout").

    Attributes:
        stalled_s: s since the first failure not followed by progress.
        attempts: recoveries begun since then.
        timeout_s: the task timeout, s: past it the task stops SUBSTRATE.
        cause: the last failure's detail.
    """

    stalled_s: float
    attempts: int
    timeout_s: float
    cause: str | None

    def to_json(self) -> dict[str, Any]:
        """``{"stalled_s", "attempts", "timeout_s", "cause"}``."""
        return {"stalled_s": self.stalled_s, "attempts": self.attempts,
                "timeout_s": self.timeout_s, "cause": self.cause}


@dataclass(frozen=True, slots=True)
class RestoreStatus:
    """A task's changelog restore progress.

    Attributes:
        records: records read so far.
        position: next offset to read.
        end: offset the restore reads up to (exclusive).
        done: the restore reached ``end``.
    """

    records: int
    position: int
    end: int
    done: bool

    def to_json(self) -> dict[str, Any]:
        """``{"records", "position", "end", "done"}``."""
        return {"records": self.records, "position": self.position, "end": self.end,
                "done": self.done}


@dataclass(frozen=True, slots=True)
class TaskStatus:
    """One task's entry, from its worker's last status report.

    Attributes:
        task: the task index.
        pid: the worker's OS process id.
        state: the worker's own :class:`TaskState` (``STARTING``, ``RESTORING``,
            ``RUNNING``, ``REBALANCING``).
        held: per channel with held messages: count, head, blockers.
        frontier_channels: channels the frontier names.
        frontier_bytes: the frontier's encoded size, bytes.
        budget_bytes: the metadata budget, bytes.
        lag: offsets behind the log end summed over the task's partitions, or
            ``None`` when not known yet.
        restore: restore progress, or ``None``.
        rss_bytes: the worker's resident memory, bytes (psutil).
        cpu_percent: the worker's CPU use, percent of one core (psutil).
        updated_ms_ago: ms since the worker sent the report (its ``sent_ms``; the
            coordinator reads a late one as that old).
        stale: ``updated_ms_ago`` is beyond three status intervals.
        cross_partition_causes: messages accepted with a cause on another task's
            partition of a received topic, carried unenforced (docs/failing-closed.md,
            ``CROSS_PARTITION_CAUSE``).
        waited: heads the task's current execution found waiting for a cause not
            delivered yet, each counted once (:class:`parsley.status.TaskDiagnosis`).
        recovery: while the task recovers in place from a fault, how long and why, else
            ``None`` (docs/operations.md, "The task timeout").
        recoveries: in-place recoveries its worker completed.
    """

    task: int
    pid: int
    state: TaskState
    held: tuple[HeldChannel, ...]
    frontier_channels: int
    frontier_bytes: int
    budget_bytes: int
    lag: int | None
    restore: RestoreStatus | None
    rss_bytes: int | None
    cpu_percent: float | None
    updated_ms_ago: int
    stale: bool
    cross_partition_causes: int = 0
    waited: int = 0
    recovery: RecoveryStatus | None = None
    recoveries: int = 0

    @property
    def held_count(self) -> int:
        """Messages held across the task's channels."""
        return sum(h.count for h in self.held)

    @property
    def caught_up(self) -> bool:
        """``RUNNING``, not stale, lag known and 0, nothing held (module docstring)."""
        return (self.state is TaskState.RUNNING and not self.stale and self.lag == 0
                and not self.held)

    def to_json(self) -> dict[str, Any]:
        """The task's JSON object (module docstring)."""
        return {
            "task": self.task,
            "pid": self.pid,
            "state": self.state.value,
            "held": [h.to_json() for h in self.held],
            "frontier_channels": self.frontier_channels,
            "frontier_bytes": self.frontier_bytes,
            "budget_bytes": self.budget_bytes,
            "lag": self.lag,
            "restore": None if self.restore is None else self.restore.to_json(),
            "rss_bytes": self.rss_bytes,
            "cpu_percent": self.cpu_percent,
            "updated_ms_ago": self.updated_ms_ago,
            "stale": self.stale,
            "cross_partition_causes": self.cross_partition_causes,
            "waited": self.waited,
            "recovery": None if self.recovery is None else self.recovery.to_json(),
            "recoveries": self.recoveries,
            "caught_up": self.caught_up,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> TaskStatus:
        """Parse :meth:`to_json`'s form (missing optional fields default to ``None``;
        ``caught_up`` is derived, not read).

        Raises:
            KeyError, TypeError, ValueError: a malformed object or an unknown state.
        """
        return cls(
            task=int(obj["task"]),
            pid=int(obj["pid"]),
            state=TaskState(str(obj.get("state", "RUNNING"))),
            held=_held(obj.get("held") or ()),
            frontier_channels=int(obj.get("frontier_channels", 0)),
            frontier_bytes=int(obj.get("frontier_bytes", 0)),
            budget_bytes=int(obj.get("budget_bytes", 0)),
            lag=None if obj.get("lag") is None else int(obj["lag"]),
            restore=_restore(obj.get("restore")),
            rss_bytes=None if obj.get("rss_bytes") is None else int(obj["rss_bytes"]),
            cpu_percent=None if obj.get("cpu_percent") is None else float(obj["cpu_percent"]),
            updated_ms_ago=int(obj.get("updated_ms_ago", 0)),
            stale=bool(obj.get("stale", False)),
            cross_partition_causes=int(obj.get("cross_partition_causes", 0)),
            waited=int(obj.get("waited", 0)),
            recovery=_recovery(obj.get("recovery")),
            recoveries=int(obj.get("recoveries", 0)),
        )


def _held(items: Iterable[Mapping[str, Any]]) -> tuple[HeldChannel, ...]:
    return tuple(
        HeldChannel(
            topic=str(h["topic"]), partition=int(h["partition"]), count=int(h["count"]),
            head=int(h["head"]),
            blockers=tuple(
                Blocker(str(b["topic"]), int(b["partition"]), int(b["required"]),
                        None if b.get("settled") is None else int(b["settled"]),
                        None if b.get("class") is None else HoldClass(b["class"]),
                        None if b.get("last_stable") is None else int(b["last_stable"]),
                        None if b.get("end") is None else int(b["end"]))
                for b in h.get("blockers") or ()
            ),
        )
        for h in items
    )


def _recovery(obj: Mapping[str, Any] | None) -> RecoveryStatus | None:
    if not obj:
        return None
    cause = obj.get("cause")
    return RecoveryStatus(float(obj.get("stalled_s", 0.0)), int(obj.get("attempts", 0)),
                          float(obj.get("timeout_s", 0.0)), None if cause is None else str(cause))


def _restore(obj: Mapping[str, Any] | None) -> RestoreStatus | None:
    if not obj:
        return None
    return RestoreStatus(int(obj.get("records", 0)), int(obj.get("position", 0)),
                         int(obj.get("end", 0)), bool(obj.get("done", False)))


def task_status_from_report(
    report: Mapping[str, Any],
    *,
    age_ms: int,
    status_interval_ms: int,
    rss_bytes: int | None = None,
    cpu_percent: float | None = None,
) -> TaskStatus:
    """Build a task entry from a worker's ``"status"`` message (``workers.protocol``).

    The message carries the entry's fields under the same names, so it is
    parsed by :meth:`TaskStatus.from_json`, with the coordinator's own
    figures (age, staleness, and memory and CPU when measured) laid over it.

    Args:
        report: the decoded status message.
        age_ms: ms since the worker sent it.
        status_interval_ms: the status interval, ms (stale beyond 3x).
        rss_bytes: resident memory measured by the coordinator (psutil), else
            the worker's own figure.
        cpu_percent: CPU measured by the coordinator, else the worker's own.

    Raises:
        KeyError, TypeError, ValueError: a malformed report.
    """
    fields = dict(report)
    if rss_bytes is not None:
        fields["rss_bytes"] = rss_bytes
    if cpu_percent is not None:
        fields["cpu_percent"] = cpu_percent
    fields["updated_ms_ago"] = max(0, int(age_ms))
    fields["stale"] = age_ms > STALE_INTERVALS * status_interval_ms
    return TaskStatus.from_json(fields)


def aggregate_state(task_states: Iterable[TaskState | str | None]) -> ProcessState:
    """A live process's state from its tasks' states (``None``: no report yet).

    A state may be a :class:`TaskState` or a report's raw string (a ``str`` enum
    compares equal to its value). No report from some task, or any task
    STARTING: ``STARTING``; any task ``RESTORING`` or ``REBALANCING``:
    ``REBALANCING``; all ``RUNNING``: ``RUNNING``.
    """
    states = list(task_states)
    if not states or any(s is None or s == TaskState.STARTING for s in states):
        return ProcessState.STARTING
    if all(s == TaskState.RUNNING for s in states):
        return ProcessState.RUNNING
    return ProcessState.REBALANCING


def process_state(task_count: int,
                  task_states: Mapping[int, TaskState | str | None]) -> ProcessState:
    """A live process's state over all of its ``task_count`` tasks (pure).

    Every task ``0 <= i < task_count`` counts: one absent from ``task_states``
    (its worker exited and waits for a respawn, or is not spawned yet) counts
    as having no report, i.e. ``STARTING``, so the process is not ``RUNNING``
    until every task is back and reports RUNNING (docs/failing-closed.md, "Diagnosis").

    Args:
        task_count: W, the process's task count (>= 1).
        task_states: ``{task: its last reported state, or None without a report}``
            for the tasks whose worker has not ended (no final message, no exit);
            entries outside the range are ignored.

    Returns:
        :func:`aggregate_state` over ``task_states.get(i)`` for every task ``i``.
    """
    return aggregate_state(task_states.get(i) for i in range(task_count))


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    """One process's status (Java ``ProcessStatus``; docs/runbooks.md, "If a process stopped after
    start").

    Attributes:
        state: :class:`ProcessState`.
        refusal_reason: the refusal that stopped it, or ``None``.
        failure_detail: the diagnosis of a refusal, or a failure's detail, or
            ``None`` (running, or closed by the application).
        tasks: one entry per running task with a report, in task order.
        restarts: restarts the coordinator's policy made for this process.
    """

    state: ProcessState
    refusal_reason: Reason | None
    failure_detail: str | None
    tasks: tuple[TaskStatus, ...] = ()
    restarts: int = 0

    @property
    def held_count(self) -> int:
        """Messages held across all tasks."""
        return sum(t.held_count for t in self.tasks)

    @property
    def caught_up(self) -> bool:
        """``RUNNING`` with at least one task entry, and every entry caught up
        (:attr:`TaskStatus.caught_up`)."""
        return (self.state is ProcessState.RUNNING and bool(self.tasks)
                and all(t.caught_up for t in self.tasks))

    def to_json(self) -> dict[str, Any]:
        """The process's JSON object (module docstring)."""
        return {
            "state": self.state.value,
            "refusal_reason": None if self.refusal_reason is None else self.refusal_reason.name,
            "failure_detail": self.failure_detail,
            "restarts": self.restarts,
            "tasks": [t.to_json() for t in self.tasks],
            "caught_up": self.caught_up,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ProcessStatus:
        """Parse :meth:`to_json`'s form.

        Raises:
            KeyError, TypeError, ValueError: a malformed object or an unknown reason.
        """
        reason = obj.get("refusal_reason")
        return cls(
            state=ProcessState(obj["state"]),
            refusal_reason=None if reason is None else Reason(reason),
            failure_detail=obj.get("failure_detail"),
            tasks=tuple(TaskStatus.from_json(t) for t in obj.get("tasks") or ()),
            restarts=int(obj.get("restarts", 0)),
        )


def status_to_json(statuses: Mapping[str, ProcessStatus]) -> dict[str, Any]:
    """``{"processes": {name: ProcessStatus JSON}}``."""
    return {"processes": {name: s.to_json() for name, s in statuses.items()}}


def parse_status(obj: Mapping[str, Any]) -> dict[str, ProcessStatus]:
    """Inverse of :func:`status_to_json`.

    Raises:
        KeyError, TypeError, ValueError: a malformed document.
    """
    return {name: ProcessStatus.from_json(p) for name, p in obj["processes"].items()}
