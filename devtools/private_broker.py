"""A private broker for tests that stop, restart or freeze it (never the shared one).

:func:`private_broker` starts ``devtools.devbroker`` in a temporary directory and
stops and removes it at the end; :func:`bounce` stops it keeping its data and starts it
again on the same port, returning when an AdminClient answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from devtools import devbroker
from devtools.devbroker import BrokerState


@contextmanager
def private_broker(data_dir: Path) -> Iterator[BrokerState]:
    """A warmed dev broker in ``data_dir`` for the block; stopped and removed after it."""
    state, _ = devbroker.up(data_dir, warm=True)
    try:
        yield state
    finally:
        devbroker.down(data_dir)


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
