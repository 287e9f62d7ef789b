"""Spawning a worker: task ``i`` of a planned process as its own OS process (``multiprocess``
spawn context; the :class:`workers.protocol.TaskSpec` pickles with dill).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import multiprocess  # type: ignore[import-untyped]
import psutil  # type: ignore[import-untyped]

from coordinator.bootstrap import ProcessPlan
from coordinator.config import ParsleyConfig
from coordinator.runtime.supervisor.state import Run, SupervisorBase, Task
from workers.protocol import TaskSpec

__all__ = ["Spawning", "WorkerTarget", "report_endpoint"]

log = logging.getLogger("parsley.coordinator.supervisor")


WorkerTarget = Callable[[TaskSpec], int]
"""``run(spec) -> exit code``: a worker's entry point (``workers.main.run``)."""


def _worker_main(target: WorkerTarget, spec: TaskSpec) -> None:
    # Ctrl-C reaches the whole process group; the coordinator alone decides the stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = target(spec)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(int(code) if code is not None else 0)


def _default_target() -> WorkerTarget:
    from workers.main import run  # type: ignore[import-not-found,unused-ignore]

    return run  # type: ignore[no-any-return,unused-ignore]


def report_endpoint(config: ParsleyConfig) -> str:
    """Where the workers push their reports: an ``ipc://`` path under the state dir, or
    loopback TCP when that path would be too long for a socket."""
    base = Path(config.state_dir) / ".coordinator"
    path = base / f"{config.application_id_prefix}-{os.getpid()}-{uuid.uuid4().hex[:6]}.status"
    if len(str(path)) < 100:
        base.mkdir(parents=True, exist_ok=True)
        return f"ipc://{path}"
    return "tcp://127.0.0.1:*"


class Spawning(SupervisorBase):
    """Builds each task's spec and spawns its worker."""

    def _spec(self, plan: ProcessPlan, task: int) -> TaskSpec:
        c = self._config
        return TaskSpec(
            process=plan.process, prefix=plan.prefix, task=task, task_count=plan.task_count,
            bootstrap_servers=c.bootstrap_servers, status_endpoint=self._endpoint,
            state_dir=c.state_dir, topic_ids=plan.topic_ids, partitions=plan.partitions,
            kafka_properties=c.kafka_properties_for(plan.process),
            metadata_budget_bytes=c.metadata_budget_bytes,
            commit_interval_ms=c.commit_interval_ms, status_interval_ms=c.status_interval_ms,
            cross_partition_causes=c.cross_partition_causes,
            task_timeout_ms=c.task_timeout_ms,
        )

    def _spawn(self, plan: ProcessPlan, task: int) -> Task:
        target = self._target or _default_target()
        proc = self._ctx.Process(
            target=_worker_main, args=(target, self._spec(plan, task)),
            name=f"parsley-{plan.application_id}-task-{task}", daemon=True,
        )
        proc.start()
        # One reaper: multiprocess's own bookkeeping reaps finished children from
        # whichever thread starts the next process; ours are reaped by the watch thread.
        multiprocess.process._children.discard(proc)
        pid = int(proc.pid)
        handle: psutil.Process | None
        try:
            handle = psutil.Process(pid)
            handle.cpu_percent(None)
        except psutil.Error:
            handle = None
        log.info("%s: task %d started as pid %d", plan.application_id, task, pid)
        self._observe("spawned", plan.name, task, pid)
        return Task(task, proc, pid, handle)

    def _spawn_all(self, run: Run) -> None:
        run.generation += 1
        run.tasks = {}
        for i in run.indexes():
            run.tasks[i] = self._spawn(run.plan, i)
