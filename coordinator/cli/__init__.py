"""``parsley-coordinator``: run declared processes, read their status, stop them, inspect state.

Exit status (every command; :class:`ExitCode`; the table with each case in full:
docs/operations.md, "Commands"):

====  ===================================================================
0     clean: the command did its job; ``run`` stopped because it was asked
1     unexpected error (a bug: the traceback is logged)
2     usage error or a wrong declaration (``ValueError``)
3     a refusal: a start, a process, ``inspect`` or ``reset`` refused
4     a failure: a process stopped with no reason, or a start prerequisite
      is missing (a topic, connectivity, ACLs)
5     the start should be retried ("Retry this start.")
6     shutdown incomplete: a worker had to be killed or did not stop
7     no coordinator answered on the control endpoint
====  ===================================================================

Settings come from ``--config FILE`` (TOML), then ``PARSLEY_*`` environment variables, then
flags (:mod:`coordinator.config`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

import click

from coordinator.cli import acls, inspect, keys, reset, run, status, stop
from coordinator.cli.common import ExitCode, setup_logging

__all__ = ["cli", "main"]

log = logging.getLogger("parsley.coordinator")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
              help="Log level of the coordinator's stderr log.")
def cli(log_level: str) -> None:
    """Run Parsley processes: causal-order, exactly-once, fail-closed Kafka delivery.

    `run` starts the declared processes (one worker OS process per task) and
    serves status on a control socket; `status` and `stop` talk to that
    socket; `inspect` reads a stopped process's ordering state from Kafka;
    `reset` starts a stopped process anew at a chosen boundary (docs/runbooks.md);
    `acls` prints the kafka-acls commands a process's principal needs.
    Exit status: 0 clean, 2 usage/declaration, 3 refusal, 4 failure,
    5 retry the start, 6 shutdown incomplete, 7 no coordinator answered.
    """
    setup_logging(log_level)


for _module in (run, status, stop, keys, inspect, reset, acls):
    cli.add_command(_module.command)


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
