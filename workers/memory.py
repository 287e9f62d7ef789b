"""Giving the worker's free heap back to the operating system (docs/performance.md, "Memory").

A worker that receives a burst of large records (10^5 held messages of 1 KiB: each
one's value, its ordering-changelog row and its fetch buffer pass through the heap)
frees nearly all of it within a commit, the held bodies being in the ordering store
from then on; but glibc's ``malloc`` keeps freed memory in its arenas unless it lies at
a heap's top, so the resident set stays at its high-water mark: 140–250 MiB measured
where 55 MiB is live. ``malloc_trim(0)`` (glibc, ``malloc.h``) releases every whole free
page of every arena; it takes well under a millisecond, and the worker calls it once
per status interval, before each status report, so the reported ``rss_bytes`` is what
the worker uses.

Elsewhere (another C library, or no ``malloc_trim``) :func:`heap_trimmer` returns a
function that does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable

__all__ = ["heap_trimmer"]

log = logging.getLogger("parsley.worker.memory")


def _nothing() -> None:
    return None


def heap_trimmer() -> Callable[[], None]:
    """A function that returns the process's free heap pages to the system.

    Returns:
        A call of glibc's ``malloc_trim(0)`` (no arguments, no result), or a function
        that does nothing where the C library has no ``malloc_trim``.
    """
    name = ctypes.util.find_library("c")
    if name is None:
        return _nothing
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        log.debug("no malloc_trim in %s: the free heap stays with the process", name)
        return _nothing
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def release() -> None:
        trim(0)

    return release
