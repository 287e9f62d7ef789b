"""Benchmark of the ordering engine: feed-to-deliver, chain release, restore.

Run: ``python -m perf.bench_engine`` (``--quick`` for smaller sizes; ``--engine
python|native|both``, default both, side by side). Prints figures; asserts nothing
about time (figures go to docs/performance.md, "Engine"). Each timing is the best of
several rounds, in CPU time. ``python`` is the pure-Python reference
(``parsley.engine.engine.ProcessEngine``), ``native`` the Rust core
(``parsley.engine.native_engine.NativeProcessEngine``).

Scenarios:

feed-to-deliver
    One message per call of ``receive`` + ``deliver_next`` (until ``None``),
    with a 16-entry ``parsley.causes`` header: 15 causes on channels this task
    does not receive and one on a received channel settled long ago, so the
    message is deliverable at once (the hot path of a relay). ``take_deltas``
    runs every 100 messages, like a commit interval. Variants:

    * ``distinct, 1 entry moves``: every header differs in one position (an
      upstream relay's frontier moves with each of its deliveries), so each
      header misses the decode cache (the Python engine decodes it; the native
      one patches its predecessor's decoding, docs/performance.md item 9); the
      realistic case;
    * ``distinct, all 15 move``: every upstream position advances with every
      message, the worst case for merging and for the delivered past;
    * ``repeated``: the same header bytes every time (a gateway stamping one
      session token), which the engine's decode cache serves;
    * ``+ send``: also ``causes_header()`` once per message, as a relay
      emitting one record per delivery does;
    * ``decode only``: ``wire.decode_causes`` of the same distinct headers,
      the codec's share of the cost;
    * ``batch``: the worker's calls, ``feed_records`` of 500 fetched
      ``confluent_kafka.Message`` records then ``deliver_batch(500)`` (each entry
      carries the causes header its sends stamp).

chain release
    10^4 messages held and persisted (``take_deltas``), so their bodies live
    only in the store; one feed then releases them all. ``one channel``: all
    behind one head on channel B. ``zig-zag``: B@i waits for C@i-1 and C@i
    for B@i, so the release alternates channels. Time per released message,
    including reading and decoding each body from the store.

restore
    A store holding 10^5 held entries on 4 channels (plus coverage and
    frontier rows); time to build a ``ProcessEngine`` over it (scan, validate
    every blob, keep positions only) and the resident memory it retains.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable
from typing import Any
from uuid import UUID

import psutil
from confluent_kafka import Message

from parsley import wire
from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import ProcessEngine
from parsley.engine.native_engine import NativeProcessEngine
from parsley.engine.store import InMemoryOrderingStore

ENGINES: dict[str, Any] = {"python": ProcessEngine, "native": NativeProcessEngine}

R1 = ChannelId(UUID(int=0x1001), 0)   # the channel messages arrive on
R2 = ChannelId(UUID(int=0x1002), 0)   # received, settled long ago
A = ChannelId(UUID(int=0x2001), 0)
B = ChannelId(UUID(int=0x2002), 0)
C = ChannelId(UUID(int=0x2003), 0)
UPSTREAM = [ChannelId(UUID(int=0x3000 + t // 4), t % 4) for t in range(15)]  # not received


def _best(fn: Callable[[], float], rounds: int) -> float:
    return min(fn() for _ in range(rounds))


def _headers(n: int, moving: int) -> list[tuple[tuple[str, bytes | None], ...]]:
    """Headers whose first ``moving`` upstream positions advance with each message."""
    out = []
    for i in range(n):
        causes = {ch: 1000 + (i if k < moving else 0) + k for k, ch in enumerate(UPSTREAM)}
        causes[R2] = 5
        out.append((("parsley.causes", wire.encode_causes(causes)), ("trace", b"x")))
    return out


def feed_to_deliver(engine: Any, n: int, moving: int, send: bool) -> float:
    """Mean µs per message for receive + deliver_next (+ causes_header)."""
    headers = _headers(n, moving)
    messages = [ReceivedMessage(R1, i, i, b"key", b"value-%d" % i, headers[i]) for i in range(n)]
    e = engine(InMemoryOrderingStore(), received=[R1, R2])
    e.start({R2: 100})
    receive = e.receive
    deliver = e.deliver_next
    header = e.causes_header
    gc.collect()
    t0 = time.process_time()
    for i, m in enumerate(messages):
        receive(m)
        while deliver() is not None:
            pass
        if send:
            header()
        if i % 100 == 99:
            e.take_deltas()
    elapsed = time.process_time() - t0
    assert e.held_count() == 0
    return elapsed / n * 1e6


def feed_batches(engine: Any, n: int, moving: int, batch: int = 500) -> float:
    """Mean µs per message for feed_records + deliver_batch over fetched records."""
    headers = _headers(n, moving)
    records = [Message(topic="r1", partition=0, offset=i, key=b"key", value=b"value-%d" % i,
                       headers=list(headers[i]), timestamp=(1, i)) for i in range(n)]
    batches = [records[i:i + batch] for i in range(0, n, batch)]
    channels = {"r1": R1}
    e = engine(InMemoryOrderingStore(), received=[R1, R2])
    e.start({R2: 100})
    feed = e.feed_records
    deliver = e.deliver_batch
    gc.collect()
    t0 = time.process_time()
    delivered = 0
    for records in batches:
        feed(records, channels)
        delivered += len(deliver(batch))
        e.take_deltas()
    elapsed = time.process_time() - t0
    assert delivered == n and e.held_count() == 0
    return elapsed / n * 1e6


def decode_only(n: int) -> float:
    """Mean µs per header for wire.decode_causes of distinct 16-entry headers."""
    values = [h[0][1] for h in _headers(n, 1)]
    decode = wire.decode_causes
    t0 = time.process_time()
    for v in values:
        decode(v)
    return (time.process_time() - t0) / n * 1e6


def chain_release(engine: Any, n: int, zigzag: bool) -> float:
    """Mean µs per released message, bodies read back from the store."""
    e = engine(InMemoryOrderingStore(), received=[A, B, C])
    e.start({})
    enc = wire.encode_causes
    if zigzag:
        e.receive(ReceivedMessage(B, 0, 0, None, b"b0", (("parsley.causes", enc({A: 0})),)))
        e.receive(ReceivedMessage(C, 0, 0, None, b"c0", (("parsley.causes", enc({B: 0})),)))
        for i in range(1, n // 2):
            e.receive(ReceivedMessage(B, i, 0, None, b"b", (("parsley.causes", enc({C: i - 1})),)))
            e.receive(ReceivedMessage(C, i, 0, None, b"c", (("parsley.causes", enc({B: i})),)))
    else:
        for i in range(n):
            e.receive(ReceivedMessage(B, i, 0, None, b"b", (("parsley.causes", enc({A: 0})),)))
    e.take_deltas()
    assert e.deliver_next() is None
    held = e.held_count()
    gc.collect()
    t0 = time.process_time()
    e.receive(ReceivedMessage(A, 0, 0, None, b"a", ()))
    released = 0
    while e.deliver_next() is not None:
        released += 1
    elapsed = time.process_time() - t0
    assert released == held + 1 and e.held_count() == 0, (released, held)
    return elapsed / released * 1e6


def _held_store(n: int) -> InMemoryOrderingStore:
    store = InMemoryOrderingStore()
    e = ProcessEngine(store, received=[A, B, C, R1])
    e.start({})
    cause = (("parsley.causes", wire.encode_causes({R2: 1, **{u: 7 for u in UPSTREAM}})),)
    chans = [B, C, R1]
    e.receive(ReceivedMessage(A, 0, 0, None, b"a", (("parsley.causes",
                                                      wire.encode_causes({R1: n})),)))
    for i in range(n - 1):
        ch = chans[i % 3]
        e.receive(ReceivedMessage(ch, i, i, b"k%d" % i, b"v" * 64, (*cause, ("h", b"1"))))
        if i % 10_000 == 0:
            e.take_deltas()
    e.take_deltas()
    assert e.held_count() == n
    return store


def restore(engine: Any, n: int) -> dict[str, float]:
    """Build an engine over ``n`` held entries: seconds, and memory in MiB.

    Keys: ``seconds`` (CPU time to build), ``retained`` (Python memory the
    built engine keeps, tracemalloc), ``peak`` (tracemalloc peak while
    building: the scan and validation transients), ``rss`` (process resident
    set after building, store included), ``store`` (bytes of store rows).
    """
    store = _held_store(n)
    store_mib = sum(len(k) + len(v) for k, v in store.items()) / 2**20
    gc.collect()
    t0 = time.process_time()
    e = engine(store, received=[A, B, C, R1])
    seconds = time.process_time() - t0
    assert e.held_count() == n
    del e
    gc.collect()
    tracemalloc.start()
    e = engine(store, received=[A, B, C, R1])
    gc.collect()
    retained, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = psutil.Process().memory_info().rss
    assert e.held_count() == n
    return {"seconds": seconds, "retained": retained / 2**20, "peak": peak / 2**20,
            "rss": rss / 2**20, "store": store_mib}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer rounds")
    parser.add_argument("--engine", choices=("both", "python", "native"), default="both")
    args = parser.parse_args(argv)
    n = 5_000 if args.quick else 50_000
    rounds = 2 if args.quick else 5
    chain = 10_000
    held = 20_000 if args.quick else 100_000
    names = ["python", "native"] if args.engine == "both" else [args.engine]
    if NativeProcessEngine is None and "native" in names:
        raise SystemExit("the native core parsley._native is not built (pip install -e .)")
    engines = [(name, ENGINES[name]) for name in names]
    head = "".join(f"{name:>12s}" for name in names)

    print(f"Engine benchmark (best of {rounds} rounds; CPU µs per message)")
    print(f"feed-to-deliver, 16-entry header, {n} messages:{head}")
    for label, moving, send in (
        ("distinct, 1 entry moves", 1, False),
        ("distinct, 1 entry moves + send", 1, True),
        ("distinct, all 15 move", 15, False),
        ("distinct, all 15 move + send", 15, True),
        ("repeated header", 0, False),
        ("repeated header + send", 0, True),
    ):
        row = "".join(
            f"{_best(lambda e=e, m=moving, s=send: feed_to_deliver(e, n, m, s), rounds):9.2f} µs"
            for _, e in engines)
        print(f"  {label:44s}{row}")
    for label, moving in (("batch: feed_records + deliver_batch, 1 moves", 1),
                          ("batch: feed_records + deliver_batch, 15 move", 15)):
        row = "".join(f"{_best(lambda e=e, m=moving: feed_batches(e, n, m), rounds):9.2f} µs"
                      for _, e in engines)
        print(f"  {label:44s}{row}")
    us = _best(lambda: decode_only(n), rounds)
    print(f"  {'wire.decode_causes alone (selected codec)':44s}{us:9.2f} µs")
    print(f"chain release behind {chain} held messages (bodies in the store), per message:")
    for label, zigzag in (("one channel", False), ("zig-zag across two channels", True)):
        row = "".join(
            f"{_best(lambda e=e, z=zigzag: chain_release(e, chain, z), max(2, rounds // 2)):9.2f}"
            " µs" for _, e in engines)
        print(f"  {label:44s}{row}")
    for name, e in engines:
        r = restore(e, held)
        print(f"restore {held} held entries ({r['store']:.1f} MiB of store rows), {name}:")
        print(f"  build the engine            {r['seconds']:7.2f} s "
              f"({r['seconds'] / held * 1e6:.1f} µs/entry)")
        print(f"  memory the engine retains   {r['retained']:7.1f} MiB (tracemalloc)")
        print(f"  peak while restoring        {r['peak']:7.1f} MiB (tracemalloc)")
        print(f"  process RSS afterwards      {r['rss']:7.1f} MiB (store included)")


if __name__ == "__main__":
    main()
