"""The seam between the coordinator and a task worker: what a worker is given and what it reports.

The coordinator resolves everything at bootstrap (topic ids, partition counts, start
positions) and hands one :class:`TaskSpec` to each worker OS process it spawns
(``multiprocess`` spawn context; the spec pickles with dill, so handlers may be closures).
The worker connects a ZeroMQ ``PUSH`` socket to ``spec.status_endpoint`` and sends orjson
messages: a :data:`STATUS` message every status interval from its own loop and one
:data:`FINAL` message when it stops (their shapes: those constants; times in ms since the
epoch, sizes in bytes). The coordinator never reads message text to decide anything: it
branches on :class:`StopKind` and the refusal reason (docs/operations.md, "Supervision").

Exit codes mirror the stop kind (:data:`EXIT_CODES`), so a worker whose final message was
lost is still classified; a refusal's exit code also carries its reason
(:func:`exit_code_for`: ``64 + index`` of the reason in :class:`parsley.refusals.Reason`;
10 stays "refusal, reason unknown"). Any other exit is :attr:`StopKind.CRASHED`;
:func:`exit_verdict` reads an exit status back (docs/architecture.md, "The worker",
"Stop verdicts").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from parsley.declarations import Process
from parsley.refusals import Reason

__all__ = [
    "DEFAULT_TASK_TIMEOUT_MS",
    "EXIT_CODES",
    "FINAL",
    "REFUSAL_EXIT_BASE",
    "STATUS",
    "ExitVerdict",
    "StopKind",
    "TaskSpec",
    "TaskState",
    "exit_code_for",
    "exit_verdict",
    "stop_kind_of_exit",
]

STATUS: Final = "status"
"""``status`` — sent every ``status_interval_ms`` from the task's own loop, so a
stalled loop shows as an ageing entry (docs/failing-closed.md, "Diagnosis")::

    {"kind": "status", "process": str, "task": int, "pid": int, "sent_ms": int,
     "state": "STARTING" | "RESTORING" | "RUNNING" | "REBALANCING",
     "held": [ {"topic", "partition", "count", "head",
                "blockers": [{"topic", "partition", "required", "settled"}]} ],
     "held_total": int, "frontier_channels": int, "frontier_bytes": int, "budget_bytes": int,
     "lag": int | None,                       # sum over owned partitions, offsets
     "restore": {"records": int, "position": int, "end": int, "done": bool,
                 "checkpoint": bool} | None,   # checkpoint: local stores trusted
     "delivered": int, "commits": int, "commit_latency_ms": float | None,
     "metrics": METRICS,
     "rss_bytes": int, "cpu_percent": float}
"""
FINAL: Final = "final"
"""``final`` — exactly one, as the worker's last message::

    {"kind": "final", "process": str, "task": int, "pid": int, "sent_ms": int,
     "stop_kind": StopKind value, "refusal_reason": Reason name | None,
     "failure_detail": str | None, "metrics": METRICS}   # metrics: absent if none

``METRICS`` — the worker's counters since it started, never decreasing within one
worker (the coordinator adds up a task's successive workers; docs/operations.md,
"Metrics")::

    {"received": int, "delivered": int,      # in transactions that committed
     "commits": int, "aborts": int,          # transactions
     "handler_batches": int,                 # batch-handler calls, committed
     "transaction_seconds": {"counts": [int, ...], "sum": float},
     "handler_seconds": {"counts": [int, ...], "sum": float}}

with per-bucket (not cumulative) counts over :mod:`workers.histogram`'s bounds.
"""


class TaskState(enum.StrEnum):
    """A running task's lifecycle as its status messages report it.

    A ``str`` enum: each member is its JSON string (``TaskState.RUNNING == "RUNNING"``),
    and the coordinator's ``TaskStatus.state`` is this same type.
    """

    STARTING = "STARTING"
    """Spawned; building clients and checking identity."""
    RESTORING = "RESTORING"
    """Reading its ordering and store changelog partitions to the end."""
    RUNNING = "RUNNING"
    """Consuming, delivering and committing."""
    REBALANCING = "REBALANCING"
    """Its consumer's assignment is not exactly partition ``task`` of each received topic."""
    RECOVERING = "RECOVERING"
    """A client call stalled or the cluster was unreachable: it renews its clients, rebuilds
    its state and rewinds, in place, within the task timeout (docs/operations.md, "The task
    timeout")."""


class StopKind(enum.Enum):
    """How a worker stopped; the restart rule keys on it (docs/runbooks.md, "Fix the restart rule").

    Never derived from message text.
    """

    CLEAN = "CLEAN"
    """Asked to stop (SIGTERM or a stop request) and committed what it had."""
    REFUSAL = "REFUSAL"
    """A :class:`parsley.ParsleyFailClosedError`; ``refusal_reason`` names it."""
    APPLICATION = "APPLICATION"
    """The handler (or application code it calls) raised; the same message would fail again."""
    SUBSTRATE = "SUBSTRATE"
    """A broker, timeout, topic or partition condition that a restart may resolve."""
    FATAL = "FATAL"
    """Fatal client state: fenced by a newer worker for the task, or a fatal producer error."""
    CRASHED = "CRASHED"
    """Died without a final report (killed, segfault, unexpected exit code)."""


EXIT_CODES: Final[Mapping[StopKind, int]] = {
    StopKind.CLEAN: 0,
    StopKind.REFUSAL: 10,
    StopKind.APPLICATION: 11,
    StopKind.SUBSTRATE: 12,
    StopKind.FATAL: 13,
}
"""Worker exit status per stop kind; anything else (or a signal) is :attr:`StopKind.CRASHED`."""

_KIND_OF_CODE: Final = {code: kind for kind, code in EXIT_CODES.items()}

REFUSAL_EXIT_BASE: Final = 64
"""A refusal with a known reason exits ``64 + list(Reason).index(reason)``.

64 is above the stop kinds' codes (0, 10-13) and below 128 (what shells
report for a signal); ``Reason`` has far fewer than 64 members, so every
refusal code stays under 128. The coordinator and its workers run the same
build (spawned from it), so both read the same ``Reason`` order.
"""

_REASONS: Final = tuple(Reason)
assert REFUSAL_EXIT_BASE + len(_REASONS) < 128, "refusal exit codes must stay below 128"


@dataclass(frozen=True, slots=True)
class ExitVerdict:
    """What a worker's exit status says on its own (its final report may be lost).

    Attributes:
        kind: the stop kind; :attr:`StopKind.CRASHED` for a signal or an unknown code.
        reason: the refusal reason when ``kind`` is REFUSAL and the code carried
            it (:func:`exit_code_for`), else ``None`` (exit code 10: reason unknown).
    """

    kind: StopKind
    reason: Reason | None = None


def exit_code_for(kind: StopKind, reason: Reason | None = None) -> int:
    """The exit status a worker stopping with ``kind`` (and ``reason``) should exit with.

    The worker should exit with this rather than ``EXIT_CODES[kind]``, so
    that the coordinator still knows a refusal's reason when the worker's
    final report is lost (read back by :func:`exit_verdict`). ``EXIT_CODES``
    stays valid: 10 is read as "refusal, reason unknown".

    Args:
        kind: how the worker stopped; not :attr:`StopKind.CRASHED` (a worker
            that knows it stops is not a crash).
        reason: the refusal's reason; ignored unless ``kind`` is REFUSAL.

    Returns:
        ``EXIT_CODES[kind]``, or for a REFUSAL with a reason
        ``REFUSAL_EXIT_BASE + index of reason in Reason`` (64..127).

    Raises:
        ValueError: ``kind`` is CRASHED.
    """
    if kind is StopKind.CRASHED:
        raise ValueError("CRASHED is what the coordinator concludes, not an exit a worker chooses")
    if kind is StopKind.REFUSAL and reason is not None:
        return REFUSAL_EXIT_BASE + _REASONS.index(reason)
    return EXIT_CODES[kind]


def exit_verdict(exitcode: int | None) -> ExitVerdict:
    """Classify a worker's exit status (``multiprocess.Process.exitcode``) with its reason.

    Args:
        exitcode: the exit status; negative means killed by that signal
            number, ``None`` means still running (the caller's timeout: crashed).

    Returns:
        The :class:`ExitVerdict`: the kind of an :data:`EXIT_CODES` code
        (reason ``None``), REFUSAL with its reason for a code of
        :func:`exit_code_for`, else CRASHED.
    """
    if exitcode is None:
        return ExitVerdict(StopKind.CRASHED)
    index = exitcode - REFUSAL_EXIT_BASE
    if 0 <= index < len(_REASONS):
        return ExitVerdict(StopKind.REFUSAL, _REASONS[index])
    return ExitVerdict(_KIND_OF_CODE.get(exitcode, StopKind.CRASHED))


def stop_kind_of_exit(exitcode: int | None) -> StopKind:
    """The stop kind of a worker's exit status (``exit_verdict(exitcode).kind``).

    Kept for callers that need only the kind; :func:`exit_verdict` also gives
    a refusal's reason.

    Args:
        exitcode: the exit status; negative means killed by that signal number,
            ``None`` means still running (treated as crashed by the caller's timeout).

    Returns:
        The stop kind whose code it is, else :attr:`StopKind.CRASHED`.
    """
    return exit_verdict(exitcode).kind


DEFAULT_TASK_TIMEOUT_MS: Final = 300_000
"""The task timeout's default, ms: Kafka Streams' ``task.timeout.ms`` (5 min, KIP-572)."""


@dataclass(frozen=True)
class TaskSpec:
    """Everything a worker needs for task ``task`` of one process, resolved by the bootstrap.

    Attributes:
        process: the declaration (pickled into the worker with dill).
        prefix: the application id prefix; the process's application id is ``<prefix>-<process>``.
        task: this task's index ``i`` (0-based); it owns partition ``i`` of each
            received topic that has more than ``i`` partitions.
        task_count: ``W``, the widest received topic's partition count.
        bootstrap_servers: Kafka ``bootstrap.servers``.
        kafka_properties: user client properties (Parsley-owned keys already refused).
        state_dir: root of local state; this task's is ``<state_dir>/<app-id>/<task>``.
        metadata_budget_bytes: the causal metadata budget, bytes (> 0).
        commit_interval_ms: how long a transaction stays open at most, ms.
        status_interval_ms: how often the task pushes status, ms.
        status_endpoint: ZeroMQ endpoint to connect a PUSH socket to.
        topic_ids: declared topic name -> topic id, as resolved at bootstrap.
        partitions: declared topic name -> partition count, as resolved at bootstrap.
        cross_partition_causes: what a cause on another task's partition of a received
            topic does: ``auto``, ``refuse`` or ``warn`` (docs/failing-closed.md,
            "Cross-partition causes").
        task_timeout_ms: how long the task may recover in place without progress before
            it stops SUBSTRATE, ms (docs/operations.md, "The task timeout").
    """

    process: Process
    prefix: str
    task: int
    task_count: int
    bootstrap_servers: str
    status_endpoint: str
    state_dir: str
    topic_ids: Mapping[str, UUID]
    partitions: Mapping[str, int]
    kafka_properties: Mapping[str, Any] = field(default_factory=dict)
    metadata_budget_bytes: int = 262_144
    commit_interval_ms: int = 100
    status_interval_ms: int = 1000
    cross_partition_causes: str = "auto"
    task_timeout_ms: int = DEFAULT_TASK_TIMEOUT_MS
