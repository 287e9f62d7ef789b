"""A task's declared stores: a sqlite cache of committed values plus this transaction's writes.

Each declared store ``s`` of task ``i`` is changelogged to partition ``i`` of
``<prefix>-<process>-<s>-changelog`` (docs/operations.md, "Names on the cluster"). The
changelog is the truth; the local sqlite file is a cache rebuilt from it at
every task start and after every abort (each declared store from partition ``i`` of
``<prefix>-<process>-<store>-changelog``: docs/operations.md, "Names on the cluster").

:class:`TaskStores` is the handler frame's :class:`parsley.frame.StoreView`:
``get`` sees the open transaction's writes first (a delete reads as absence),
then the committed cache. :meth:`TaskStores.pending` gives the merged changelog
writes of the open transaction (latest value per key, docs/model.md, "Restart"), and
:meth:`TaskStores.committed` folds them into the cache once the transaction
commits; :meth:`TaskStores.discard` drops them on an abort.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from parsley.frame import SerializedWrite
from workers.ordering_store import SqliteOrderingStore

__all__ = ["TaskStores"]


class TaskStores:
    """The stores of one task: committed values on disk, pending writes in memory.

    Args:
        directory: the task's state directory (``workers.ordering_store.task_state_dir``),
            or ``None`` to keep each cache in memory (``parsley.testing``, which has no
            local state directory).
        names: the declared store names.

    Each store is a fresh :class:`SqliteOrderingStore` file ``store-<name>.sqlite``
    (any previous file is deleted: the cache is never trusted across starts), or a
    fresh in-memory one.
    """

    def __init__(self, directory: str | Path | None, names: Iterable[str]) -> None:
        self._dir = None if directory is None else Path(directory)
        self._caches: dict[str, SqliteOrderingStore] = {
            name: SqliteOrderingStore.in_memory() if self._dir is None
            else SqliteOrderingStore.create(self._dir, f"store-{name}") for name in names
        }
        self._pending: dict[str, dict[bytes, bytes | None]] = {n: {} for n in self._caches}

    @property
    def names(self) -> tuple[str, ...]:
        """The declared store names."""
        return tuple(self._caches)

    def rebuild(self, name: str, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Replace store ``name``'s cache with a changelog replay (latest value per key wins).

        Returns:
            The number of keys stored.

        Raises:
            KeyError: ``name`` is not declared.
        """
        self._pending[name].clear()
        return self._caches[name].rebuild(records)

    # -- the frame's StoreView --------------------------------------------------

    def get(self, store_name: str, key: bytes) -> bytes | None:
        """The value bytes under ``key``: this transaction's write if any, else the committed one.

        Raises:
            KeyError: ``store_name`` is not declared (the frame resolves names first).
        """
        pending = self._pending[store_name]
        if key in pending:
            return pending[key]
        return self._caches[store_name].get(key)

    def items(self, store_name: str) -> Iterator[tuple[bytes, bytes]]:
        """Every ``(key, value)`` of store ``store_name`` as :meth:`get` sees it (the open
        transaction's writes over the committed ones, a delete as absence), ascending
        by key bytes.

        Raises:
            KeyError: ``store_name`` is not declared.
        """
        pending = self._pending[store_name]
        merged: dict[bytes, bytes | None] = dict(self._caches[store_name].scan())
        merged.update(pending)
        for key in sorted(merged):
            value = merged[key]
            if value is not None:
                yield key, value

    # -- the transaction --------------------------------------------------------

    def apply(self, writes: Iterable[SerializedWrite]) -> None:
        """Record a delivery's writes in the open transaction (in order; ``None`` deletes)."""
        for w in writes:
            self._pending[w.store][w.key] = w.value

    def pending(self) -> Mapping[str, Mapping[bytes, bytes | None]]:
        """Per store, the open transaction's writes merged to the latest value per key."""
        return {name: p for name, p in self._pending.items() if p}

    def committed(self) -> None:
        """Fold the open transaction's writes into the cache: call after a successful commit."""
        for name, pending in self._pending.items():
            if not pending:
                continue
            cache = self._caches[name]
            for key, value in pending.items():
                if value is None:
                    cache.delete(key)
                else:
                    cache.put(key, value)
            pending.clear()

    def discard(self) -> None:
        """Drop the open transaction's writes: call after an abort."""
        for pending in self._pending.values():
            pending.clear()

    def close(self) -> None:
        """Close every sqlite connection."""
        for cache in self._caches.values():
            cache.close()
