"""workers.memory: the free heap goes back to the system (docs/performance.md, "Memory")."""

from __future__ import annotations

import psutil

from workers.memory import heap_trimmer


def test_trimming_returns_a_freed_burst_of_records_to_the_system() -> None:
    # A burst like a backlog of 1 KiB records (each over pymalloc's 512 B, so from glibc's
    # heap), with some that stay, interleaved (as held bodies and the worker's own
    # objects do), then freed: glibc keeps the pages between the survivors until trimmed.
    release = heap_trimmer()
    proc = psutil.Process()
    keep = []
    burst = []
    for i in range(150_000):
        burst.append(bytes([i % 251]) * 1100)
        if i % 64 == 0:
            keep.append(bytes([i % 13]) * 1100)
    peak = proc.memory_info().rss
    del burst
    before = proc.memory_info().rss
    release()
    after = proc.memory_info().rss
    print(f"peak {peak >> 20} MiB, freed {before >> 20} MiB, trimmed {after >> 20} MiB")
    assert before - after > 100 * 2**20, (peak, before, after)
