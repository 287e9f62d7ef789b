"""Candidate fixes to the worker, applied in the benchmark's worker processes only.

The worker (``workers/``) belongs to another engineer; a fix this benchmark
suggests is first measured here, by patching the class inside the spawned worker
process (``python -m perf --worker-patch NAME``), so the before/after figures come
from the same invocation and nothing in ``workers/`` changes until its owner takes
the fix.

``shape-check-admin``
    ``workers.main.Worker._check_shape`` asks the *consumer* for topic metadata every
    2 s (the whole cluster before e2f2d05, one received topic at a time since). A
    consumer's metadata request waits behind its outstanding Fetch long-poll
    (``fetch.wait.max.ms``, 500 ms by default), so each check stalls an idle task's
    loop for up to half a second: measured 451-466 ms per call on the dev broker
    with a fetch outstanding (one topic or all), against 2-10 ms through an
    AdminClient (its own connection) for one topic. The patch asks the worker's
    AdminClient for each received topic.

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


def _shape_check_admin() -> None:
    from confluent_kafka import KafkaException

    from workers.main import Stop, Worker
    from workers.protocol import StopKind

    def _check_shape(self: Any) -> None:
        for topic in self.received:
            try:
                md = self.admin.list_topics(topic=topic, timeout=5)
            except KafkaException:
                return  # an unreachable cluster is not a shape change
            meta = md.topics.get(topic)
            if meta is None or meta.error is not None:
                continue
            now = len(meta.partitions)
            before = self.spec.partitions[topic]
            if now != before:
                raise Stop(
                    StopKind.SUBSTRATE, None,
                    f"the partition shape of the process's topics changed while it ran: "
                    f"received topic {topic} had {before} partition(s) at start and has {now} "
                    "now; restart the process (the start re-resolves the topics and pre-commits "
                    "new partitions)")

    Worker._check_shape = _check_shape  # type: ignore[method-assign]


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
    "shape-check-admin": _shape_check_admin,
    "sqlite-rowid": _sqlite_rowid,
}
"""Patch name -> function applying it inside a worker process."""


def patched_run(spec: Any, names: tuple[str, ...]) -> int:
    """``workers.main.run(spec)`` with the named patches applied first (spawned-process target)."""
    from workers.main import run

    for name in names:
        PATCHES[name]()
    return run(spec)
