"""``parsley-coordinator``: run declared processes, read their status, stop them, inspect state.

Exit status (every command; :class:`ExitCode`):

====  ===================================================================
0     clean: the command did its job; ``run`` stopped because it was asked
1     unexpected error (a bug: the traceback is logged)
2     usage error or a wrong declaration (``ValueError``)
3     a refusal: ``run``'s start was refused, or a process stopped with a
      ``refusal_reason``; ``inspect`` found state it cannot trust; ``reset``
      refused and changed nothing (a live member or coordinator)
4     a failure: a process stopped with no reason (application or
      substrate failure, a crashed worker), or a start prerequisite is
      missing (a topic, connectivity, ACLs)
5     the start should be retried ("Retry this start.")
6     shutdown incomplete: a worker had to be killed or did not stop
7     no coordinator answered on the control endpoint
====  ===================================================================

Settings come from ``--config FILE`` (TOML), then ``PARSLEY_*`` environment
variables, then flags (:mod:`coordinator.config`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Iterator, Mapping, Sequence
from importlib import import_module
from pathlib import Path
from typing import Any

import click
import orjson

from coordinator.cli_help import PlainDefaultOption
from coordinator.config import (
    DEFAULT_MAX_RESTARTS,
    DEFAULT_METRICS_HOST,
    DEFAULT_RESTART_BACKOFF_MS,
    DEFAULT_RESTART_RESET_MS,
    DEFAULT_STALE_TASK_MS,
    default_state_dir,
)

__all__ = ["ExitCode", "inspect_process", "load_app", "main"]

log = logging.getLogger("parsley.coordinator")

PING_TIMEOUT_S = 2.5
"""How long ``stop`` waits for a ping's reply before saying no coordinator answers, s;
only an answering coordinator gets the (longer) stop deadline."""


class ExitCode(enum.IntEnum):
    """Exit status of ``parsley-coordinator`` (module docstring)."""

    CLEAN = 0
    ERROR = 1
    USAGE = 2
    REFUSAL = 3
    FAILURE = 4
    RETRY = 5
    SHUTDOWN_INCOMPLETE = 6
    NO_COORDINATOR = 7


def load_app(spec: str) -> list[Any]:
    """The processes ``module:attribute`` names.

    The attribute may be a ``Process``, a list or tuple of them, or a
    callable returning either. The current directory is importable.

    Raises:
        click.BadParameter: not ``module:attribute``, not importable, or not processes.
    """
    from parsley.declarations import Process

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise click.BadParameter(f"APP must be module:attribute, got {spec!r}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        obj: Any = import_module(module_name)
    except ImportError as exc:
        raise click.BadParameter(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:  # the application's own module failed while importing
        where = traceback.extract_tb(exc.__traceback__)[-1]
        raise click.BadParameter(
            f"importing {module_name!r} raised {type(exc).__name__}: {exc} "
            f"(at {where.filename}:{where.lineno}); fix the application module"
        ) from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise click.BadParameter(f"{module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if callable(obj) and not isinstance(obj, Process):
        obj = obj()
    procs = [obj] if isinstance(obj, Process) else list(obj) if isinstance(obj, list | tuple) \
        else None
    if not procs or not all(isinstance(p, Process) for p in procs):
        raise click.BadParameter(f"{spec} is not a Process or a list of Processes")
    return procs


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _load_config(config_file: str | None, **overrides: Any) -> Any:
    from coordinator.config import ParsleyConfig

    try:
        return ParsleyConfig.load(config_file, **overrides)
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc


def _kafka_config_problem(exc: BaseException, config: Any,
                          config_file: str | None) -> str | None:
    """A usage message for librdkafka refusing a client property at construction, else None.

    ``KafkaException(_INVALID_ARG, 'No such configuration property: "x"')`` names
    the property; the message says where it was set (``PARSLEY_KAFKA_*``, the
    TOML file, or code).
    """
    import re

    from confluent_kafka import KafkaError, KafkaException

    from coordinator.config import ParsleyConfig

    if not isinstance(exc, KafkaException) or not exc.args:
        return None
    err = exc.args[0]
    if not isinstance(err, KafkaError) or err.code() != KafkaError._INVALID_ARG:
        return None
    text = err.str()
    found = re.search(r'"([^"]+)"', text)
    origins = ParsleyConfig.property_origins(config_file)
    names = list(config.kafka_properties) if config is not None else []
    key = None
    if found:
        bare = found.group(1)
        key = next((k for k in names if k == bare or (k.endswith("." + bare)
                    and k.split(".", 1)[0] in ("consumer", "producer", "admin"))), bare)
    where = origins.get(key or "", "the kafka_properties given") if key else \
        "the kafka properties (--config file [kafka_properties] or PARSLEY_KAFKA_* variables)"
    if text.startswith("No such configuration property") and key:
        return f"kafka property '{key}' is not a librdkafka property ({text}); check the " \
               f"name in {where.removeprefix('set by ')}"
    if key:
        return f"kafka property '{key}' was refused by librdkafka ({text}); check it in {where}"
    return f"a kafka property was refused by librdkafka ({text}); check {where}"


def _local_broker() -> str:
    from coordinator import devbroker

    state = devbroker.running()
    if state is None:
        click.echo("starting the local dev broker (parsley-devbroker up) ...", err=True)
        state, _ = devbroker.up()
    return state.bootstrap


def _control_place(config_file: str | None, prefix: str | None, state_dir: str | None,
                   endpoint: str | None) -> tuple[str, Path | None]:
    """The coordinator's control endpoint, and where its last status report is kept.

    ``--endpoint`` wins; otherwise the endpoint the running coordinator recorded under
    the state dir, else its default ``ipc://`` path; with the default state dir and
    nothing listening there, a coordinator of an earlier build found under
    ``<tmp>/parsley`` (:func:`_or_pre_upgrade`). The report's file needs the prefix
    and state dir (``None`` with ``--endpoint`` and no prefix).

    Raises:
        click.UsageError: no prefix and no endpoint, an unreadable --config, or a state
            dir owned by another user (:mod:`coordinator.state_dir`).
    """
    from coordinator.config import ParsleyConfig
    from coordinator.last_status import last_status_file
    from coordinator.state_dir import StateDirError, check_state_dir, legacy_state_dir
    from coordinator.status_socket import default_endpoint, endpoint_file, pre_upgrade_endpoints

    try:
        values = ParsleyConfig.file_values(config_file) if config_file else {}
        values.update(ParsleyConfig.env_values())
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc
    prefix = prefix or values.get("application_id_prefix")
    if not prefix:
        if endpoint:
            return endpoint, None
        raise click.UsageError("give --prefix (or --config / PARSLEY_APPLICATION_ID_PREFIX) "
                               "or --endpoint to find the coordinator")
    cfg = ParsleyConfig("unused:0", prefix, state_dir=state_dir or values.get("state_dir")
                        or default_state_dir())
    try:
        check_state_dir(cfg.state_dir)
    except StateDirError as exc:
        raise click.UsageError(str(exc)) from exc
    last = last_status_file(cfg.state_dir, cfg.application_id_prefix)
    if endpoint:
        return endpoint, last
    ep = default_endpoint(cfg)
    record = endpoint_file(cfg)
    if record.exists():
        ep = record.read_text().strip() or ep
    if not (state_dir or values.get("state_dir")) and cfg.state_dir != legacy_state_dir():
        ep = _or_pre_upgrade(ep, pre_upgrade_endpoints(cfg.application_id_prefix))
    return ep, last


def _or_pre_upgrade(ep: str, older: list[str]) -> str:
    """``ep``, unless nothing listens there and a coordinator of an earlier build listens
    at one of ``older`` (under ``<tmp>/parsley``, their default state dir); says so on
    stderr (docs/operations.md, "The state dir")."""
    from coordinator.state_dir import legacy_state_dir
    from coordinator.status_socket import listening

    if listening(ep) is not False:
        return ep
    for where in older:
        if listening(where) is True:
            click.echo(f"nothing listens at {ep}; using {where}, under the default state dir "
                       f"of earlier builds, {legacy_state_dir()} (docs/operations.md, "
                       "\"The state dir\")", err=True)
            return where
    return ep


_CONFIG = click.option("--config", "config_file", type=click.Path(dir_okay=False),
                       help="TOML settings file (see docs/operations.md).")
_PREFIX = click.option("--prefix", "prefix",
                       help="application_id_prefix. [required: here, in --config, or as "
                            "PARSLEY_APPLICATION_ID_PREFIX]")
_PREFIX_OR_ENDPOINT = click.option(
    "--prefix", "prefix",
    help="application_id_prefix. [required: here, in --config, as "
         "PARSLEY_APPLICATION_ID_PREFIX, or --endpoint instead]")
_STATE_DIR = click.option("--state-dir", "state_dir", show_default=default_state_dir(),
                          help="Root of local state and sockets (also state_dir in --config, "
                               "PARSLEY_STATE_DIR); created with mode 0700; one owned by "
                               "another user is refused.",
                               cls=PlainDefaultOption)
_ENDPOINT = click.option("--endpoint", help="Control endpoint (default: the one the running "
                         "coordinator recorded under the state dir, else its ipc:// path).")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Log level of the coordinator's stderr log.")
def cli(log_level: str) -> None:
    """Run Parsley processes: causal-order, exactly-once, fail-closed Kafka delivery.

    `run` starts the declared processes (one worker OS process per task) and
    serves status on a control socket; `status` and `stop` talk to that
    socket; `inspect` reads a stopped process's ordering state from Kafka;
    `reset` starts a stopped process anew at a chosen boundary (docs/runbooks.md).
    Exit status: 0 clean, 2 usage/declaration, 3 refusal, 4 failure,
    5 retry the start, 6 shutdown incomplete, 7 no coordinator answered.
    """
    _setup_logging(log_level)


@cli.command(short_help="Start the processes of APP and supervise them.")
@click.argument("app")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True,
              help="Use the parsley-devbroker on this machine (started if not running).")
@_CONFIG
@_PREFIX
@_STATE_DIR
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
def run(app: str, bootstrap_servers: str | None, local_broker: bool, config_file: str | None,
        prefix: str | None, state_dir: str | None, restart: str, listen: str,
        stop_deadline: float, log_status_every: float, max_restarts: int | None,
        restart_backoff: float | None, restart_reset: float | None,
        stale_after: float | None, metrics_port: int | None,
        metrics_host: str | None, join: bool = False) -> None:
    """Start the processes APP (module:attribute, required) and supervise them until they stop.

    The start is all-or-nothing: the bootstrap resolves topics, checks the
    ordering state (refusing what cannot be resumed against), creates the
    changelogs and commits initial positions, then one worker per task is
    spawned. Logs go to stderr. Ctrl-C, SIGTERM or `parsley-coordinator stop`
    is a bounded shutdown that reports any worker that did not stop in time.
    The command returns when every process has stopped, leaving its last
    status (and exit code) in the state dir for `status` to show.
    """
    from coordinator.api import CoordinatorRunningError, Parsley
    from coordinator.bootstrap import StartError, StartRetryableError
    from coordinator.last_status import StartFailure
    from coordinator.state_dir import StateDirError
    from parsley.refusals import ParsleyFailClosedError

    if bootstrap_servers and local_broker:
        raise click.UsageError("give --bootstrap-servers or --local-broker, not both")
    processes = load_app(app)
    if local_broker:
        bootstrap_servers = _local_broker()
    config = _load_config(config_file, bootstrap_servers=bootstrap_servers,
                          application_id_prefix=prefix, state_dir=state_dir,
                          max_restarts=max_restarts,
                          restart_backoff_ms=_ms(restart_backoff),
                          restart_reset_ms=_ms(restart_reset),
                          stale_task_ms=_ms(stale_after),
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
        problem = _kafka_config_problem(exc, config, config_file)
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
    """Write ``run``'s last status report (coordinator.last_status); a failure to write it
    is logged, never a change to the exit status."""
    from coordinator.last_status import LastReport, last_status_file, write_last_report

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


class _NotRunning(Exception):
    """No coordinator answers at the endpoint (the message says how that was found)."""


def _json_error(message: str, code: int) -> None:
    """Print ``{"running": null, "error": ..., "exit_code": ...}`` on stdout and exit."""
    click.echo(orjson.dumps({"running": None, "error": message, "exit_code": int(code)},
                            option=orjson.OPT_INDENT_2).decode())
    sys.exit(code)


class _JsonErrorsCommand(click.Command):
    """A command whose ``--json`` output is JSON on every path: a usage error, a failed
    request and an unexpected error print a JSON object too (docs/operations.md, "Status")."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        wants_json = "--json" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.ClickException as exc:
            if not wants_json:
                raise
            _json_error(exc.format_message(), exc.exit_code)
            raise  # not reached: _json_error exits

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            if not ctx.params.get("as_json"):
                raise
            _json_error(exc.format_message(), exc.exit_code)
        except (click.exceptions.Exit, click.Abort, BrokenPipeError):
            raise
        except Exception as exc:
            if not ctx.params.get("as_json"):
                raise
            log.exception("unexpected error")
            _json_error(f"unexpected error: {type(exc).__name__}: {exc}", ExitCode.ERROR)


@contextlib.contextmanager
def _quiet_on_closed_pipe() -> Iterator[None]:
    """Exit 0 without a traceback when stdout's reader went away (``... | head``).

    Python ignores SIGPIPE, so a write to a closed pipe raises ``BrokenPipeError``;
    stdout is pointed at /dev/null so that the interpreter's final flush cannot raise
    again, as the Python documentation's note on SIGPIPE advises.
    """
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(ExitCode.CLEAN)


def _fetch_status(ep: str, timeout: float) -> dict[str, Any]:
    """The running coordinator's status document, with ``"running": true``.

    Raises:
        _NotRunning: nothing listens at ``ep`` (known at once) or no reply within
            ``timeout`` s.
        click.ClickException: the coordinator answered with an error.
    """
    from coordinator.status_socket import NoReplyError, listening, request

    if listening(ep) is False:
        raise _NotRunning(f"no coordinator answers at {ep}: nothing listens there")
    try:
        reply = request(ep, {"op": "status"}, timeout_s=timeout)
    except NoReplyError as exc:
        raise _NotRunning(str(exc)) from exc
    if reply.get("outcome") != "OK":
        raise click.ClickException(f"{reply.get('outcome')}: {reply.get('error')}")
    return {"running": True, "last_report": None, **dict(reply["status"])}


def _last_or_nothing(message: str, last_file: Path | None) -> dict[str, Any]:
    """What ``status`` shows when no coordinator answers: the last report, else a
    document saying there is none. The note goes to stderr.

    Raises:
        click.ClickException: the report file exists but cannot be read.
    """
    from coordinator.last_status import read_last_report

    report = None
    if last_file is not None:
        try:
            report = read_last_report(last_file)
        except (ValueError, OSError) as exc:
            raise click.ClickException(f"{message}; and {exc}") from exc
    if report is not None:
        click.echo(f"{message}; showing the last report, kept in {last_file}", err=True)
        return report.to_json()
    where = f"no last report in {last_file}" if last_file is not None else \
        "no last report (give --prefix to find one)"
    click.echo(f"{message}; {where}", err=True)
    return {"running": False, "last_report": None, "start_error": None, "processes": {},
            "error": f"{message}; {where}"}


@cli.command(cls=_JsonErrorsCommand,
             short_help="Show the running coordinator's processes, tasks and holds.")
@_CONFIG
@_PREFIX_OR_ENDPOINT
@_STATE_DIR
@_ENDPOINT
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (always: a last report, or an object with an \"error\", too).")
@click.option("--wide", is_flag=True,
              help="Every detail in the table: all held channels, task state, restore, "
                   "memory, CPU, restarts (lines may exceed the terminal).")
@click.option("--watch", is_flag=True, help="Refresh until Ctrl-C.")
@click.option("--interval", type=float, default=1.0,
              help="Seconds between refreshes with --watch.")
@click.option("--timeout", type=float, default=5.0,
              help="Seconds to wait for a listening coordinator's reply (when nothing "
                   "listens at the endpoint the answer is immediate).")
def status(config_file: str | None, prefix: str | None, state_dir: str | None,
           endpoint: str | None, as_json: bool, wide: bool, watch: bool, interval: float,
           timeout: float) -> None:
    """Show the running coordinator's status: processes, tasks, held counts, blockers.

    Per task: held messages, lag, whether it is caught up (RUNNING, lag 0,
    nothing held), the head's blockers (required and settled positions),
    frontier channels and bytes, and how old the entry is (STALE beyond three
    status intervals); --wide and --json give every detail. A stopped process
    shows its refusal reason and failure detail. With no coordinator running
    it shows the last report `run` kept in the state dir (marked, with the
    exit time and code) and exits 7.
    """
    from rich.console import Console

    from coordinator.status_view import render

    ep, last_file = _control_place(config_file, prefix, state_dir, endpoint)
    console = Console(width=max(Console().width, 1000)) if wide else Console()

    def show(doc: dict[str, Any]) -> None:
        if as_json:
            click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        else:
            console.print(render(doc, wide=wide, width=console.width))

    with _quiet_on_closed_pipe():
        try:
            if not watch:
                show(_fetch_status(ep, timeout))
                return
            from rich.live import Live

            with Live(console=console, auto_refresh=False) as live:
                while True:
                    doc = _fetch_status(ep, timeout)
                    if as_json:
                        live.console.print_json(orjson.dumps(doc).decode())
                    else:
                        live.update(render(doc, wide=wide, width=console.width),
                                    refresh=True)
                    time.sleep(interval)
        except _NotRunning as exc:
            doc = _last_or_nothing(str(exc), last_file)
            if as_json or doc["last_report"] is not None:
                show(doc)
            sys.stdout.flush()
            sys.exit(ExitCode.NO_COORDINATOR)
        except KeyboardInterrupt:
            return


@cli.command(short_help="Stop every worker of the running coordinator, bounded in time.")
@_CONFIG
@_PREFIX_OR_ENDPOINT
@_STATE_DIR
@_ENDPOINT
@click.option("--deadline", type=float, default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL for each worker.")
@click.option("--all", "stop_all", is_flag=True, default=False,
              help="With coordinators started with --join: stop every coordinator of the "
                   "application, not only this one (whose tasks would move to the others).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the shutdown report as JSON instead of lines.")
def stop(config_file: str | None, prefix: str | None, state_dir: str | None,
         endpoint: str | None, deadline: float, stop_all: bool = False,
         as_json: bool = False) -> None:
    """Stop every worker of the running coordinator, bounded, and print the result.

    A ping first: with no coordinator at the endpoint it says so within a few
    seconds (exit 7). Each worker gets SIGTERM (it commits what it has and exits),
    then SIGKILL after --deadline seconds. Workers that had to be killed, or did not stop
    even then, are listed and the exit status is 6. The coordinator's `run`
    then returns.
    """
    from coordinator.api import MAX_CONTROL_STOP_DEADLINE_S
    from coordinator.status_socket import NoReplyError, listening, request

    ep, _last = _control_place(config_file, prefix, state_dir, endpoint)
    why = "nothing listens there" if listening(ep) is False else None  # known at once
    if why is None:
        try:
            request(ep, {"op": "ping"}, timeout_s=PING_TIMEOUT_S)
        except NoReplyError:
            why = f"no reply to a ping within {PING_TIMEOUT_S:g} s"
    if why is not None:
        click.echo(f"no coordinator answers at {ep} ({why}); check --prefix/--state-dir/"
                   "--endpoint and that `parsley-coordinator run` is running", err=True)
        sys.exit(ExitCode.NO_COORDINATOR)
    try:
        reply = request(ep, {"op": "stop", "deadline_s": deadline, "all": stop_all},
                        timeout_s=min(deadline, MAX_CONTROL_STOP_DEADLINE_S)
                        + (60 if stop_all else 15))
    except NoReplyError as exc:
        click.echo(str(exc), err=True)
        sys.exit(ExitCode.NO_COORDINATOR)
    if reply.get("outcome") != "OK":
        click.echo(f"{reply.get('outcome')}: {reply.get('error')}", err=True)
        sys.exit(ExitCode.ERROR)
    if reply.get("note"):
        click.echo(str(reply["note"]), err=True)
    shutdown = reply["shutdown"]
    peers = reply.get("peers") or []
    if as_json:
        click.echo(orjson.dumps(shutdown, option=orjson.OPT_INDENT_2).decode())
        if peers:
            click.echo(orjson.dumps(peers, option=orjson.OPT_INDENT_2).decode())
    else:
        for line in _stop_lines(shutdown, peers):
            click.echo(line)
    clean = shutdown["clean"] and all(p.get("answered") and (p.get("shutdown") or {}).get("clean")
                                      for p in peers)
    sys.exit(ExitCode.CLEAN if clean else ExitCode.SHUTDOWN_INCOMPLETE)


def _stop_lines(shutdown: Mapping[str, Any], peers: list[Mapping[str, Any]]) -> list[str]:
    """``stop``'s report as lines (pure): the shutdown's JSON
    (``ShutdownReport.to_json``: clean, deadline_s, stopped, killed, not_stopped) and,
    with ``--all``, one line per peer coordinator (host, pid, answered, shutdown)."""
    def workers(rows: list[Mapping[str, Any]]) -> str:
        return ", ".join(f"{r['process']}/{r['task']} (pid {r['pid']})" for r in rows)

    def one(doc: Mapping[str, Any]) -> str:
        text = f"{len(doc.get('stopped') or [])} worker(s) stopped within " \
               f"{float(doc.get('deadline_s') or 0):g} s"
        if doc.get("killed"):
            text += "; killed after the deadline: " + workers(doc["killed"])
        if doc.get("not_stopped"):
            text += "; did not stop even after SIGKILL: " + workers(doc["not_stopped"])
        return ("stopped: " if doc.get("clean") else "stopped, incomplete: ") + text

    lines = [one(shutdown)]
    for p in peers:
        who = f"coordinator {p.get('host', '?')} pid {p.get('pid', '?')}"
        if not p.get("answered"):
            lines.append(f"{who}: did not answer")
        else:
            lines.append(f"{who}: {one(p.get('shutdown') or {})}")
    return lines


@cli.command(short_help="Make the CURVE keys that secure TCP control sockets.")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--client", default=None,
              help="Also make (and authorize) a client key pair NAME: status and stop use it "
                   "with PARSLEY_CONTROL_CLIENT=NAME.")
def keys(directory: Path, client: str | None) -> None:
    """Make the CURVE keys of TCP control sockets in DIRECTORY (docs/operations.md, "The
    control socket").

    The coordinators' key pair (server.key, server.key_secret) unless present, a client
    pair with --client, and authorized/ with the public keys accepted. Run coordinators,
    status and stop with PARSLEY_CONTROL_KEYS=DIRECTORY: a tcp:// control socket then
    answers only authorized clients.
    """
    from coordinator.control_auth import make_keys

    try:
        written = make_keys(directory, client)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    for path in written:
        click.echo(str(path))


def inspect_process(config: Any, process: str) -> dict[str, Any]:
    """Read ``<prefix>-<process>-__parsley.ordering-changelog`` into a report per task.

    Returns:
        Topic ids in Kafka's printed form (``kafka-topics --describe``).
        ``{"changelog", "tasks": [{"task", "records", "held": [{"topic_id",
        "topic", "partition", "count"}], "covered": [{"topic_id", "topic",
        "partition", "covered", "fed_to_end"}], "bindings": {name: id}}],
        "group_members": [str] | None}``: ``group_members`` describes each member
        of the process's consumer group ``<prefix>-<process>`` (empty: no worker is
        running; ``None``: the group could not be described), read before the
        changelog.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for state that
            cannot be trusted.
        StartError: the changelog does not exist or cannot be read.
    """
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from coordinator.bootstrap import StartError, kafka_topic_id, read_ordering_state
    from coordinator.bootstrap.common import check_reachable, with_client_logger
    from coordinator.bootstrap.group import group_members
    from parsley.declarations import ordering_changelog
    from parsley.naming import application_id
    from workers.changelog import describe_topic
    from workers.kafka_config import admin_config, restore_consumer_config

    name = ordering_changelog(config.application_id_prefix, process)
    admin = AdminClient(with_client_logger(
        admin_config(config.bootstrap_servers, config.kafka_properties)))
    check_reachable(admin, config.bootstrap_servers)
    info = describe_topic(admin, name)
    if info is None:
        raise StartError(f"the ordering changelog {name} does not exist")
    try:
        found = group_members(admin, application_id(config.application_id_prefix, process))
        members = None if found is None else [m.describe() for m in found]
    except StartError:
        members = None
    cfg = restore_consumer_config(config.bootstrap_servers, config.application_id_prefix,
                                  process, 0, config.kafka_properties)
    cfg["client.id"] = f"parsley-inspect-{process}"
    consumer = Consumer(with_client_logger(cfg))
    try:
        states = read_ordering_state(admin, consumer, name, info.partitions)
    finally:
        consumer.close()
    tasks = []
    for s in states:
        bindings = s.inspector.name_bindings()
        names = {v: k for k, v in bindings.items()}
        tasks.append({
            "task": s.task,
            "records": s.records,
            "held": [{"topic_id": kafka_topic_id(ch.topic_id), "topic": names.get(ch.topic_id),
                      "partition": ch.partition, "count": n}
                     for ch, n in s.inspector.held_channels().items()],
            "covered": [{"topic_id": kafka_topic_id(ch.topic_id),
                         "topic": names.get(ch.topic_id),
                         "partition": ch.partition, "covered": pos,
                         "fed_to_end": s.inspector.is_fed_to_end(pos)}
                        for ch, pos in s.inspector.covered_positions().items()],
            "bindings": {k: kafka_topic_id(v) for k, v in bindings.items()},
        })
    return {"changelog": name, "tasks": tasks, "group_members": members}


def _warn_if_running(config: Any, process: str, members: list[str] | None) -> None:
    """Warn on stderr that ``inspect`` may be reading state that moves under it."""
    from coordinator.bootstrap.group import session_timeout_ms
    from parsley.naming import application_id

    group = application_id(config.application_id_prefix, process)
    if members is None:
        click.echo(f"warning: could not describe consumer group '{group}', so whether "
                   f"process '{process}' is running is not known; if it runs, its ordering "
                   "state may move while this reads it", err=True)
    elif members:
        click.echo(f"warning: consumer group '{group}' has {len(members)} member(s) "
                   f"({'; '.join(members)}): process '{process}' may be running, and its "
                   "ordering state may move while this reads it (a stopped worker stays a "
                   "member until its session times out, session.timeout.ms "
                   f"{session_timeout_ms(config.kafka_properties)} ms). Stop it first "
                   "(parsley-coordinator stop) for a settled view", err=True)


@cli.command()
@click.option("--process", "process", required=True, help="The process name.")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True, help="Use the parsley-devbroker on this machine.")
@_CONFIG
@_PREFIX
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def inspect(process: str, bootstrap_servers: str | None, local_broker: bool,
            config_file: str | None, prefix: str | None, as_json: bool) -> None:
    """Read a stopped process's ordering state from its changelog.

    For each task (changelog partition): which channels hold messages and how
    many, how far each channel is covered (fed, or known never to arrive;
    "fed to end" for a deleted topic), and which topic id each name was
    bound to. Run it on a stopped process: a running one changes underneath,
    and a warning on stderr says so when the process's consumer group has
    members.
    """
    from coordinator.bootstrap import StartError
    from parsley.refusals import ParsleyFailClosedError

    if local_broker:
        bootstrap_servers = _local_broker()
    config = _load_config(config_file, bootstrap_servers=bootstrap_servers,
                          application_id_prefix=prefix)
    try:
        report = inspect_process(config, process)
    except ParsleyFailClosedError as exc:
        click.echo(f"{exc}", err=True)
        sys.exit(ExitCode.REFUSAL)
    except StartError as exc:
        click.echo(f"{exc}", err=True)
        sys.exit(ExitCode.FAILURE)
    except Exception as exc:
        problem = _kafka_config_problem(exc, config, config_file)
        if problem is None:
            raise
        click.echo(f"wrong configuration: {problem}", err=True)
        sys.exit(ExitCode.USAGE)
    _warn_if_running(config, process, report["group_members"])
    with _quiet_on_closed_pipe():
        if as_json:
            click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
            return
        click.echo(f"changelog {report['changelog']}")
        for t in report["tasks"]:
            click.echo(f"task {t['task']}: {t['records']} record(s)")
            for h in t["held"]:
                click.echo(f"  held     {h['topic'] or h['topic_id']}[{h['partition']}]: "
                           f"{h['count']} message(s)  (topic id {h['topic_id']})")
            for c in t["covered"]:
                pos = "fed to end" if c["fed_to_end"] else str(c["covered"])
                click.echo(f"  covered  {c['topic'] or c['topic_id']}[{c['partition']}] "
                           f"up to {pos}")
            for n, i in t["bindings"].items():
                click.echo(f"  binding  {n} -> {i}")


from coordinator.reset import command as _reset_command  # noqa: E402  (docs/runbooks.md, "Resetting a process")

cli.add_command(_reset_command)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of ``parsley-coordinator``."""
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="parsley-coordinator",
                 standalone_mode=True)
    except SystemExit:
        raise
    except Exception:
        log.exception("unexpected error")
        sys.exit(ExitCode.ERROR)


if __name__ == "__main__":
    main()
