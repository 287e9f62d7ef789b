"""The worker's drain loop without a broker, beside the plain relay's loop.

See docs/performance.md, "What limits the native path now".

Times, in CPU µs per record (``time.process_time`` over the whole process, so
librdkafka's own threads count; best of ``--rounds`` rounds of ``--number``
records), the per-record work of one task between ``consume()`` and the commit:

* ``baseline loop``: what ``perf/baseline.py`` does per record: ``error()``,
  ``produce(topic, value, key, headers=headers(), timestamp=...)`` and the
  read-position update;
* ``engine``: ``feed_records`` of each fetched batch and ``deliver_batch`` until
  empty (``ProcessEngine``, the engine this process runs: ``PARSLEY_ENGINE``);
* ``engine + frame``: the same, each delivery run through
  :meth:`parsley.frame.HandlerFrame.run` with the relay handler of ``perf.runs``;
* ``worker step``: :meth:`workers.step.TaskStep.feed` and :meth:`TaskStep.drain` as
  the worker calls them (engine, frame, the ``parsley.causes`` stamp, ``produce``),
  with ``workers.fetched.split_errors`` on each batch; with the native core its plain
  deliveries go through the native fast path (``workers.fastpath``), unless
  ``--no-fast``;
* ``worker step, builder relay``: the same with the relay written
  ``Effects.builder().send(out, key, value, timestamp=...).build()`` instead of
  ``Effects.send(out, key, value)``, what the one-send constructor saves;
* ``worker step, batch relay``: the same with the batch handler of ``parsley-1-batch``
  (``Process.receives_batch``, ``perf.runs.batch_relay_handler``).

Records are ``confluent_kafka.Message`` objects with ``--value-bytes`` values and
the 16-entry ``parsley.causes`` header of the relay benchmark (``perf.load``). The
producer is a real transactional ``confluent_kafka.Producer`` on librdkafka's mock
cluster (``test.mock.num.brokers``), so ``produce`` does its real work (partitioning,
copying, batching) with no broker process competing for the cores; both loops
produce into one open transaction and flush between rounds.

Run: ``python -m perf.bench_step [--number 50000] [--rounds 5] [--value-bytes 100]
[--no-fast] [--only LOOP]``; ``--only`` times one loop (its name as printed, e.g. ``--only
"worker step, batch relay"``), for a sampling profiler such as ``perf record -p``;
``PARSLEY_ENGINE=python python -m perf.bench_step`` for the reference engine.
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from typing import Any, cast
from uuid import UUID

from confluent_kafka import Message, Producer

from parsley import Channel, Effects, Process, serdes
from parsley.engine import engine_type
from parsley.engine.channel import ChannelId
from parsley.engine.store import InMemoryOrderingStore
from parsley.frame import HandlerFrame
from parsley.native import ENGINE
from perf import load
from perf.runs import batch_relay_handler, relay_handler
from workers.fetched import split_errors
from workers.pacing import MAX_BATCH
from workers.step import TaskStep
from workers.transaction import TaskTransaction

__all__ = ["main"]

IN = ChannelId(UUID(int=0x1), 0)

LOOPS = ("baseline loop", "engine", "engine + frame", "worker step",
         "worker step, builder relay", "worker step, batch relay")
"""The loops timed, in order (the module docstring says what each does)."""


class _NoStores:
    """A task without stores (the relay declares none)."""

    def get(self, store_name: str, key: bytes) -> bytes | None:
        return None

    def apply(self, writes: Any) -> None:
        raise AssertionError("the relay writes no store")

    def pending(self) -> dict[str, Any]:
        return {}

    def committed(self) -> None:
        pass


def _records(n: int, value_bytes: int) -> list[list[Message]]:
    unreceived = load.Unreceived().channels()
    value = b"v" * value_bytes
    records = [Message(topic="in", partition=0, offset=i, key=b"k%d" % (i % 1024), value=value,
                       headers=cast("list[tuple[str, str | bytes | None]]",
                                    load.frontier_header(i, unreceived)),
                       timestamp=(1, i))
               for i in range(n)]
    return [records[i:i + MAX_BATCH] for i in range(0, n, MAX_BATCH)]


def _producer() -> Producer:
    return Producer({"test.mock.num.brokers": 1, "transactional.id": "bench-step",
                     "delivery.report.only.error": True, "log_level": 0,
                     "queue.buffering.max.messages": 2_000_000})


def _rounds(loop: Callable[[list[list[Message]]], None], batches: list[list[Message]],
            rounds: int, after: Callable[[], None]) -> float:
    """Best µs per record of ``loop(batches)`` over ``rounds`` rounds."""
    n = sum(len(b) for b in batches)
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        t0 = time.process_time()
        loop(batches)
        best = min(best, (time.process_time() - t0) / n * 1e6)
        after()
    return best


def main(argv: list[str] | None = None) -> None:
    """Print CPU µs per record for each loop (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perf.bench_step", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--number", type=int, default=50_000,
                    help="records per round (default 50000)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds per loop; the best is printed (default 5)")
    ap.add_argument("--value-bytes", type=int, default=100,
                    help="bytes of each record's value (default 100)")
    ap.add_argument("--no-fast", action="store_true",
                    help="every delivery through the Python frame (no native fast path)")
    ap.add_argument("--only", metavar="LOOP", choices=LOOPS,
                    help="time this loop only (its name as printed), e.g. under a profiler")
    a = ap.parse_args(argv)
    batches = _records(a.number, a.value_bytes)
    out = Channel("out", serdes.BYTES, serdes.BYTES)
    inbound = Channel("in", serdes.BYTES, serdes.BYTES)
    process = Process("relay").receives(inbound, relay_handler(out)).sends(out)

    def built(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, delivery.value,
                                      timestamp=delivery.timestamp).build()

    builder_process = Process("relay").receives(inbound, built).sends(out)
    batch_process = Process("relay").receives_batch(inbound, batch_relay_handler(out)).sends(out)
    producer = _producer()
    txn = TaskTransaction(producer)
    txn.init()
    txn.begin()

    def flush() -> None:
        producer.flush(30)

    # -- the plain relay's loop
    produce = producer.produce

    def baseline(batches: list[list[Message]]) -> None:
        positions: dict[tuple[str, int], int] = {}
        for batch in batches:
            for m in batch:
                if m.error():
                    raise RuntimeError(m.error())
                produce("out", m.value(), m.key(), headers=m.headers(),
                        timestamp=m.timestamp()[1])
                positions[(str(m.topic()), int(m.partition() or 0))] = int(m.offset() or 0) + 1
            producer.poll(0)

    # -- the engine alone, then with the frame; a fresh engine per round (positions restart)
    def engine_loop(with_frame: bool) -> Callable[[list[list[Message]]], None]:
        frame = HandlerFrame(process, 0, _NoStores())
        channels = {"in": IN}

        def loop(batches: list[list[Message]]) -> None:
            engine = engine_type()(InMemoryOrderingStore(), received=[IN])
            engine.start({})
            run = frame.run
            for batch in batches:
                engine.feed_records(batch, channels)
                while True:
                    delivered = engine.deliver_batch(64)
                    if with_frame:
                        with frame.latching():
                            for _, q, ts, k, v, h, _ in delivered:
                                run("in", 0, q, ts, k, v, h)
                    if len(delivered) < 64:
                        break
                engine.take_deltas()

        return loop

    # -- the worker's step
    def step_loop(relay: Process) -> Callable[[list[list[Message]]], None]:
        def loop(batches: list[list[Message]]) -> None:
            engine = engine_type()(InMemoryOrderingStore(), received=[IN])
            engine.start({})
            stores = _NoStores()
            step = TaskStep(task=0, engine=engine, frame=HandlerFrame(relay, 0, stores),
                            stores=stores, txn=txn,
                            channels={"in": IN},  # type: ignore[arg-type]
                            ordering_topic="ordering", store_topics={}, fast=not a.no_fast)
            for batch in batches:
                good, errors = split_errors(batch)
                assert not errors
                step.feed(good)
                while True:
                    step.drain()
                    if not step.more:
                        break
                producer.poll(0)

        return loop

    print(f"Worker loop without a broker: {a.number:,} records of {a.value_bytes} B, 16-entry "
          f"header, best of {a.rounds} rounds; engine: {ENGINE}"
          f"{'' if a.no_fast or ENGINE != 'native' else ', native fast path'}")
    print(f"{'loop':32s} {'CPU µs / record':>16s}")
    loops = dict(zip(LOOPS, (baseline, engine_loop(False), engine_loop(True),
                             step_loop(process), step_loop(builder_process),
                             step_loop(batch_process)), strict=True))
    for name, loop in loops.items():
        if a.only is not None and name != a.only:
            continue
        print(f"{name:32s} {_rounds(loop, batches, a.rounds, flush):16.2f}", flush=True)
    producer.abort_transaction(30)


if __name__ == "__main__":
    main()
