"""``parsley-devbroker``: the command line of the local broker (fetch, up, down, status, tool).

Each command is a thin shell over :mod:`devtools.devbroker` and :mod:`devtools.kafka_jars`;
errors are :class:`~devtools.kafka_jars.DevBrokerError`, printed with exit status 1.
Source: README.md, "The local broker: ``parsley-devbroker``".
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import click

from devtools.devbroker import (
    BOOTSTRAP_PREFIX,
    ENV_DATA_DIR,
    default_data_dir,
    down,
    running,
    tool_argv,
    up,
)
from devtools.kafka_jars import KAFKA_VERSION, DevBrokerError, fetch_jars, jars_present, lib_dir


def _say(message: str) -> None:
    click.echo(message, err=True)


def _fail(exc: DevBrokerError) -> None:
    click.echo(f"parsley-devbroker: {exc}", err=True)
    sys.exit(1)


_DIR_OPTION = click.option(
    "--dir", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help=f"Data directory (default ${ENV_DATA_DIR} or ~/.cache/parsley/devbroker).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
def main() -> None:
    """A local single-node Apache Kafka broker (KRaft) for Parsley's tests and demos."""


@main.command()
def fetch() -> None:
    """Fetch the pinned Apache Kafka jars with Maven (no-op when cached); print their path."""
    try:
        click.echo(str(fetch_jars(say=_say)))
    except DevBrokerError as exc:
        _fail(exc)


@main.command("up")
@_DIR_OPTION
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Client port on 127.0.0.1 (default: a free port).")
@click.option("--timeout", "timeout_s", type=float, default=90.0, show_default=True,
              help="Seconds to wait for the broker to answer.")
def up_command(data_dir: Path | None, port: int | None, timeout_s: float) -> None:
    """Start the broker (or report the running one); last line: bootstrap.servers=..."""
    started = time.monotonic()
    try:
        state, already = up(data_dir, port, start_timeout_s=timeout_s, say=_say)
    except DevBrokerError as exc:
        _fail(exc)
        return
    if already:
        _say(f"already running (pid {state.pid}), log {state.log_path}")
        if port is not None and port != state.port:
            _say(f"note: it listens on {state.port}, not the requested {port}")
    else:
        _say(f"ready in {time.monotonic() - started:.1f} s, log {state.log_path}")
    click.echo(f"{BOOTSTRAP_PREFIX}{state.bootstrap}")


@main.command("down")
@_DIR_OPTION
@click.option("--keep", is_flag=True, help="Keep the data directory (topics survive).")
@click.option("--deadline", "deadline_s", type=float, default=30.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
def down_command(data_dir: Path | None, keep: bool, deadline_s: float) -> None:
    """Stop the broker: SIGTERM, SIGKILL after the deadline; remove the data unless --keep."""
    where = (data_dir or default_data_dir()).resolve()
    removed = not keep and where.exists()
    state, killed = down(data_dir, keep=keep, deadline_s=deadline_s)
    if state is None:
        _say(f"no broker running in {where}")
    else:
        _say(f"stopped pid {state.pid}{' (SIGKILL after deadline)' if killed else ''}")
    if keep:
        _say(f"kept {where}")
    elif removed:
        _say(f"removed {where}")


@main.command("status")
@_DIR_OPTION
def status_command(data_dir: Path | None) -> None:
    """Print whether the broker runs, its bootstrap address, Kafka version and log file.

    Exit status 0 when running, 3 when not.
    """
    where = (data_dir or default_data_dir()).resolve()
    state = running(where)
    if state is None:
        click.echo("running: no")
        click.echo(f"data dir: {where}" + ("" if where.exists() else " (absent)"))
        click.echo(f"kafka version: {KAFKA_VERSION}")
        click.echo(f"jars: {lib_dir()} ({'cached' if jars_present(lib_dir()) else 'not fetched'})")
        sys.exit(3)
    click.echo(f"running: yes (pid {state.pid})")
    click.echo(f"{BOOTSTRAP_PREFIX}{state.bootstrap}")
    click.echo(f"kafka version: {state.version}")
    click.echo(f"log: {state.log_path}")
    click.echo(f"data dir: {state.data_dir}")


@main.command(
    "tool",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.argument("name", type=str)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def tool_command(name: str, args: tuple[str, ...]) -> None:
    """Run a Kafka command-line tool from the same jars; its exit status is returned.

    NAME is one of:

    \b
    kafka-topics, kafka-consumer-groups, kafka-get-offsets,
    kafka-configs, kafka-console-consumer, kafka-console-producer,
    kafka-delete-records, kafka-transactions, kafka-storage,
    kafka-producer-perf-test, kafka-consumer-perf-test.
    """
    try:
        argv = tool_argv(name, args)
    except DevBrokerError as exc:
        _fail(exc)
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(argv[0], argv)


if __name__ == "__main__":
    main()
