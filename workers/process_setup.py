"""What a worker process sets up around its :class:`workers.main.Worker`: logging and the watchdog.

:func:`start_watchdog` installs the task's :class:`workers.watchdog.Watchdog`: past a
client call's bound, or still blocked 5 s after SIGTERM, it reports SUBSTRATE naming the
call and exits; on the coordinator's death it exits at once without committing
(docs/operations.md, "Bounded client calls", "When the coordinator dies").
"""

from __future__ import annotations

import logging
import os
import sys

from parsley.refusals import Reason
from workers.protocol import StopKind, TaskSpec, exit_code_for
from workers.status import final_message, push_final
from workers.watchdog import Action, ActionKind, Watchdog, install

__all__ = ["configure_logging", "in_spawned_child", "start_watchdog"]

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
