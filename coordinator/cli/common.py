"""What the ``parsley-coordinator`` commands share: exit codes, the app loader, the settings,
the control endpoint's place, common options, and a quiet exit on a closed pipe."""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import subprocess
import sys
import traceback
from collections.abc import Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import click

from coordinator.cli.help import PlainDefaultOption
from coordinator.config import default_state_dir

__all__ = [
    "CONFIG_OPTION",
    "ENDPOINT_OPTION",
    "PREFIX_OPTION",
    "PREFIX_OR_ENDPOINT_OPTION",
    "STATE_DIR_OPTION",
    "ExitCode",
    "control_place",
    "exit_on_config_problem",
    "kafka_config_problem",
    "load_app",
    "load_config",
    "quiet_on_closed_pipe",
    "setup_logging",
    "start_local_broker",
]

class ExitCode(enum.IntEnum):
    """Exit status of ``parsley-coordinator`` (the table in :mod:`coordinator.cli`)."""

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
        raise click.BadParameter(
            f"cannot import {module_name!r}: {exc}. APP is imported from the current "
            f"directory ({Path.cwd()}), then the Python path: run from the directory that "
            f"holds {module_name.split('.')[0]}.py (or its package), or add that directory "
            "to PYTHONPATH") from exc
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


def load_processes(spec: str, names: tuple[str, ...]) -> list[Any]:
    """The processes of ``spec`` (:func:`load_app`) named in ``names``, in the order first
    given and each once; every declared process when ``names`` is empty.

    Raises:
        click.UsageError: a name the application does not declare (the declared ones named).
    """
    declared = load_app(spec)
    by_name = {p.name: p for p in declared}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise click.UsageError(f"{spec} declares no process {unknown}; it declares "
                               f"{sorted(by_name)}")
    return [by_name[n] for n in dict.fromkeys(names)] if names else declared


def setup_logging(level: str) -> None:
    logging.basicConfig(
        stream=sys.stderr, level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def load_config(config_file: str | None, **overrides: Any) -> Any:
    from coordinator.config import ParsleyConfig

    try:
        return ParsleyConfig.load(config_file, **overrides)
    except (ValueError, OSError) as exc:
        raise click.UsageError(str(exc)) from exc


def kafka_config_problem(exc: BaseException, config: Any,
                          config_file: str | None) -> str | None:
    """A usage message for librdkafka refusing a client property at construction, else None.

    ``KafkaException(_INVALID_ARG, 'No such configuration property: "x"')`` names
    the property; the message says where it was set (``PARSLEY_KAFKA_*``, the
    TOML file, or code).
    """
    import re

    from confluent_kafka import KafkaException

    from coordinator.config import ParsleyConfig
    from workers.kafka_errors import classify, invalid_argument

    if not isinstance(exc, KafkaException) or not invalid_argument(exc):
        return None
    text = classify(exc).text
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


def exit_on_config_problem(exc: BaseException, config: Any, config_file: str | None) -> None:
    """Exit with :attr:`ExitCode.USAGE` and ``wrong configuration: <problem>`` on stderr when
    ``exc`` is a Kafka property librdkafka refused (:func:`kafka_config_problem`); else return,
    so the caller re-raises."""
    problem = kafka_config_problem(exc, config, config_file)
    if problem is not None:
        click.echo(f"wrong configuration: {problem}", err=True)
        sys.exit(ExitCode.USAGE)


def start_local_broker() -> str:
    """``127.0.0.1:<port>`` of this machine's dev broker, started when none runs.

    The dev broker is a developer tool that the product does not import
    (docs/architecture.md, "Layers"): ``--local-broker`` runs it as its own program,
    ``parsley-devbroker status`` then ``up`` (:func:`_devbroker_command`).

    Raises:
        click.ClickException: it could not be run or started (its own message, exit 1).
    """
    found = _bootstrap_of(_devbroker("status", timeout_s=60))
    if found:
        return found
    click.echo("starting the local dev broker (parsley-devbroker up) ...", err=True)
    # The first start fetches the Kafka jars with Maven, bounded there by 30 minutes.
    found = _bootstrap_of(_devbroker("up", timeout_s=2100, must=True))
    if not found:
        raise click.ClickException("parsley-devbroker up printed no bootstrap.servers line")
    return found


def _devbroker_command() -> list[str]:
    """The installed ``parsley-devbroker`` beside this interpreter (a console script puts no
    working directory on ``sys.path``), else the same module run by this interpreter."""
    beside = Path(sys.executable).with_name("parsley-devbroker")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    return [sys.executable, "-m", "devtools.devbroker_cli"]


def _devbroker(verb: str, *, timeout_s: float, must: bool = False) -> str:
    """Run ``parsley-devbroker VERB``, bounded by ``timeout_s`` s; its stdout. With ``must``,
    a non-zero exit raises naming its last stderr line; otherwise it only means no broker."""
    argv = [*_devbroker_command(), verb]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, check=False,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired as exc:
        raise click.ClickException(
            f"parsley-devbroker {verb} did not finish within {timeout_s:g} s") from exc
    except OSError as exc:
        raise click.ClickException(f"could not run {' '.join(argv)}: {exc}") from exc
    if must and done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise click.ClickException(
            said[-1].removeprefix("parsley-devbroker: ") if said
            else f"parsley-devbroker {verb} exited {done.returncode}")
    return done.stdout if done.returncode == 0 else ""


def _bootstrap_of(stdout: str) -> str | None:
    lines = [x for x in stdout.splitlines() if x.startswith("bootstrap.servers=")]
    return lines[-1].removeprefix("bootstrap.servers=") if lines else None


def control_place(config_file: str | None, prefix: str | None, state_dir: str | None,
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
    from coordinator.control.last_status import last_status_file
    from coordinator.control.status_socket import (
        default_endpoint,
        endpoint_file,
        pre_upgrade_endpoints,
    )
    from coordinator.state_dir import StateDirError, check_state_dir, legacy_state_dir

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
    from coordinator.control.status_socket import listening
    from coordinator.state_dir import legacy_state_dir

    if listening(ep) is not False:
        return ep
    for where in older:
        if listening(where) is True:
            click.echo(f"nothing listens at {ep}; using {where}, under the default state dir "
                       f"of earlier builds, {legacy_state_dir()} (docs/operations.md, "
                       "\"The state dir\")", err=True)
            return where
    return ep


CONFIG_OPTION = click.option("--config", "config_file", type=click.Path(dir_okay=False),
                       help="TOML settings file (see docs/operations.md).")
PREFIX_OPTION = click.option("--prefix", "prefix",
                       help="application_id_prefix. [required: here, in --config, or as "
                            "PARSLEY_APPLICATION_ID_PREFIX]")
PREFIX_OR_ENDPOINT_OPTION = click.option(
    "--prefix", "prefix",
    help="application_id_prefix. [required: here, in --config, as "
         "PARSLEY_APPLICATION_ID_PREFIX, or --endpoint instead]")
STATE_DIR_OPTION = click.option("--state-dir", "state_dir", show_default=default_state_dir(),
                          help="Root of local state and sockets (also state_dir in --config, "
                               "PARSLEY_STATE_DIR); created with mode 0700; one owned by "
                               "another user is refused.",
                               cls=PlainDefaultOption)
ENDPOINT_OPTION = click.option("--endpoint", help="Control endpoint (default: the one the running "
                         "coordinator recorded under the state dir, else its ipc:// path).")


@contextlib.contextmanager
def quiet_on_closed_pipe() -> Iterator[None]:
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
