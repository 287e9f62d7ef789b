"""Formatted log lines for the coordinator when the application configured no logging.

A script that calls ``Parsley.start`` without configuring :mod:`logging` would print
the coordinator's warnings and errors through ``logging.lastResort``: the bare
message, no time, level or logger, while its workers' lines carry all three
(``workers.main`` configures a worker's logging the same way). :func:`ensure_log_handler`
gives the ``parsley`` logger (every coordinator logger is ``parsley.coordinator…``) one
stderr handler with a format, only while the root logger has no handler of its own:
an application that configures logging, before or after the start, gets its own
handlers and formats and no second copy (docs/operations.md, "Logging").
"""

from __future__ import annotations

import logging
import sys
from typing import Final

__all__ = ["COORDINATOR_LOG_FORMAT", "ensure_log_handler"]

COORDINATOR_LOG_FORMAT: Final = \
    "%(asctime)s %(levelname)s [coordinator pid %(process)d] %(name)s: %(message)s"
"""The line format, in the shape of a worker's (``workers.main``)."""

_LOGGER: Final = "parsley"


class _WhileRootUnconfigured(logging.Filter):
    """Passes a record only while the root logger has no handler (pure check per record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not logging.getLogger().handlers


class _ParsleyDefaultHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`ensure_log_handler` installs; its class marks it as installed."""


def ensure_log_handler() -> None:
    """Install the formatted stderr handler on the ``parsley`` logger, once.

    Does nothing when the root logger already has a handler, or when the handler was
    installed before (idempotent: a second start adds no second handler). The logger's
    level is left alone, so what passes is what the root's level lets through
    (``WARNING`` unless set). Raises nothing.
    """
    if logging.getLogger().handlers:
        return
    log = logging.getLogger(_LOGGER)
    if any(isinstance(h, _ParsleyDefaultHandler) for h in log.handlers):
        return
    handler = _ParsleyDefaultHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(COORDINATOR_LOG_FORMAT))
    handler.addFilter(_WhileRootUnconfigured())
    log.addHandler(handler)
