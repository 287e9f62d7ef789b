"""``parsley-devbroker``: the command line of the local broker or cluster (fetch, up, down,
status, stop/start/freeze/thaw one broker, add-user, tool).

Each command is a thin shell over :mod:`devtools.devbroker`, :mod:`devtools.devbroker_cluster`,
:mod:`devtools.devbroker_security` and :mod:`devtools.kafka_jars`; errors are
:class:`~devtools.kafka_jars.DevBrokerError`, printed with exit status 1.
Source: README.md, "The local broker: ``parsley-devbroker``".
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from devtools import devbroker_cluster as cluster
from devtools.devbroker import (
    BOOTSTRAP_PREFIX,
    ENV_DATA_DIR,
    default_data_dir,
    down,
    running,
    tool_argv,
    up,
)
from devtools.devbroker_security import ADMIN_CLIENT_JSON, ADMIN_PROPERTIES, SECURITY_MODES
from devtools.kafka_jars import KAFKA_VERSION, DevBrokerError, fetch_jars, jars_present, lib_dir


def _say(message: str) -> None:
    click.echo(message, err=True)


def _fail(exc: DevBrokerError) -> None:
    click.echo(f"parsley-devbroker: {exc}", err=True)
    sys.exit(1)


_DIR_OPTION = click.option(
    "--dir", "data_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
    help=f"Data directory (default ${ENV_DATA_DIR} or "
         f"${{XDG_CACHE_HOME:-~/.cache}}/parsley/devbroker).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
def main() -> None:
    """A local Apache Kafka broker (KRaft), or a cluster of them, for Parsley's tests and demos."""


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
              help="Client port on 127.0.0.1 of a single broker (default: a free port).")
@click.option("--brokers", type=click.IntRange(1, cluster.MAX_BROKERS), default=None,
              help="Brokers: 1 (a single broker, the default for a new directory) or a "
                   "KRaft cluster of 2-9 (replication min(3, N), min.insync.replicas 2 from "
                   "3 on; 512 MiB heap each). Default: what --dir holds.")
@click.option("--security", type=click.Choice(SECURITY_MODES), default=None,
              help="sasl_ssl: TLS (a generated CA), SASL/SCRAM-SHA-512, ACLs enforced, super "
                   f"user admin; writes <dir>/{ADMIN_PROPERTIES} and <dir>/{ADMIN_CLIENT_JSON}. "
                   "Default: what --dir holds, else plaintext.")
@click.option("--timeout", "timeout_s", type=float, default=None,
              help="Seconds to wait for the broker(s) to answer [default: 90, a cluster 180].")
def up_command(data_dir: Path | None, port: int | None, brokers: int | None,
               security: str | None, timeout_s: float | None) -> None:
    """Start the broker or cluster, or report it running; up again starts any broker of a
    cluster that is down (and thaws a frozen one). Last line: bootstrap.servers=..."""
    started = time.monotonic()
    where = (data_dir or default_data_dir()).resolve()
    try:
        if (brokers or 1) > 1 or cluster.read_cluster(where) is not None:
            if port is not None:
                raise DevBrokerError("--port is for a single broker: a cluster's ports are "
                                     "chosen at its first start and kept")
            spec, started_ids = cluster.up_cluster(where, brokers, security=security,
                                                   start_timeout_s=timeout_s or 180.0, say=_say)
            if started_ids:
                _say(f"{len(spec.nodes)} brokers ready in {time.monotonic() - started:.1f} s "
                     f"(started {', '.join(map(str, started_ids))}), logs "
                     f"{where}/broker-*/logs/server.log")
            else:
                _say(f"already running: {len(spec.nodes)} brokers")
            _say_security(where)
            click.echo(f"{BOOTSTRAP_PREFIX}{spec.bootstrap}")
            return
        state, already = up(where, port, start_timeout_s=timeout_s or 90.0, say=_say,
                            security=security)
    except DevBrokerError as exc:
        _fail(exc)
        return
    if already:
        _say(f"already running (pid {state.pid}), log {state.log_path}")
        if port is not None and port != state.port:
            _say(f"note: it listens on {state.port}, not the requested {port}")
    else:
        _say(f"ready in {time.monotonic() - started:.1f} s, log {state.log_path}")
    _say_security(where)
    click.echo(f"{BOOTSTRAP_PREFIX}{state.bootstrap}")


def _say_security(where: Path) -> None:
    if cluster.security_of(where) != "plaintext":
        _say(f"SASL_SSL: Kafka tools --command-config {where / ADMIN_PROPERTIES}; "
             f"confluent-kafka properties {where / ADMIN_CLIENT_JSON}")


@main.command("down")
@_DIR_OPTION
@click.option("--keep", is_flag=True, help="Keep the data directory (topics survive).")
@click.option("--deadline", "deadline_s", type=float, default=30.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
def down_command(data_dir: Path | None, keep: bool, deadline_s: float) -> None:
    """Stop the broker: SIGTERM, SIGKILL after the deadline; remove the data unless --keep."""
    where = (data_dir or default_data_dir()).resolve()
    removed = not keep and where.exists()
    if cluster.read_cluster(where) is not None:
        stopped = cluster.down_cluster(where, keep=keep, deadline_s=deadline_s)
        _say(f"stopped brokers {', '.join(map(str, stopped))}" if stopped
             else f"no broker running in {where}")
        if keep:
            _say(f"kept {where}")
        elif removed:
            _say(f"removed {where}")
        return
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
@click.option("--json", "as_json", is_flag=True,
              help='JSON: {"brokers": [{"id", "pid", "port", "running", "frozen", "log"}], '
                   '"bootstrap", "security", "kafka_version", "data_dir"}.')
def status_command(data_dir: Path | None, as_json: bool) -> None:
    """Print whether the broker (each broker of a cluster) runs, the bootstrap address,
    Kafka version and log file(s).

    Exit status 0 when every broker runs, 3 when none does, 4 when some do.
    """
    where = (data_dir or default_data_dir()).resolve()
    try:
        brokers = cluster.broker_status(where)
        spec = cluster.read_cluster(where)
    except DevBrokerError as exc:
        _fail(exc)
        return
    alive = [b for b in brokers if b.running]
    code = 0 if brokers and len(alive) == len(brokers) else (4 if alive else 3)
    bootstrap = spec.bootstrap if spec is not None else (
        ",".join(f"127.0.0.1:{b.port}" for b in brokers) or None)
    if as_json:
        click.echo(json.dumps({
            "brokers": [b.to_dict() for b in brokers], "bootstrap": bootstrap,
            "security": cluster.security_of(where), "kafka_version": KAFKA_VERSION,
            "data_dir": str(where)}, indent=2))
        sys.exit(code)
    if spec is not None:
        click.echo(f"running: {len(alive)} of {len(brokers)} brokers")
        for b in brokers:
            what = ("frozen" if b.frozen else "yes") if b.running else "no"
            click.echo(f"broker {b.id}: running: {what}"
                       + (f" (pid {b.pid})" if b.pid else "") + f", port {b.port}, log "
                       f"{b.log_path}")
        click.echo(f"{BOOTSTRAP_PREFIX}{bootstrap}")
        click.echo(f"kafka version: {KAFKA_VERSION}")
        click.echo(f"security: {cluster.security_of(where)}")
        click.echo(f"data dir: {where}")
        sys.exit(code)
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
    if state.security != "plaintext":
        click.echo(f"security: {state.security}")


_BROKER_OPTION = click.option("--broker", "broker_id", type=int, required=True,
                              help="The broker's id (node.id: 1..N; a single broker is 1).")


@main.command("stop")
@_DIR_OPTION
@_BROKER_OPTION
@click.option("--kill", is_flag=True, help="SIGKILL at once (a crash) instead of SIGTERM.")
@click.option("--deadline", "deadline_s", type=float, default=30.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL.")
def stop_command(data_dir: Path | None, broker_id: int, kill: bool, deadline_s: float) -> None:
    """Stop one broker, keeping its data: SIGTERM (a controlled shutdown), or SIGKILL with
    --kill. `up` (or `start`) starts it again."""
    try:
        state = cluster.stop_broker(data_dir, broker_id, kill=kill, deadline_s=deadline_s)
    except DevBrokerError as exc:
        _fail(exc)
        return
    _say(f"broker {broker_id} was not running" if state is None else
         f"broker {broker_id} (pid {state.pid}) {'killed' if kill else 'stopped'}")


@main.command("start")
@_DIR_OPTION
@_BROKER_OPTION
@click.option("--timeout", "timeout_s", type=float, default=120.0, show_default=True,
              help="Seconds to wait for it to answer and register.")
def start_command(data_dir: Path | None, broker_id: int, timeout_s: float) -> None:
    """Start one broker that is down (the others as they are); print its address."""
    try:
        state = cluster.start_broker(data_dir or default_data_dir(), broker_id,
                                     timeout_s=timeout_s, say=_say)
    except DevBrokerError as exc:
        _fail(exc)
        return
    click.echo(f"{BOOTSTRAP_PREFIX}{state.bootstrap}")


@main.command("freeze")
@_DIR_OPTION
@_BROKER_OPTION
def freeze_command(data_dir: Path | None, broker_id: int) -> None:
    """Freeze one broker (SIGSTOP): connections stay open, nothing answers. thaw ends it."""
    try:
        state = cluster.freeze_broker(data_dir, broker_id)
    except DevBrokerError as exc:
        _fail(exc)
        return
    _say(f"broker {broker_id} (pid {state.pid}) frozen")


@main.command("thaw")
@_DIR_OPTION
@_BROKER_OPTION
def thaw_command(data_dir: Path | None, broker_id: int) -> None:
    """Thaw a frozen broker (SIGCONT)."""
    try:
        state = cluster.thaw_broker(data_dir, broker_id)
    except DevBrokerError as exc:
        _fail(exc)
        return
    _say(f"broker {broker_id} (pid {state.pid}) thawed")


@main.command("add-user")
@_DIR_OPTION
@click.argument("name")
@click.option("--password", default=None, help="Its password (default: a random one).")
def add_user_command(data_dir: Path | None, name: str, password: str | None) -> None:
    """Create (or reset) the SCRAM-SHA-512 user NAME on a sasl_ssl broker; print its
    confluent-kafka properties (also in <dir>/users/NAME.client.json). It may do only
    what ACLs grant User:NAME (kafka-acls --command-config <dir>/admin.properties)."""
    from devtools.devbroker_security import create_user, load_security

    where = (data_dir or default_data_dir()).resolve()
    try:
        security = load_security(where)
        if security is None:
            raise DevBrokerError(f"{where} holds no sasl_ssl broker (up --security sasl_ssl)")
        brokers = [b for b in cluster.broker_status(where) if b.running]
        if not brokers:
            raise DevBrokerError(f"no broker running in {where}")
        bootstrap = ",".join(f"127.0.0.1:{b.port}" for b in brokers)
        config = create_user(security, bootstrap, name, password)
    except DevBrokerError as exc:
        _fail(exc)
        return
    click.echo(json.dumps(config, indent=2, sort_keys=True))


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
    kafka-delete-records, kafka-transactions, kafka-dump-log, kafka-acls, kafka-storage,
    kafka-producer-perf-test, kafka-consumer-perf-test.

    On a sasl_ssl broker give them --command-config <dir>/admin.properties.
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
