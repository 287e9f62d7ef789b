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


def test_the_trimmer_trims_on_growth_or_after_its_interval_only() -> None:
    from workers.memory import TRIM_GROWTH_BYTES, TRIM_INTERVAL_S, HeapTrimmer

    rss = [100 * 2**20]
    trims: list[int] = []

    def release() -> None:
        trims.append(rss[0])
        rss[0] -= 10 * 2**20  # the trim gives pages back

    trimmer = HeapTrimmer(release, lambda: rss[0])
    assert trimmer.maybe(0.0)  # the first report
    assert not trimmer.maybe(1.0), "no growth, inside the interval"
    rss[0] += TRIM_GROWTH_BYTES - 1
    assert not trimmer.maybe(2.0), "growth below the threshold"
    rss[0] += 1
    assert trimmer.maybe(3.0), "a burst trims at once"
    assert not trimmer.maybe(3.0 + TRIM_INTERVAL_S - 0.1)
    assert trimmer.maybe(3.0 + TRIM_INTERVAL_S), "and a steady worker once an interval"
    assert len(trims) == 3
