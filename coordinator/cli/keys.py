"""``parsley-coordinator keys``: the CURVE keys of TCP control sockets."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("keys", short_help="Make the CURVE keys that secure TCP control sockets.")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--client", default=None,
              help="Also make (and authorize) a client key pair NAME: status and stop use it "
                   "with PARSLEY_CONTROL_CLIENT=NAME.")
def command(directory: Path, client: str | None) -> None:
    """Make the CURVE keys of TCP control sockets in DIRECTORY (docs/operations.md, "The
    control socket").

    The coordinators' key pair (server.key, server.key_secret) unless present, a client
    pair with --client, and authorized/ with the public keys accepted. Run coordinators,
    status and stop with PARSLEY_CONTROL_KEYS=DIRECTORY: a tcp:// control socket then
    answers only authorized clients.
    """
    from coordinator.control.auth import make_keys

    try:
        written = make_keys(directory, client)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    for path in written:
        click.echo(str(path))
