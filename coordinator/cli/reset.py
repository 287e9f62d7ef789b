"""``parsley-coordinator reset``: the runbooks' reset of a process as one command; the steps
and their order are :mod:`coordinator.reset.execute`'s (docs/architecture.md, "The
coordinator", "Resetting a process")."""

from __future__ import annotations

import sys
import time

import click
import orjson
from confluent_kafka import KafkaException

from coordinator.bootstrap.common import BOOTSTRAP_METADATA, StartError
from coordinator.bootstrap.group import group_members
from coordinator.cli.common import (
    ExitCode,
    exit_on_config_problem,
    load_config,
    load_processes,
    start_local_broker,
)
from coordinator.cli.help import PlainDefaultOption
from coordinator.reset.execute import (
    DELETE_TIMEOUT_S,
    coordinator_serving,
    default_wait_s,
    execute_reset,
    open_admin,
    plan_reset,
    wait_for_no_members,
)
from coordinator.reset.plan import ResetRefused, parse_target
from parsley.declarations import application_id


def _default_state_dir() -> str:
    from coordinator.state_dir import default_state_dir

    return default_state_dir()


@click.command("reset", short_help="Reset processes of APP to a new causal boundary.")
@click.argument("app")
@click.option("--process", "process_names", multiple=True,
              help="A process to reset (repeatable). Default: every process APP declares.")
@click.option("--to-earliest", is_flag=True, help="Start at each partition's log start.")
@click.option("--to-latest", is_flag=True,
              help="Start at each partition's end: everything retained is skipped.")
@click.option("--to-offset", multiple=True, metavar="N|TOPIC:PARTITION=N",
              help="Start at offset N on every received partition, or per partition "
                   "(repeatable); each must lie in [log start, log end]. With "
                   "TOPIC:PARTITION=N entries and no plain N, the partitions not named "
                   "stay where the process stands: at its first held message there, else "
                   "where it reads next.")
@click.option("--to-datetime", metavar="ISO8601",
              help="Start at the first record at or after this time (UTC unless the time "
                   "gives an offset); the log end where none is.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan and the Kafka commands it stands for; change nothing.")
@click.option("--yes", "-y", "assume_yes", is_flag=True,
              help="Do not ask for confirmation (required when stdin is not a terminal).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=None,
              show_default="2 x session.timeout.ms",
              help="Seconds to wait for the group's members to leave before refusing.",
              cls=PlainDefaultOption)
@click.option("--delete-timeout", type=click.FloatRange(min=1), default=DELETE_TIMEOUT_S,
              show_default=True, help="Seconds to wait for the changelogs' deletion.")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True,
              help="Use the parsley-devbroker on this machine, of $PARSLEY_DEVBROKER_DIR "
                   "(default ${XDG_CACHE_HOME:-~/.cache}/parsley/devbroker).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML settings file (see docs/operations.md).")
@click.option("--prefix", "prefix",
              help="application_id_prefix. [required: here, in --config, or as "
                   "PARSLEY_APPLICATION_ID_PREFIX]")
@click.option("--state-dir", "state_dir", show_default=_default_state_dir(),
              help="Root of local state and sockets, as given to run (also state_dir in "
                   "--config, PARSLEY_STATE_DIR): its control socket, local state and the "
                   "reset records under resets/.",
                   cls=PlainDefaultOption)
def command(app: str, process_names: tuple[str, ...], to_earliest: bool, to_latest: bool,
            to_offset: tuple[str, ...], to_datetime: str | None, dry_run: bool,
            assume_yes: bool, wait_s: float | None, delete_timeout: float,
            bootstrap_servers: str | None, local_broker: bool, config_file: str | None,
            prefix: str | None, state_dir: str | None) -> None:
    """Reset processes of APP (module:attribute, required) to a new causal boundary.

    In order: refuse while the coordinator or any member of the process's group is
    alive; record the boundary (committed offsets, log start and end, what the
    ordering state covered and held); delete the ordering and store changelogs;
    replace the group's offsets with the chosen positions (committed as the
    bootstrap's own, so the next start adopts them); remove local state; write the
    record under <state-dir>/resets/ and print it. Exit status: 0 done (or dry
    run), 2 usage, 3 refused (nothing changed), 4 the cluster could not be queried
    or a step failed (run the reset again). See docs/runbooks.md, "Resetting a process".
    """
    try:
        target = parse_target(to_earliest=to_earliest, to_latest=to_latest,
                              to_offset=to_offset, to_datetime=to_datetime)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not dry_run and not assume_yes and not sys.stdin.isatty():
        raise click.UsageError("reset deletes the process's changelogs and offsets; stdin is "
                               "not a terminal, so nothing can confirm it: pass --yes to "
                               "reset, or --dry-run to print the plan")
    if bootstrap_servers and local_broker:
        raise click.UsageError("give --bootstrap-servers or --local-broker, not both")
    processes = load_processes(app, process_names)
    if local_broker:
        bootstrap_servers = start_local_broker()
    config = load_config(config_file, bootstrap_servers=bootstrap_servers,
                         application_id_prefix=prefix, state_dir=state_dir)
    from coordinator.state_dir import StateDirError, check_state_dir

    try:
        check_state_dir(config.state_dir)  # the local state and the record are written there
    except StateDirError as exc:
        raise click.UsageError(str(exc)) from exc
    from parsley.refusals import ParsleyFailClosedError

    done: list[str] = []
    try:
        window = default_wait_s(config) if wait_s is None else wait_s
        names = [p.name for p in processes]
        deadline = time.monotonic() + (0 if dry_run else window)
        while (endpoint := coordinator_serving(config, names)) is not None \
                and time.monotonic() < deadline:
            time.sleep(0.5)  # a coordinator just asked to stop closes its endpoint as it exits
        if endpoint is not None:
            refusal = (f"a coordinator serving {names} answers at {endpoint}; stop it first "
                       f"(parsley-coordinator stop --prefix {config.application_id_prefix} "
                       f"--state-dir {config.state_dir})")
            if not dry_run:
                raise ResetRefused(refusal)
            click.echo(f"(refused now: {refusal})")
        admin = open_admin(config)
        plans = []
        for p in processes:
            group = application_id(config.application_id_prefix, p.name)
            if not dry_run:
                wait_for_no_members(admin, group, window,
                                    bootstrap_servers=config.bootstrap_servers)
            plan = plan_reset(config, p, target, admin)
            plans.append(plan)
            click.echo("\n".join(plan.lines()))
            if dry_run:
                members = group_members(admin, group) or []
                if members:
                    click.echo(f"  (refused now: group {group} has live members "
                               f"[{'; '.join(sorted(m.describe() for m in members))}])")
                click.echo("  the Kafka commands it stands for (positions shown with "
                           "--dry-run: kafka-consumer-groups cannot commit them with the "
                           f"metadata {BOOTSTRAP_METADATA} the next start requires):")
                click.echo("\n".join(f"    {c}" for c in plan.kafka_commands()))
        if dry_run:
            click.echo("dry run: nothing changed")
            return
        asked = not assume_yes
        if asked and not click.confirm(
                f"reset {[p.process for p in plans]}? their causal past is discarded"):
            click.echo("not confirmed: nothing changed", err=True)
            sys.exit(ExitCode.REFUSAL)
        for i, plan in enumerate(plans):
            # Alive again since the plan was read (a coordinator started while a person
            # read the prompt)? Refuse before the first deletion; re-read the boundary
            # after a prompt, so the record is what was done.
            endpoint = coordinator_serving(config, [plan.process])
            if endpoint is not None:
                raise ResetRefused(f"a coordinator serving '{plan.process}' answers at "
                                   f"{endpoint}; stop it first")
            wait_for_no_members(admin, plan.group, 0,
                                bootstrap_servers=config.bootstrap_servers)
            if asked:
                plan = plan_reset(config, processes[i], target, admin)
            path = execute_reset(plan, admin, delete_timeout_s=delete_timeout)
            done.append(plan.process)
            click.echo(f"reset {plan.process}: boundary recorded in {path}")
            click.echo(orjson.dumps(plan.record(), option=orjson.OPT_INDENT_2).decode())
    except ResetRefused as exc:
        click.echo(f"reset refused after resetting {done} (the others are unchanged): {exc}"
                   if done else f"reset refused, nothing changed: {exc}", err=True)
        sys.exit(ExitCode.REFUSAL)
    except (StartError, ParsleyFailClosedError) as exc:
        click.echo(f"reset failed: {exc}" + (f" (reset of {done} done)" if done else ""),
                   err=True)
        sys.exit(ExitCode.FAILURE)
    except KafkaException as exc:
        exit_on_config_problem(exc, config, config_file)
        raise
