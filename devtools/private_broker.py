"""A private broker for tests that stop, restart or freeze it (never the shared one).

One such broker serves a whole test session (fixture ``private_kafka``, tests/conftest.py),
so its JVM starts once rather than once per test. :func:`ready` hands it to the next test
running and warmed whatever the previous test left: stopped (started again on its data
and port) or frozen with SIGSTOP (thawed). :func:`bounce` stops it keeping its data and
starts it again on the same port, returning when an AdminClient answers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from devtools import devbroker
from devtools.devbroker import BrokerState


@dataclass(frozen=True, slots=True)
class PrivateBroker:
    """A private dev broker as a test found it.

    Attributes:
        data_dir: its data directory, for ``devbroker.down(data_dir, keep=True)``,
            ``devbroker.up(data_dir, port=state.port)`` and :func:`bounce`.
        state: the running broker (``state.bootstrap``, ``state.port``, ``state.pid``).
    """

    data_dir: Path
    state: BrokerState

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the value for ``bootstrap.servers``."""
        return self.state.bootstrap


def thaw(data_dir: Path) -> None:
    """Send SIGCONT to the broker of ``data_dir`` if it runs (a no-op unless it is frozen)."""
    current = devbroker.running(data_dir)
    if current is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(current.pid, signal.SIGCONT)


def ready(data_dir: Path) -> PrivateBroker:
    """The broker of ``data_dir``, running and warmed: thawed if frozen, started (again, on
    its previous port and with its topics when its data was kept) if it is not running.

    Raises:
        devbroker.DevBrokerError: it cannot start or does not answer (``devbroker.up``).
    """
    thaw(data_dir)
    state, _ = devbroker.up(data_dir, warm=True)
    return PrivateBroker(data_dir, state)


def bounce(data_dir: Path, state: BrokerState, down_s: float = 3.0) -> float:
    """Stop the broker keeping its data, wait ``down_s``, start it on the same port.

    Returns:
        ``time.monotonic()`` when the restarted broker answered (not yet warmed).
    """
    devbroker.down(data_dir, keep=True)
    time.sleep(down_s)
    again, _ = devbroker.up(data_dir, port=state.port, warm=False)
    assert again.bootstrap == state.bootstrap
    return time.monotonic()
