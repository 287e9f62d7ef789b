"""``parsley-coordinator run``: start the processes of APP, supervise them, keep the last
status and exit with the status the processes ended in."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from typing import Any

import click

from coordinator.cli.common import (
    CONFIG_OPTION,
    PREFIX_OPTION,
    STATE_DIR_OPTION,
    ExitCode,
    kafka_config_problem,
    load_app,
    load_config,
    start_local_broker,
)
from coordinator.cli.help import PlainDefaultOption
from coordinator.config import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_METRICS_HOST,
    DEFAULT_RESTART_BACKOFF_MS,
    DEFAULT_RESTART_RESET_MS,
    DEFAULT_STALE_TASK_MS,
    DEFAULT_TASK_TIMEOUT_MS,
)

log = logging.getLogger("parsley.coordinator")


@click.command("run", short_help="Start the processes of APP and supervise them.")
@click.argument("app")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True,
              help="Use the parsley-devbroker on this machine (started if not running), "
                   "of $PARSLEY_DEVBROKER_DIR (default "
                   "${XDG_CACHE_HOME:-~/.cache}/parsley/devbroker).")
@CONFIG_OPTION
@PREFIX_OPTION
@STATE_DIR_OPTION
@click.option("--restart", type=click.Choice(["never", "transient"]), default="never",
              show_default=True,
              help="never: leave every stop to the operator. transient: restart substrate "
                   "failures through the bootstrap (bounded, with backoff), "
                   "COVERED_POSITION_FED once, and crashed or stale workers; never a refusal "
                   "or an application failure.")
@click.option("--listen", default="ipc", show_default=True,
              help="Control socket: ipc (a path under the state dir), tcp (127.0.0.1, free "
                   "port), tcp:PORT, or a full ipc:// or tcp://HOST:PORT endpoint.")
@click.option("--stop-deadline", type=float, default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL for each worker at shutdown.")
@click.option("--log-status-every", type=float, default=60.0, show_default=True,
              help="Seconds between status lines in the log (0: never). The per-task detail "
                   "is gone once a process stops, so the log is its record.")
@click.option("--max-restarts", type=click.IntRange(min=0), default=None,
              show_default=str(DEFAULT_MAX_RESTARTS),
              help="Under --restart transient: respawns of a task (crashed or stale) and "
                   "restarts of a process (substrate failure) before it stays stopped. "
                   "Also max_restarts / PARSLEY_MAX_RESTARTS.",
                   cls=PlainDefaultOption)
@click.option("--restart-backoff", type=click.FloatRange(min=0), default=None,
              show_default=f"{DEFAULT_RESTART_BACKOFF_MS / 1000:g}",
              help="Seconds before the first restart; doubles per attempt up to 30 s. Also "
                   "restart_backoff_ms / PARSLEY_RESTART_BACKOFF_MS (milliseconds).",
                   cls=PlainDefaultOption)
@click.option("--restart-reset", type=click.FloatRange(min=0.001), default=None,
              show_default=f"{DEFAULT_RESTART_RESET_MS / 1000:g}",
              help="Seconds a task must run (RUNNING, without a break) for its restart count "
                   "and backoff to start again from zero. Also restart_reset_ms / "
                   "PARSLEY_RESTART_RESET_MS (milliseconds).",
                   cls=PlainDefaultOption)
@click.option("--stale-after", type=click.FloatRange(min=0.001), default=None,
              show_default=f"{DEFAULT_STALE_TASK_MS / 1000:g}",
              help="Seconds a worker may send no report before it is killed (SIGKILL) as "
                   "stale: respawned under transient, its process stopped under never. Also "
                   "stale_task_ms / PARSLEY_STALE_TASK_MS (milliseconds).",
                   cls=PlainDefaultOption)
@click.option("--task-timeout", type=click.FloatRange(min=0.001), default=None,
              show_default=f"{DEFAULT_TASK_TIMEOUT_MS / 1000:g}",
              help="Seconds a task may go without progress while it recovers in place from a "
                   "fault a restart would cure (a client call past its bound, an unreachable "
                   "cluster: fresh clients, state rebuilt, positions rewound) before it stops "
                   "SUBSTRATE and --restart applies; as Kafka Streams' task.timeout.ms. Also "
                   "task_timeout_ms / PARSLEY_TASK_TIMEOUT_MS (milliseconds).",
                   cls=PlainDefaultOption)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus /metrics on this TCP port (0: any free port, logged); "
                   "default: none. Also metrics_port / PARSLEY_METRICS_PORT.")
@click.option("--metrics-host", default=None, show_default=DEFAULT_METRICS_HOST,
              help="The address /metrics is bound to. Also metrics_host / "
                   "PARSLEY_METRICS_HOST.",
                   cls=PlainDefaultOption)
@click.option("--join", is_flag=True, default=False,
              help="Share the tasks with the other coordinators of the prefix started with "
                   "--join (on other machines, or here with another --state-dir): each "
                   "runs the tasks the coordinators' consumer group assigns it, and takes "
                   "over those of a coordinator that stops or dies (docs/operations.md, "
                   "\"Several coordinators\"). Without it this coordinator runs every task.")
def command(app: str, bootstrap_servers: str | None, local_broker: bool, config_file: str | None,
            prefix: str | None, state_dir: str | None, restart: str, listen: str,
            stop_deadline: float, log_status_every: float, max_restarts: int | None,
            restart_backoff: float | None, restart_reset: float | None,
            stale_after: float | None, task_timeout: float | None, metrics_port: int | None,
            metrics_host: str | None, join: bool = False) -> None:
    """Start the processes APP (module:attribute, required) and supervise them until they stop.

    APP is imported from the current directory first, then the Python path
    (run from the directory that holds the module, or set PYTHONPATH).

    The start is all-or-nothing: the bootstrap resolves topics, checks the
    ordering state (refusing what cannot be resumed against), creates the
    changelogs and commits initial positions, then one worker per task is
    spawned. Logs go to stderr. Ctrl-C, SIGTERM or `parsley-coordinator stop`
    is a bounded shutdown that reports any worker that did not stop in time.
    The command returns when every process has stopped, leaving its last
    status (and exit code) in the state dir for `status` to show.
    """
    from coordinator.bootstrap import StartError, StartRetryableError
    from coordinator.control.last_status import StartFailure
    from coordinator.runtime.api import CoordinatorRunningError, Parsley
    from coordinator.state_dir import StateDirError
    from parsley.refusals import ParsleyFailClosedError

    if bootstrap_servers and local_broker:
        raise click.UsageError("give --bootstrap-servers or --local-broker, not both")
    processes = load_app(app)
    if local_broker:
        bootstrap_servers = start_local_broker()
    config = load_config(config_file, bootstrap_servers=bootstrap_servers,
                          application_id_prefix=prefix, state_dir=state_dir,
                          max_restarts=max_restarts,
                          restart_backoff_ms=_ms(restart_backoff),
                          restart_reset_ms=_ms(restart_reset),
                          stale_task_ms=_ms(stale_after),
                          task_timeout_ms=_ms(task_timeout),
                          metrics_port=metrics_port, metrics_host=metrics_host)
    # A start's failure is kept as the last report only once its bootstrap began: one
    # refused before (a usage or configuration error) leaves the previous run's report,
    # e.g. its refusal, readable (docs/operations.md, "Status after exit").
    began = threading.Event()

    def _keep_start(code: ExitCode, failure: StartFailure) -> None:
        if began.is_set():
            _keep_last(config, code, {}, failure)

    try:
        handle = Parsley.start(config, *processes, restart=restart, control=listen,
                               stop_deadline_s=stop_deadline, join=join,
                               on_bootstrap=began.set)
    except StateDirError as exc:  # not ours to write a report into
        log.error("state dir refused: %s", exc)
        sys.exit(ExitCode.USAGE)
    except CoordinatorRunningError as exc:  # the running one's report is not this start's
        log.error("start failed: %s", exc)
        sys.exit(ExitCode.FAILURE)
    except ParsleyFailClosedError as exc:
        log.error("start refused: %s (failing closed)", exc)
        _keep_start(ExitCode.REFUSAL, StartFailure(exc.reason, exc.detail))
        sys.exit(ExitCode.REFUSAL)
    except StartRetryableError as exc:
        log.error("start failed: %s", exc)
        _keep_start(ExitCode.RETRY, StartFailure(None, str(exc)))
        sys.exit(ExitCode.RETRY)
    except StartError as exc:
        log.error("start failed: %s", exc)
        _keep_start(ExitCode.FAILURE, StartFailure(None, str(exc)))
        sys.exit(ExitCode.FAILURE)
    except ValueError as exc:
        log.error("wrong declaration: %s", exc)
        _keep_start(ExitCode.USAGE, StartFailure(None, f"wrong declaration: {exc}"))
        sys.exit(ExitCode.USAGE)
    except Exception as exc:
        problem = kafka_config_problem(exc, config, config_file)
        if problem is None:
            raise
        log.error("wrong configuration: %s", problem)
        _keep_start(ExitCode.USAGE, StartFailure(None, f"wrong configuration: {problem}"))
        sys.exit(ExitCode.USAGE)
    log.info("started %s with control socket %s", [p.name for p in processes],
             handle.control_endpoint)
    asked = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        log.info("%s: stopping (deadline %g s per worker)", signal.Signals(signum).name,
                 stop_deadline)
        asked.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    next_log = time.monotonic() + log_status_every
    while not asked.is_set() and not handle.await_all_stopped(timeout=0.2):
        if log_status_every > 0 and time.monotonic() >= next_log:
            next_log = time.monotonic() + log_status_every
            _log_status(handle.status())
    report = handle.close(stop_deadline)
    statuses = handle.status()  # after the stop: the states the processes ended in
    code = _exit_code(statuses, report.clean)
    _keep_last(config, code, statuses)
    for name, st in statuses.items():
        if st.refusal_reason is not None:
            log.error("%s: %s refusal=%s detail=%s (failing closed)", name, st.state.value,
                      st.refusal_reason.name, st.failure_detail)
        elif st.failure_detail is not None:
            log.error("%s: %s refusal=None detail=%s", name, st.state.value, st.failure_detail)
        else:
            log.info("%s: %s", name, st.state.value)
    if report.clean:  # Parsley.close logged an incomplete one as an error already
        log.info("shutdown: %s", report.summary())
    sys.exit(code)


def _exit_code(statuses: Any, clean: bool) -> ExitCode:
    """``run``'s exit status from the processes' final states (pure): a refusal (3) over a
    failure (4) over an incomplete shutdown (6) over clean (0)."""
    code = ExitCode.CLEAN
    for st in statuses.values():
        if st.refusal_reason is not None:
            code = ExitCode.REFUSAL
        elif st.failure_detail is not None and code != ExitCode.REFUSAL:
            code = ExitCode.FAILURE
    if code == ExitCode.CLEAN and not clean:
        code = ExitCode.SHUTDOWN_INCOMPLETE
    return code


def _keep_last(config: Any, code: ExitCode, statuses: Any, start_error: Any = None) -> None:
    """Write ``run``'s last status report (coordinator.control.last_status); a failure to write it
    is logged, never a change to the exit status."""
    from coordinator.control.last_status import LastReport, last_status_file, write_last_report

    path = last_status_file(config.state_dir, config.application_id_prefix)
    try:
        write_last_report(path, LastReport.now(int(code), code.name, statuses, start_error))
    except OSError as exc:
        log.warning("could not keep the last status report in %s: %s", path, exc)
        return
    log.info("last status kept in %s (exit code %d, %s)", path, code, code.name)


def _ms(seconds: float | None) -> int | None:
    """A flag's seconds as the setting's whole milliseconds (``None`` stays unset)."""
    return None if seconds is None else max(0, round(seconds * 1000))


def _log_status(statuses: Any) -> None:
    """One INFO line per process: state, reason, detail, and per task held/stale/lag."""
    for name, st in statuses.items():
        tasks = " ".join(
            f"[task {t.task} pid {t.pid} held={t.held_count} lag={t.lag} "
            f"frontier={t.frontier_bytes}B age={t.updated_ms_ago}ms"
            + (" STALE" if t.stale else "") + "]"
            for t in st.tasks)
        log.info("status %s: %s refusal=%s detail=%s %s", name, st.state.value,
                 None if st.refusal_reason is None else st.refusal_reason.name,
                 st.failure_detail, tasks)
