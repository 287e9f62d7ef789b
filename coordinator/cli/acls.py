"""``parsley-coordinator acls``: the ``kafka-acls`` commands that grant a process's principal what
it needs, or with ``--reset`` what a reset needs besides (:mod:`coordinator.cli.grants`;
docs/operations.md, "ACLs")."""

from __future__ import annotations

import click

from coordinator.cli.common import load_config, load_processes
from coordinator.cli.grants import commands, process_grants, reset_grants


@click.command("acls", short_help="Print the kafka-acls commands a process's principal needs.")
@click.argument("app")
@click.option("--principal", required=True, metavar="User:NAME",
              help="The principal the process authenticates as (User:<sasl.username>, or "
                   "the one its certificate maps to).")
@click.option("--process", "process_names", multiple=True,
              help="A process (repeatable). Default: every process APP declares.")
@click.option("--prefix", "prefix",
              help="application_id_prefix. [required: here, in --config, or as "
                   "PARSLEY_APPLICATION_ID_PREFIX]")
@click.option("--bootstrap-servers",
              help="Put in each command's --bootstrap-server (default: from --config or "
                   "PARSLEY_BOOTSTRAP_SERVERS, else a placeholder).")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML settings file (see docs/operations.md).")
@click.option("--command-config", metavar="FILE",
              help="The operator's admin client properties, put in each command's "
                   "--command-config (kafka-acls needs a principal allowed to alter ACLs).")
@click.option("--join", is_flag=True,
              help="The processes run under several coordinators (run --join): add the "
                   "coordinators' topic and group.")
@click.option("--reset", "for_reset", is_flag=True,
              help="Print instead what parsley-coordinator reset needs besides the "
                   "process's own rights (Delete on the changelogs and the group): keep it "
                   "with the operator.")
def command(app: str, principal: str, process_names: tuple[str, ...], prefix: str | None,
            bootstrap_servers: str | None, config_file: str | None,
            command_config: str | None, join: bool, for_reset: bool) -> None:
    """Print the kafka-acls commands that grant PRINCIPAL what the processes of APP
    (module:attribute) need on a cluster that enforces ACLs, one line per resource type
    and operation set; nothing is changed. Run them as a principal allowed to alter ACLs
    (--command-config). Exit status: 0, or 2 for a usage error or a wrong declaration.
    """
    if not principal.startswith("User:") or principal == "User:":
        raise click.UsageError(f"--principal must be User:NAME, got {principal!r}")
    processes = load_processes(app, process_names)
    try:
        config = load_config(config_file, bootstrap_servers=bootstrap_servers,
                             application_id_prefix=prefix)
        servers: str | None = config.bootstrap_servers
    except click.UsageError as exc:
        if "bootstrap_servers is not set" not in str(exc):
            raise
        # The servers only fill the commands' --bootstrap-server: a placeholder will do.
        config = load_config(config_file, bootstrap_servers="<servers>",
                             application_id_prefix=prefix)
        servers = None
    what = "a reset of" if for_reset else "process"
    for process in processes:
        grants = (reset_grants(config.application_id_prefix, process) if for_reset
                  else process_grants(config.application_id_prefix, process, join=join))
        click.echo(f"# {what} {process.name!r} (prefix {config.application_id_prefix!r}), "
                   f"principal {principal}")
        for line in commands(grants, principal, servers, command_config):
            click.echo(line)
