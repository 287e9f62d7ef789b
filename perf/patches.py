"""Candidate fixes to the worker, applied in the benchmark's worker processes only.

The worker (``workers/``) belongs to another engineer; a fix this benchmark
suggests is first measured here, by patching the class inside the spawned worker
process (``python -m perf --worker-patch NAME``), so the before/after figures come
from the same invocation and nothing in ``workers/`` changes until its owner takes
the fix. A fix taken into ``workers/`` is deleted from here (``shape-check-admin``:
``Worker._check_shape`` asks the AdminClient since the worker's own commit).

``sqlite-rowid``
    ``workers.ordering_store.SqliteOrderingStore`` keeps its rows in a ``WITHOUT
    ROWID`` table. SQLite advises against that for rows larger than about a
    twentieth of a page: a held body of 1 KiB makes the key B-tree carry the
    bodies. Measured on this machine for 10^5 held rows of 1.25 KB (sorted keys, the
    same pragmas): write 1.52 s, paged read 0.24 s, file 446 MiB; as an ordinary
    rowid table with ``k BLOB PRIMARY KEY``: 1.05 s, 0.15 s, 134 MiB. The patch
    creates the ordinary table (the restore benchmark's restarted worker).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["PATCHES", "patched_run"]


def _sqlite_rowid() -> None:
    import sqlite3
    from pathlib import Path

    from workers.ordering_store import SqliteOrderingStore

    def __init__(self: Any, path: Any) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=True)
        self._db.execute("PRAGMA journal_mode=MEMORY")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("PRAGMA temp_store=MEMORY")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")

    SqliteOrderingStore.__init__ = __init__  # type: ignore[method-assign]


PATCHES: dict[str, Callable[[], None]] = {
    "sqlite-rowid": _sqlite_rowid,
}
"""Patch name -> function applying it inside a worker process."""


def patched_run(spec: Any, names: tuple[str, ...]) -> int:
    """``workers.main.run(spec)`` with the named patches applied first (spawned-process target)."""
    from workers.main import run

    for name in names:
        PATCHES[name]()
    return run(spec)
