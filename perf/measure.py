"""Measurements of a relay run: the output reader, percentiles, throughput, worker CPU/RSS.

The pure part (:func:`percentile`, :func:`latency_summary`, :func:`throughput`,
:func:`held_latencies_ms`, :class:`CpuWindow`) is unit-tested without a broker
(``tests/unit/test_perf_report.py``); :class:`OutputReader` and
:class:`WorkerSampler` touch Kafka and the OS.

Units: times in ms unless named ``_us``/``_s``; sizes in bytes.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import psutil  # type: ignore[import-untyped]

from perf.load import CAUSE, HELD, now_us, parse_value

__all__ = [
    "CpuWindow",
    "OutputReader",
    "Received",
    "WorkerSampler",
    "held_latencies_ms",
    "latency_summary",
    "percentile",
    "throughput",
]


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile of ``values`` (None when empty).

    Nearest rank: the smallest value with at least ``q`` % of the values at or
    below it, i.e. the ``ceil(q/100 * n)``-th smallest (1-based). p0 is the minimum,
    p100 the maximum.

    Raises:
        ValueError: ``q`` outside [0, 100].
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside [0, 100]")
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float | int | None]:
    """``{"count", "p50_ms", "p99_ms", "max_ms"}`` of a list of latencies in ms."""
    return {
        "count": len(latencies_ms),
        "p50_ms": percentile(latencies_ms, 50),
        "p99_ms": percentile(latencies_ms, 99),
        "max_ms": percentile(latencies_ms, 100),
    }


def throughput(messages: int, start_ms: float, end_ms: float) -> float | None:
    """Messages per second over [start_ms, end_ms]; None for an empty or reversed window."""
    if messages <= 0 or end_ms <= start_ms:
        return None
    return messages * 1000.0 / (end_ms - start_ms)


@dataclass(frozen=True, slots=True)
class Received:
    """One output record as the reader saw it.

    Attributes:
        kind: the stamp's kind (perf.load PLAIN/CAUSE/HELD).
        seq: the stamp's sequence number.
        sent_us: when the load generator sent the input message, µs.
        read_us: when the reader got the output record, µs.
        append_ms: the output record's timestamp (LogAppendTime on the benchmark's
            output topics: when the broker appended it), ms.
        header_bytes: sum of header key and value lengths on the output record.
    """

    kind: int
    seq: int
    sent_us: int
    read_us: int
    append_ms: int
    header_bytes: int


def held_latencies_ms(records: Iterable[Received]) -> tuple[list[float], list[float]]:
    """Latencies of diamond HELD messages: (from own send, from their cause's send).

    A held message cannot be delivered before its cause is sent, so its added cost
    is the time from the later of the two sends to its read. Pairs are joined by
    ``seq``; a HELD record whose CAUSE was not read is skipped.

    Returns:
        (ms from the held message's own send, ms from max(own send, cause send)).
    """
    cause_sent: dict[int, int] = {}
    held: list[Received] = []
    for r in records:
        if r.kind == CAUSE:
            cause_sent[r.seq] = r.sent_us
        elif r.kind == HELD:
            held.append(r)
    own: list[float] = []
    released: list[float] = []
    for r in held:
        c = cause_sent.get(r.seq)
        if c is None:
            continue
        own.append((r.read_us - r.sent_us) / 1000.0)
        released.append((r.read_us - max(r.sent_us, c)) / 1000.0)
    return own, released


@dataclass
class CpuWindow:
    """CPU seconds a set of processes used between two samples.

    ``start`` and ``end`` map pid -> user+system CPU seconds; a pid missing from
    ``end`` (exited) counts what ``start`` had, i.e. nothing.
    """

    start: dict[int, float] = field(default_factory=dict)
    end: dict[int, float] = field(default_factory=dict)

    def per_pid(self) -> dict[int, float]:
        """pid -> CPU seconds used in the window (never negative)."""
        return {pid: max(0.0, self.end.get(pid, t0) - t0) for pid, t0 in self.start.items()}

    def total(self) -> float:
        """CPU seconds of all pids together."""
        return sum(self.per_pid().values())


def cpu_seconds(pids: Iterable[int]) -> dict[int, float]:
    """pid -> user+system CPU seconds so far (children excluded); dead pids omitted."""
    out: dict[int, float] = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        out[pid] = t.user + t.system
    return out


class WorkerSampler:
    """Peak resident memory of the worker processes, sampled by the caller's loop."""

    def __init__(self, pids: Iterable[int]) -> None:
        self.pids = list(pids)
        self.peak_rss: dict[int, int] = {}

    def sample(self) -> None:
        """Record each live pid's RSS if it is a new peak."""
        for pid in self.pids:
            try:
                rss = psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
            if rss > self.peak_rss.get(pid, 0):
                self.peak_rss[pid] = rss


class OutputReader:
    """A ``read_committed`` consumer of the relay's output topic(s), on a background thread.

    It reads from the beginning of every partition, in its own fresh group, and
    keeps a :class:`Received` per stamped record; the read time is taken when
    ``consume`` returns, so the thread must keep polling while records flow (the
    latency phase sends and reads at the same time).
    """

    def __init__(self, bootstrap_servers: str, topics: Sequence[str],
                 sampler: WorkerSampler | None = None) -> None:
        import threading

        from confluent_kafka import Consumer

        self.consumer = Consumer({
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"perf-reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 5,
        })
        self._assigned = threading.Event()
        self.consumer.subscribe(list(topics), on_assign=lambda _c, _p: self._assigned.set())
        self.records: list[Received] = []
        self.sampler = sampler
        self._stop = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        last_sample = 0.0
        while not self._stop:
            batch = self.consumer.consume(num_messages=5000, timeout=0.02)
            read_us = now_us()
            for m in batch:
                if m.error():
                    continue
                stamp = parse_value(m.value())
                if stamp is None:
                    continue
                hb = 0
                for h in m.headers() or []:
                    hb += len(str(h[0]).encode()) + len(h[1] or b"")
                self.records.append(
                    Received(stamp.kind, stamp.seq, stamp.sent_us, read_us, m.timestamp()[1], hb)
                )
            if self.sampler is not None and time.monotonic() - last_sample > 0.2:
                self.sampler.sample()
                last_sample = time.monotonic()

    def wait_assigned(self, timeout_s: float) -> bool:
        """Wait until the reader's group has given it its partitions (its join can take a
        second, which a timing that starts after it must not include); False on timeout."""
        return self._assigned.wait(timeout_s)

    def read_until(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` records in total have been read; False on timeout."""
        deadline = time.monotonic() + timeout_s
        while len(self.records) < count:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def since(self, start: int) -> list[Received]:
        """Records read after the first ``start``."""
        return self.records[start:]

    def close(self) -> None:
        """Stop the thread and close the consumer."""
        self._stop = True
        self._thread.join(5)
        self.consumer.close()


def header_bytes_per_message(records: Sequence[Received]) -> float | None:
    """Mean header bytes per output record (None for no records)."""
    if not records:
        return None
    return sum(r.header_bytes for r in records) / len(records)


def duplicates(records: Iterable[Received]) -> int:
    """How many (kind, seq) pairs were read more than once (should be 0: exactly-once)."""
    seen: set[tuple[int, int]] = set()
    dup = 0
    for r in records:
        key = (r.kind, r.seq)
        if key in seen:
            dup += 1
        seen.add(key)
    return dup


def rss_summary(peaks: Mapping[int, int]) -> int | None:
    """The largest peak RSS over the workers, bytes."""
    return max(peaks.values()) if peaks else None
