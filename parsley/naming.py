"""Names on the cluster, the task width, and the start-time check of declarations.

Composes the application id, changelog topics, transactional and group
instance ids of a process; :func:`validate_declarations` is the check the
coordinator runs at start (docs/architecture.md, "The bootstrap", step 1).

Source: docs/operations.md, "Names on the cluster".
Re-exported by :mod:`parsley.declarations`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from parsley.channels import MAX_TOPIC_NAME, RESERVED_NAME_PREFIX, check_name
from parsley.process import Process

__all__ = [
    "TASK_ID_MIN_DIGITS",
    "application_id",
    "group_instance_id",
    "ordering_changelog",
    "store_changelog",
    "task_width",
    "transactional_id",
    "validate_declarations",
]

TASK_ID_MIN_DIGITS: Final = 3
"""Task numbers in transactional and group instance ids are zero-padded to at
least this many digits (``task-007``), so the ids sort in task order."""

def application_id(prefix: str, process: str) -> str:
    """``<prefix>-<process>``: the application id and consumer group of a process."""
    return f"{prefix}-{process}"


def ordering_changelog(prefix: str, process: str) -> str:
    """``<prefix>-<process>-__parsley.ordering-changelog``: the ordering state's topic."""
    return f"{application_id(prefix, process)}-{RESERVED_NAME_PREFIX}ordering-changelog"


def store_changelog(prefix: str, process: str, store: str) -> str:
    """``<prefix>-<process>-<store>-changelog``: a declared store's changelog topic."""
    return f"{application_id(prefix, process)}-{store}-changelog"


def _task_suffix(task: int, task_count: int | None) -> str:
    if not isinstance(task, int) or task < 0:
        raise ValueError(f"a task number is an int >= 0, got {task!r}")
    digits = TASK_ID_MIN_DIGITS
    if task_count is not None:
        if task >= task_count:
            raise ValueError(f"task {task} is outside 0..{task_count - 1}")
        digits = max(digits, len(str(task_count - 1)))
    return f"task-{task:0{digits}d}"


def transactional_id(prefix: str, process: str, task: int, task_count: int | None = None) -> str:
    """``<prefix>-<process>-task-<i>``, ``<i>`` zero-padded (``task-007``).

    The producer's ``transactional.id`` for task ``i``; ``init_transactions``
    with it fences any zombie of the same task (docs/operations.md, "Fenced: a successor or a
    timeout").

    Args:
        prefix: the application id prefix.
        process: the process name.
        task: the task number, 0-based.
        task_count: the process's task width W. Padding is
            :data:`TASK_ID_MIN_DIGITS` digits, or as many as W - 1 needs when
            W > 1000; pass it so ids sort in task order at any width.

    Raises:
        ValueError: a negative task, or one not below ``task_count``.
    """
    return f"{application_id(prefix, process)}-{_task_suffix(task, task_count)}"


def group_instance_id(prefix: str, process: str, task: int, task_count: int | None = None) -> str:
    """The consumer's static ``group.instance.id`` for task ``i``: same form as the
    transactional id, ``<prefix>-<process>-task-<i>`` zero-padded, so that the
    range assignor, which orders static members by instance id, hands
    partition ``i`` to task ``i`` (docs/operations.md, "Names on the
    cluster"). Arguments and errors as
    :func:`transactional_id`.
    """
    return f"{application_id(prefix, process)}-{_task_suffix(task, task_count)}"


def task_width(partition_counts: Mapping[str, int] | Iterable[int]) -> int:
    """W, a process's task count: the widest received topic's partition count.

    Task ``i`` receives partition ``i`` of every received topic with more than
    ``i`` partitions (docs/operations.md, "Broker outage"; docs/failing-closed.md,
    TASK_WIDTH_CHANGED).

    Args:
        partition_counts: partition count per received topic (a mapping by
            name, or the counts alone).

    Raises:
        ValueError: no topics, or a count below 1.
    """
    counts = list(partition_counts.values() if isinstance(partition_counts, Mapping)
                  else partition_counts)
    if not counts:
        raise ValueError("a process's task width needs at least one received topic")
    if any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"partition counts must be ints >= 1, got {counts}")
    return int(max(counts))


def validate_declarations(prefix: str, processes: Iterable[Process]) -> None:
    """The start-time check of a set of declarations.

    Step 1 of docs/architecture.md, "The bootstrap".

    Checks: a legal, unreserved prefix; at least one process; unique process
    names; every process receives something; every composed cluster name is a
    legal topic name; composed changelog names distinct across all processes;
    no declared topic (received or sent) equal to a composed changelog name.

    Args:
        prefix: the application id prefix.
        processes: the processes to start together.

    Raises:
        ValueError: naming the first problem found.
        TypeError: something other than a Process.
    """
    check_name("application id prefix", prefix)
    procs = list(processes)
    if not procs:
        raise ValueError("at least one process must be declared")
    seen: set[str] = set()
    for p in procs:
        if not isinstance(p, Process):
            raise TypeError(f"expected a Process, got {type(p).__name__}")
        if p.name in seen:
            raise ValueError(f"process name '{p.name}' is declared twice")
        seen.add(p.name)
        if not p.inputs:
            raise ValueError(
                f"process '{p.name}' receives nothing; declare receives(channel, handler)"
            )
    owners: dict[str, str] = {}
    for p in procs:
        composed = [(ordering_changelog(prefix, p.name), f"the ordering changelog of '{p.name}'")]
        composed += [
            (store_changelog(prefix, p.name, s.name),
             f"the changelog of store '{s.name}' of '{p.name}'")
            for s in p.declared_stores
        ]
        for name, what in composed:
            if len(name) > MAX_TOPIC_NAME:
                raise ValueError(f"{what}, '{name[:60]}...', is longer than {MAX_TOPIC_NAME} "
                                 "characters; shorten the prefix, process or store name")
            if name in owners:
                raise ValueError(f"{what} and {owners[name]} both compose the name '{name}'")
            owners[name] = what
    for p in procs:
        topics = [c.name for c in (*(i.channel for i in p.inputs), *p.outputs)]
        for topic in topics:
            if topic in owners:
                raise ValueError(f"process '{p.name}' declares topic '{topic}', which is "
                                 f"{owners[topic]}")
