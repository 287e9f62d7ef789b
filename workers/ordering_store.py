"""A disk-backed ordering store: sqlite3 in the task's local state directory.

The engine's :class:`~parsley.engine.store.OrderingStore` protocol (bytes
keys and values; ``scan(prefix)`` in ascending unsigned byte order) over one
sqlite file, so held message bodies live on disk rather than in Python
memory (a deep hold-back must not grow the worker without bound).

The changelog is the source of truth (docs/model.md, "Restart"; "a local
copy is a cache only"): :meth:`SqliteOrderingStore.create` starts from
an empty file, and :meth:`SqliteOrderingStore.rebuild` loads the changelog's
latest value per key. The one exception is a file a clean stop left and its
checkpoint proves equal to the changelog (``workers.checkpoint``; docs/model.md,
"When the local stores are trusted"), flushed to disk before that checkpoint is
written. Hence no durability is paid for while running: ``synchronous=OFF`` and
an in-memory journal; a crash can leave a corrupt file, which the next start
deletes unread (a crash leaves no checkpoint).

sqlite compares BLOB keys with ``memcmp`` (shorter first on a tie), which is
exactly Python's ``bytes`` order, so ``ORDER BY k`` is the protocol's
ascending order.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from parsley.engine.state_codec import TAG_HELD, VALIDATED_HELD, validate_held
from parsley.refusals import ParsleyFailClosedError

__all__ = [
    "SqliteOrderingStore",
    "prefix_upper_bound",
    "store_cache_factory",
    "task_state_dir",
]

_SCAN_PAGE: Final = 256
_LOAD_CHUNK: Final = 4096
_HELD_LOW: Final = bytes([TAG_HELD])
_HELD_HIGH: Final = bytes([TAG_HELD + 1])


def task_state_dir(state_dir: str | Path, application_id: str, task: int) -> Path:
    """The task's local state directory, ``<state_dir>/<app-id>/<task>``.

    Source: docs/operations.md, "Names on the cluster" ("local state":
    ``<state_dir>/<prefix>-<process>/<task>``).

    Raises:
        ValueError: blank application id, a path separator in it, or a negative task.
    """
    if not application_id or "/" in application_id or application_id in {".", ".."}:
        raise ValueError(f"application id {application_id!r} is not a directory name")
    if task < 0:
        raise ValueError(f"task index must be >= 0, got {task}")
    return Path(state_dir) / application_id / str(task)


def store_cache_factory(directory: str | Path,
                        kept: bool = False) -> Callable[[str], SqliteOrderingStore]:
    """The worker's cache of each declared store (``parsley.task_stores.TaskStores``):
    for store ``name`` the file ``<directory>/store-<name>.sqlite``: a fresh one, any
    previous one deleted (:meth:`SqliteOrderingStore.create`), unless ``kept``: the file as
    the last clean stop left it, which only a trusted checkpoint allows
    (``workers.checkpoint``).
    """
    if kept:
        return lambda name: SqliteOrderingStore(Path(directory) / f"store-{name}.sqlite")
    return lambda name: SqliteOrderingStore.create(directory, f"store-{name}")


def prefix_upper_bound(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``.

    ``None`` when there is none (empty prefix, or all ``0xff`` bytes).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class SqliteOrderingStore:
    """The ordering store of one task, in ``<dir>/<name>.sqlite``.

    Implements the ``OrderingStore`` protocol: :meth:`get`, :meth:`put`,
    :meth:`delete`, :meth:`scan`. Not thread-safe; one per worker process.

    Shape: a single ordinary (rowid) table ``kv(k BLOB PRIMARY KEY, v BLOB NOT
    NULL)``; keys and values are the changelog's raw bytes (docs/model.md, "The stored form"). Not
    ``WITHOUT ROWID``: SQLite advises against it for rows over ~1/20 of a page,
    and with 1 KiB held bodies the key B-tree carried the bodies (10^5 held rows
    of 1.25 KB: 446 MiB file and 1.52 s to write as ``WITHOUT ROWID``, 134 MiB and
    1.05 s as a rowid table with its primary-key index).
    """

    def __init__(self, path: str | Path) -> None:
        """Open (or create) the sqlite file at ``path`` as is. Prefer :meth:`create`."""
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), isolation_level=None, check_same_thread=True)
        self._db.execute("PRAGMA journal_mode=MEMORY")
        self._db.execute("PRAGMA synchronous=OFF")
        self._db.execute("PRAGMA temp_store=MEMORY")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")
        self._held_checked = False

    @classmethod
    def create(cls, directory: str | Path, name: str = "ordering") -> SqliteOrderingStore:
        """A fresh, empty store in ``directory``: any previous file is deleted first.

        The local copy is a cache only (docs/model.md, "Restart"), rebuilt
        from the changelog at task start, so an old or half-written file is
        never trusted or even read (but for a clean stop's checkpoint, which
        opens the file as it is instead: ``workers.checkpoint``).

        Args:
            directory: the task's state directory (see :func:`task_state_dir`).
            name: the file stem; one store per file.
        """
        path = Path(directory) / f"{name}.sqlite"
        for suffix in ("", "-journal", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        return cls(path)

    # -- the OrderingStore protocol -------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        """The value stored under ``key``, or ``None``."""
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (_blob(key),)).fetchone()
        return None if row is None else bytes(row[0])

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value.

        Raises:
            TypeError: ``key`` or ``value`` is not bytes-like (``None`` included:
                a tombstone is :meth:`delete`).
        """
        if value is None:
            raise TypeError("value must be bytes; use delete() for a tombstone")
        self._held_checked = False
        self._db.execute(
            "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", (_blob(key), _blob(value))
        )

    def delete(self, key: bytes) -> None:
        """Remove ``key`` (no error when absent)."""
        self._held_checked = False
        self._db.execute("DELETE FROM kv WHERE k = ?", (_blob(key),))

    def scan(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, ascending by key.

        Lazy and paged (256 rows a query, resuming after the last key seen),
        so a scan of a deep hold-back never loads every body at once and the
        caller may put or delete while iterating (rows changed ahead of the
        cursor are seen as they are when their page is read).
        """
        prefix = _blob(prefix)
        yield from self._range(prefix, prefix_upper_bound(prefix), "k, v")

    def _range(self, lower: bytes, upper: bytes | None,
               columns: str) -> Iterator[tuple[bytes, bytes]]:
        """Rows with ``lower <= k < upper`` (no upper bound for ``None``) ascending by key,
        256 a query; ``columns`` is ``"k, v"``, or ``"k"`` for keys only, each yielded as
        ``(key, VALIDATED_HELD)`` from the key index alone."""
        last: bytes | None = None
        while True:
            if columns == "k" and not self._held_checked:
                raise RuntimeError("the ordering store was written during its image scan, "
                                   "whose held rows stand for bodies validated before")
            lower_sql = "k > ?" if last is not None else "k >= ?"
            params: list[bytes | int] = [last if last is not None else lower]
            sql = f"SELECT {columns} FROM kv WHERE {lower_sql}"
            if upper is not None:
                sql += " AND k < ?"
                params.append(upper)
            sql += " ORDER BY k LIMIT ?"
            params.append(_SCAN_PAGE)
            rows = self._db.execute(sql, params).fetchall()
            if columns == "k":
                for (k,) in rows:
                    yield bytes(k), VALIDATED_HELD
            else:
                for k, v in rows:
                    yield bytes(k), bytes(v)
            if len(rows) < _SCAN_PAGE:
                return
            last = bytes(rows[-1][0])

    def image_scan(self) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` as :meth:`scan` yields them, for the engine's restore
        (``parsley.engine.state_codec.image_items``), without reading held bodies again.

        Right after a :meth:`rebuild` that validated every held blob it kept (and before
        any write), each held row is yielded as ``(key, VALIDATED_HELD)`` from the key
        index alone, so the restore does not read every held body back from disk (about
        100 MB for 10^5 held messages of 1 KiB; docs/performance.md, "Restore, what
        limits it"). Otherwise it is :meth:`scan`, and the engine's own validation meets
        the corrupt blob with its usual refusal (``UNKNOWN_ORDERING_STATE_FORMAT``).

        Raises:
            RuntimeError: the store was written while the held rows were being yielded
                (unlike :meth:`scan`, no write may happen during this scan).
        """
        if not self._held_checked:
            yield from self.scan()
            return
        yield from self._range(b"", _HELD_LOW, "k, v")
        yield from self._range(_HELD_LOW, _HELD_HIGH, "k")
        yield from self._range(_HELD_HIGH, None, "k, v")

    # -- beyond the protocol ----------------------------------------------------

    def rebuild(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Replace the whole content with a changelog replay, in one sqlite transaction.

        Args:
            records: changelog records in offset order, ``(key, value)``;
                ``value is None`` is a tombstone. The latest record per key wins.

        Each held blob is validated as it is loaded (``validate_held``), so that
        :meth:`image_scan` need not read the bodies again when every blob kept passed;
        a failing one is only noted here, and the engine refuses it when it restores.

        Returns:
            The number of keys stored afterwards.

        Raises:
            TypeError: a key or value that is not bytes-like. The store is then
                left as it was before the call.
        """
        db = self._db
        self._held_checked = False
        unsound: set[bytes] = set()  # held keys whose latest blob fails validation
        db.execute("BEGIN")
        try:
            db.execute("DELETE FROM kv")
            chunk: dict[bytes, bytes | None] = {}
            for key, value in records:
                key = _blob(key)
                if value is None:
                    chunk[key] = None
                    unsound.discard(key)
                else:
                    value = chunk[key] = _blob(value)
                    if key[:1] == _HELD_LOW:
                        try:
                            validate_held(value)
                            unsound.discard(key)
                        except ParsleyFailClosedError:
                            unsound.add(key)
                if len(chunk) >= _LOAD_CHUNK:
                    _load_chunk(db, chunk)
                    chunk = {}
            _load_chunk(db, chunk)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._held_checked = not unsound
        return len(self)

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM kv").fetchone()[0])

    def close(self) -> None:
        """Close the sqlite connection (the file stays until the next :meth:`create`)."""
        self._db.close()

    def __enter__(self) -> SqliteOrderingStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blob(data: bytes) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes, got {type(data).__name__}")


def _load_chunk(db: sqlite3.Connection, chunk: dict[bytes, bytes | None]) -> None:
    # Within a chunk each key appears once (latest kept), so puts and deletes
    # commute; chunks are applied in order, so later records win across chunks.
    puts = [(k, v) for k, v in chunk.items() if v is not None]
    deletes = [(k,) for k, v in chunk.items() if v is None]
    if puts:
        db.executemany("INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)", puts)
    if deletes:
        db.executemany("DELETE FROM kv WHERE k = ?", deletes)
