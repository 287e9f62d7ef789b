"""Candidate fixes to the worker, applied in the benchmark's worker processes only.

A fix this benchmark suggests is first measured here, by patching the class
inside the spawned worker process (``python -m perf --worker-patch NAME``), so the
before/after figures come from the same invocation before ``workers/`` changes.
A fix taken into ``workers/`` is deleted from here (``shape-check-admin``:
``workers.guards.ShapeGuard`` asks the AdminClient; ``sqlite-rowid``: the ordering
store is an ordinary rowid table; ``gc-tune``:
``workers.process_setup.tune_collector``), so none is pending now.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PATCHES", "patched_run"]


PATCHES: dict[str, Callable[[], None]] = {}
"""Patch name -> function applying it inside a worker process."""


def patched_run(spec: Any, names: tuple[str, ...]) -> int:
    """``workers.main.run(spec)`` with the named patches applied first (spawned-process target)."""
    from workers.main import run

    for name in names:
        PATCHES[name]()
    return run(spec)
