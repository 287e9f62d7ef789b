"""A task's declared stores: a cache of committed values plus this transaction's writes.

Each declared store ``s`` of task ``i`` is changelogged to partition ``i`` of
``<prefix>-<process>-<s>-changelog`` (docs/operations.md, "Names on the cluster"). The
changelog is the truth; the cache is rebuilt from it at every task start and after
every abort (docs/model.md, "Restart").

:class:`TaskStores` is the handler frame's :class:`parsley.frame.StoreView`: ``get``
sees the open transaction's writes first (a delete reads as absence), then the
committed cache. The host chooses the cache: the worker passes a factory of sqlite
files (``workers.ordering_store.store_cache_factory``), ``parsley.testing`` keeps
each cache in memory. docs/architecture.md, "parsley/task_stores.py", gives the
transaction's cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from parsley.engine.store import InMemoryOrderingStore, OrderingStore
from parsley.frame import SerializedWrite

__all__ = ["StoreCache", "StoreCacheFactory", "TaskStores"]


class StoreCache(OrderingStore, Protocol):
    """One store's committed values: an :class:`~parsley.engine.store.OrderingStore`
    that can be replaced by a changelog replay and closed."""

    def rebuild(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Replace the content with a changelog replay (latest value per key, ``None``
        a tombstone); returns the number of keys stored."""
        ...

    def close(self) -> None:
        """Release what the cache holds (a file handle, a connection)."""
        ...


StoreCacheFactory = Callable[[str], StoreCache]
"""Makes the fresh, empty cache of the declared store it is given the name of."""


class TaskStores:
    """The stores of one task: committed values in a cache, pending writes in memory.

    Args:
        make_cache: makes each store's fresh cache (the worker's sqlite file, never
            trusted across starts), or ``None`` to keep each cache in memory
            (``parsley.testing``, which has no local state directory).
        names: the declared store names.
    """

    def __init__(self, make_cache: StoreCacheFactory | None, names: Iterable[str]) -> None:
        make: StoreCacheFactory = make_cache or (lambda _name: InMemoryOrderingStore())
        self._caches: dict[str, StoreCache] = {name: make(name) for name in names}
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
        """Close every cache."""
        for cache in self._caches.values():
            cache.close()
