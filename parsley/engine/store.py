"""The ordering store seam: a byte-keyed, byte-valued map the engine restores from.

One store holds one task's ordering state in the Java layout
(docs/model.md, "The stored form": one-byte tags ``v f c p n h``, 20-byte
channels, int64 big-endian numbers). The engine reads it once when it is
built (a full scan) and afterwards only to fetch a held message's body when
that message reaches the head of its channel's hold-back buffer. The engine
writes it in :meth:`~parsley.engine.engine.ProcessEngine.take_deltas`, the
same rows it hands the caller for the changelog, so a store and the
changelog records committed with it always agree.

A store is a cache of the changelog (docs/model.md, "Restart"): the
worker's implementation replays the changelog partition into one; a
simulator rebuilds one with :meth:`InMemoryOrderingStore.from_records` from
the deltas it committed; ``parsley.testing`` keeps its ordering store and its declared
stores' caches in one (``parsley.task_stores.StoreCache``).

Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

__all__ = ["InMemoryOrderingStore", "OrderingStore"]


@runtime_checkable
class OrderingStore(Protocol):
    """A byte map with ordered prefix scans (the Java ``OrderingStore`` seam).

    Keys and values are raw ``bytes`` exactly as they appear in the ordering
    changelog's records (docs/model.md, "The stored form"). Implementations need not be thread-safe:
    one engine drives one store from one thread.

    A store may also offer ``image_scan()``, which the engines restore from instead of
    ``scan()`` (``parsley.engine.state_codec.image_items``): the same keys in the same order,
    with held bodies it has validated itself replaced by ``VALIDATED_HELD``.
    """

    def get(self, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or ``None`` when absent."""
        ...

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key``, replacing any previous value."""
        ...

    def delete(self, key: bytes) -> None:
        """Remove ``key``; deleting an absent key is not an error."""
        ...

    def scan(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Yield every ``(key, value)`` whose key starts with ``prefix``.

        Keys come in ascending unsigned byte order, so a scan of the ``h``
        prefix returns each channel's held messages in position order
        (docs/model.md, "The stored form": "a prefix scan returns the channel's hold-back buffer in
        position order").
        """
        ...


class InMemoryOrderingStore:
    """A dict-backed :class:`OrderingStore` for tests, the simulator and the worker's cache.

    ``get``/``put``/``delete`` are O(1); ``scan`` sorts the matching keys
    (O(n log n)), which the engine does once, when it is built.
    """

    __slots__ = ("_data",)

    def __init__(self, items: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self._data: dict[bytes, bytes] = {}
        for key, value in items:
            self.put(key, value)

    @classmethod
    def from_records(cls, records: Iterable[tuple[bytes, bytes | None]]) -> InMemoryOrderingStore:
        """Replay changelog records in order: latest value per key, ``None`` a tombstone.

        Args:
            records: ``(key, value)`` pairs in changelog order, as
                :meth:`ProcessEngine.take_deltas` returns them (possibly the
                concatenation of many calls). A ``None`` value deletes the key.

        Returns:
            A store holding what a compacted changelog would hold.
        """
        store = cls()
        store.rebuild(records)
        return store

    def rebuild(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Replace the whole content with a changelog replay, as :meth:`from_records`.

        Returns:
            The number of keys stored afterwards.

        Raises:
            TypeError: a key or value that is not bytes-like; the store is then left
                as it was before the call.
        """
        replay: InMemoryOrderingStore = InMemoryOrderingStore()
        for key, value in records:
            if value is None:
                replay.delete(key)
            else:
                replay.put(key, value)
        self._data = replay._data
        return len(self._data)

    def close(self) -> None:
        """Nothing to release (a dict, no connection); the entries stay readable."""

    def get(self, key: bytes) -> bytes | None:
        """Return the value stored under ``key``, or ``None`` when absent."""
        return self._data.get(key)

    def put(self, key: bytes, value: bytes) -> None:
        """Store ``value`` under ``key`` (both copied to immutable ``bytes``).

        Raises:
            TypeError: ``key`` or ``value`` is not bytes-like.
        """
        self._data[bytes(key)] = bytes(value)

    def delete(self, key: bytes) -> None:
        """Remove ``key`` if present."""
        self._data.pop(key, None)

    def scan(self, prefix: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """Yield ``(key, value)`` pairs under ``prefix`` in ascending key order.

        The result is computed from a snapshot of the keys, so writing the
        store while iterating is safe (later writes may or may not be seen).
        """
        keys = sorted(k for k in self._data if k.startswith(prefix))
        data = self._data
        for key in keys:
            value = data.get(key)
            if value is not None:
                yield key, value

    def items(self) -> tuple[tuple[bytes, bytes], ...]:
        """Every entry in ascending key order (for tests and inspection)."""
        return tuple(self.scan())

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"InMemoryOrderingStore({len(self._data)} entries)"
