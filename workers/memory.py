"""Giving the worker's free heap back to the operating system (docs/performance.md, "Memory").

A worker that receives a burst of large records (10^5 held messages of 1 KiB: each
one's value, its ordering-changelog row and its fetch buffer pass through the heap)
frees nearly all of it within a commit, the held bodies being in the ordering store
from then on; but glibc's ``malloc`` keeps freed memory in its arenas unless it lies at
a heap's top, so the resident set stays at its high-water mark: 140–250 MiB measured
where 55 MiB is live. ``malloc_trim(0)`` (glibc, ``malloc.h``) releases every whole free
page of every arena; it takes well under a millisecond, but it locks each arena in
turn (librdkafka's threads wait) and pages it releases fault back in at the next
burst. So :class:`HeapTrimmer`, asked before each status report, trims when the
resident set grew by :data:`TRIM_GROWTH_BYTES` since the last trim (a burst), and
otherwise at most every :data:`TRIM_INTERVAL_S`: the reported ``rss_bytes`` is close to
what the worker uses, and a steady worker trims twice a minute.

Elsewhere (another C library, or no ``malloc_trim``) :func:`heap_trimmer` returns a
function that does nothing.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Final

__all__ = ["TRIM_GROWTH_BYTES", "TRIM_INTERVAL_S", "HeapTrimmer", "heap_trimmer"]

TRIM_INTERVAL_S: Final = 30.0
"""The longest time between two trims of the worker's heap, s."""
TRIM_GROWTH_BYTES: Final = 16 * 2**20
"""Growth of the resident set since the last trim that trims at once, bytes."""

log = logging.getLogger("parsley.worker.memory")


def _nothing() -> None:
    return None


def heap_trimmer() -> Callable[[], None]:
    """A function that returns the process's free heap pages to the system.

    Returns:
        A call of glibc's ``malloc_trim(0)`` (no arguments, no result), or a function
        that does nothing where the C library has no ``malloc_trim``.
    """
    try:
        # The symbols already loaded in the process (no ldconfig lookup): the C library's.
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        log.debug("no malloc_trim in this C library: the free heap stays with the process")
        return _nothing
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def release() -> None:
        trim(0)

    return release


class HeapTrimmer:
    """Decides when to trim, and trims (see the module docstring).

    Args:
        release: the trim (:func:`heap_trimmer`'s function).
        rss: the process's resident set now, bytes (psutil's ``memory_info().rss``).
    """

    def __init__(self, release: Callable[[], None], rss: Callable[[], int]) -> None:
        self._release = release
        self._rss = rss
        self._after = 0  # resident set after the last trim, bytes
        self._next = 0.0  # monotonic s

    def maybe(self, now: float) -> bool:
        """Trim if the resident set grew by :data:`TRIM_GROWTH_BYTES` since the last trim
        or :data:`TRIM_INTERVAL_S` passed; ``now``: monotonic s. Returns whether it did."""
        if now < self._next and self._rss() < self._after + TRIM_GROWTH_BYTES:
            return False
        self._release()
        self._after = self._rss()
        self._next = now + TRIM_INTERVAL_S
        return True
