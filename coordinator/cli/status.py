"""``parsley-coordinator status``: the running coordinator's status document, else the last
report ``run`` kept; with ``--json``, JSON on every path."""

from __future__ import annotations

import logging
import signal
import sys
import time
from pathlib import Path
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
    quiet_on_closed_pipe,
)

log = logging.getLogger("parsley.coordinator")


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



def _fetch_status(ep: str, timeout: float) -> dict[str, Any]:
    """The running coordinator's status document, with ``"running": true``.

    Raises:
        _NotRunning: nothing listens at ``ep`` (known at once) or no reply within
            ``timeout`` s.
        click.ClickException: the coordinator answered with an error.
    """
    from coordinator.control.status_socket import NoReplyError, listening, request

    if listening(ep) is False:
        raise _NotRunning(f"no coordinator answers at {ep}: nothing listens there")
    try:
        reply = request(ep, {"op": "status"}, timeout_s=timeout)
    except NoReplyError as exc:
        raise _NotRunning(str(exc)) from exc
    if reply.get("outcome") != "OK":
        raise click.ClickException(f"{reply.get('outcome')}: {reply.get('error')}")
    return {"running": True, "last_report": None, **dict(reply["status"])}


def exit_code_of(doc: dict[str, Any]) -> ExitCode:
    """The exit status of ``status`` for a running coordinator's document: ``REFUSAL`` (3)
    while a process stands stopped with a refusal reason, else ``FAILURE`` (4) while one
    stands stopped with a failure, else ``CLEAN`` (0); the codes of docs/operations.md,
    "Commands", so that a health check on the exit status sees a stop."""
    stopped = [p for p in (doc.get("processes") or {}).values() if p.get("state") == "STOPPED"]
    if any(p.get("refusal_reason") for p in stopped):
        return ExitCode.REFUSAL
    if any(p.get("failure_detail") for p in stopped):
        return ExitCode.FAILURE
    return ExitCode.CLEAN


def _last_or_nothing(message: str, last_file: Path | None) -> dict[str, Any]:
    """What ``status`` shows when no coordinator answers: the last report, else a
    document saying there is none. The note goes to stderr.

    Raises:
        click.ClickException: the report file exists but cannot be read.
    """
    from coordinator.control.last_status import read_last_report

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


@click.command("status", cls=_JsonErrorsCommand,
             short_help="Show the running coordinator's processes, tasks and holds.")
@CONFIG_OPTION
@PREFIX_OR_ENDPOINT_OPTION
@STATE_DIR_OPTION
@ENDPOINT_OPTION
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON (always: a last report, or an object with an \"error\", too).")
@click.option("--wide", is_flag=True,
              help="Every detail in the table: all held channels, task state, restore, "
                   "memory, CPU, restarts (lines may exceed the terminal).")
@click.option("--watch", is_flag=True,
              help="Refresh until Ctrl-C (SIGINT, also when started by a script in the "
                   "background, where SIGINT is ignored).")
@click.option("--interval", type=float, default=1.0,
              help="Seconds between refreshes with --watch.")
@click.option("--timeout", type=float, default=5.0,
              help="Seconds to wait for a listening coordinator's reply (when nothing "
                   "listens at the endpoint the answer is immediate).")
def command(config_file: str | None, prefix: str | None, state_dir: str | None,
            endpoint: str | None, as_json: bool, wide: bool, watch: bool, interval: float,
            timeout: float) -> None:
    """Show the running coordinator's status: processes, tasks, held counts, blockers.

    Per task: held messages, lag, whether it is caught up (RUNNING, lag 0,
    nothing held), the head's blockers (required and settled positions),
    frontier channels and bytes, and how old the entry is (STALE beyond three
    status intervals); --wide and --json give every detail. A stopped process
    shows its refusal reason and failure detail, and the exit status says so:
    3 while a process stands refused, 4 while one stands stopped by a failure,
    else 0. With no coordinator running it shows the last report `run` kept in
    the state dir (marked, with the exit time and code) and exits 7.
    """
    from rich.console import Console

    from coordinator.control.status_view import render

    ep, last_file = control_place(config_file, prefix, state_dir, endpoint)
    console = Console(width=max(Console().width, 1000)) if wide else Console()

    def show(doc: dict[str, Any]) -> None:
        if as_json:
            click.echo(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        else:
            console.print(render(doc, wide=wide, width=console.width))

    with quiet_on_closed_pipe():
        try:
            if not watch:
                doc = _fetch_status(ep, timeout)
                show(doc)
                code = exit_code_of(doc)
                if code is not ExitCode.CLEAN:
                    sys.stdout.flush()
                    sys.exit(code)
                return
            from rich.live import Live

            # --watch ends at SIGINT (Ctrl-C, or `kill -INT`) even when started with SIGINT
            # ignored, as a shell without job control starts a background job (a script's
            # `... &`); SIGTERM ends it too, by its default action.
            signal.signal(signal.SIGINT, signal.default_int_handler)
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
