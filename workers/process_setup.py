"""What a worker process sets up around its :class:`workers.main.Worker`: logging, the
watchdog and the garbage collector's settings (:func:`tune_collector`).

:func:`start_watchdog` installs the task's :class:`workers.watchdog.Watchdog`: past a
client call's bound, or still blocked 5 s after SIGTERM, it reports SUBSTRATE naming the
call and exits; on the coordinator's death it exits at once without committing
(docs/operations.md, "Bounded client calls", "When the coordinator dies").
"""

from __future__ import annotations

import gc
import logging
import os
import sys
from typing import Final

from parsley.refusals import Reason
from workers.protocol import StopKind, TaskSpec, exit_code_for
from workers.status import final_message, push_final
from workers.watchdog import Action, ActionKind, Watchdog, install

__all__ = ["GC_YOUNG_THRESHOLD", "configure_logging", "in_spawned_child", "set_up_process",
           "start_watchdog", "tune_collector"]

log = logging.getLogger("parsley.worker")


def configure_logging(spec: TaskSpec) -> None:
    """Log INFO and above to stderr, each line naming the process, task and pid (unless the
    host process set up logging already)."""
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(
            level=logging.INFO, stream=sys.stderr,
            format=f"%(asctime)s %(levelname)s [{spec.prefix}-{spec.process.name} "
                   f"task {spec.task} pid %(process)d] %(name)s: %(message)s")


GC_YOUNG_THRESHOLD: Final = 20_000
"""Net container allocations between two young-generation collections of the worker process
(CPython's default is 700). A fetched batch of 500 records holds a few thousand short-lived
objects at once; at 700 the collector ran several times per batch, traversing them, and its
older generations reached the whole imported heap: 9% of the worker's main thread on the
relay benchmark (docs/performance.md, "The collector")."""


def tune_collector() -> None:
    """Set the worker process's cyclic garbage collector up for a record loop: everything
    allocated so far (the imported modules, mostly) is moved out of its reach
    (``gc.freeze``), and a young collection runs every :data:`GC_YOUNG_THRESHOLD` net
    allocations. Garbage without cycles is freed as before, by reference counting; garbage in
    cycles is found by the collector's next pass over its generation, which now comes less
    often. :func:`set_up_process` calls it in a spawned worker process only: a host
    process running a worker in-process keeps its own settings."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def set_up_process(spec: TaskSpec) -> bool:
    """Logging (:func:`configure_logging`), and in a process the coordinator spawned the
    collector's settings (:func:`tune_collector`). Returns whether it was so spawned
    (:func:`in_spawned_child`)."""
    configure_logging(spec)
    spawned = in_spawned_child()
    if spawned:
        tune_collector()
    return spawned


def in_spawned_child() -> bool:
    """Whether this process was spawned by the coordinator (``multiprocess``)."""
    return _spawning_parent_pid() is not None


def _spawning_parent_pid() -> int | None:
    """The pid of the coordinator that spawned this worker, or ``None`` when not spawned."""
    try:
        import multiprocess  # type: ignore[import-untyped]

        parent = multiprocess.parent_process()
    except Exception:
        return None
    return None if parent is None else parent.pid


def start_watchdog(spec: TaskSpec, main_thread: bool) -> Watchdog:
    """Start and install the task's :class:`workers.watchdog.Watchdog`.

    On a call past its bound, or a stop blocked in one, it pushes the task's final
    report (SUBSTRATE, the detail naming the call) on its own socket and exits with the
    SUBSTRATE code; on the coordinator's death it exits at once, reporting to no one.
    """
    code = exit_code_for(StopKind.SUBSTRATE)
    dog: Watchdog

    def on_fatal(action: Action) -> None:
        name = f"{spec.prefix}-{spec.process.name} task {spec.task}"
        if action.kind is ActionKind.PARENT_GONE:
            log.error("%s exiting: %s", name, action.detail)
            return
        kind: StopKind = StopKind.SUBSTRATE
        reason: Reason | None = None
        detail: str | None = action.detail
        decided = dog.outcome
        if decided is not None:
            # The worker had already stopped (a clean stop had committed); only its closing
            # blocked: report why it stopped, naming what then blocked.
            kind, reason = decided.kind, decided.reason
            blocked = action.detail.split(";")[0]
            detail = None if kind is StopKind.CLEAN else f"{decided.detail}; then {blocked}"
            log.warning("%s: %s while closing", name, blocked)
            dog.exit_code = exit_code_for(kind, reason)
        log.error("%s stopped (%s): %s", name, kind.value, detail)
        push_final(spec.status_endpoint, final_message(
            spec.process.name, spec.task, os.getpid(), kind, reason, detail))

    dog = Watchdog(on_fatal, code, _spawning_parent_pid())
    dog.start(signals=main_thread)
    install(dog)
    return dog
