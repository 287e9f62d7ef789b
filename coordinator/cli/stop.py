"""``parsley-coordinator stop``: a bounded stop of the running coordinator's workers."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import click
import orjson

from coordinator.cli.common import (
    CONFIG_OPTION,
    ENDPOINT_OPTION,
    PREFIX_OR_ENDPOINT_OPTION,
    STATE_DIR_OPTION,
    ExitCode,
    control_place,
)

PING_TIMEOUT_S = 2.5
"""How long ``stop`` waits for a ping's reply before saying no coordinator answers, s;
only an answering coordinator gets the (longer) stop deadline."""


@click.command("stop", short_help="Stop every worker of the running coordinator, bounded in time.")
@CONFIG_OPTION
@PREFIX_OR_ENDPOINT_OPTION
@STATE_DIR_OPTION
@ENDPOINT_OPTION
@click.option("--deadline", type=float, default=10.0, show_default=True,
              help="Seconds between SIGTERM and SIGKILL for each worker.")
@click.option("--all", "stop_all", is_flag=True, default=False,
              help="With coordinators started with --join: stop every coordinator of the "
                   "application, not only this one (whose tasks would move to the others).")
@click.option("--json", "as_json", is_flag=True,
              help="Print the shutdown report as JSON instead of lines.")
def command(config_file: str | None, prefix: str | None, state_dir: str | None,
            endpoint: str | None, deadline: float, stop_all: bool = False,
            as_json: bool = False) -> None:
    """Stop every worker of the running coordinator, bounded, and print the result.

    A ping first: with no coordinator at the endpoint it says so within a few
    seconds (exit 7). Each worker gets SIGTERM (it commits what it has and exits),
    then SIGKILL after --deadline seconds. Workers that had to be killed, or did not stop
    even then, are listed and the exit status is 6. The coordinator's `run`
    then returns.
    """
    from coordinator.control.status_socket import NoReplyError, listening, request
    from coordinator.runtime.api import MAX_CONTROL_STOP_DEADLINE_S

    ep, _last = control_place(config_file, prefix, state_dir, endpoint)
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
