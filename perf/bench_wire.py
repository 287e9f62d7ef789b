"""Benchmark of the ``parsley.causes`` codec: ns per header and bytes, by frontier size.

Run: ``python -m perf.bench_wire`` (``--repeat N`` for more rounds). Prints a
table; asserts nothing about time (figures go to docs/performance.md, "Codec").

Shape: N entries over ceil(N / 8) topics, partitions 0..7 of each (a frontier
is the sum of partition counts over the upstream topics, docs/wire-format.md, "Size"),
positions random below 2^40. Each figure is the best of several rounds, the
usual way to read through noise on a shared machine.

Columns:
    entries, topics, bytes     the frontier and its encoded size
    decode warm                decode_causes with the channel cache holding these channels
    decode cold                the same with the cache emptied before every call
    encode                     encode_causes from a dict
    size                       encoded_size (the budget arithmetic)
"""

from __future__ import annotations

import argparse
import random
import timeit
from collections.abc import Callable
from uuid import UUID

from parsley import wire
from parsley.engine.channel import ChannelId

SIZES = (1, 16, 64, 200, 2000)
PARTITIONS_PER_TOPIC = 8


def frontier(entries: int, rnd: random.Random) -> dict[ChannelId, int]:
    """A frontier of ``entries`` channels, 8 partitions per topic."""
    out: dict[ChannelId, int] = {}
    topic = UUID(int=rnd.getrandbits(128) | 1)
    for k in range(entries):
        if k % PARTITIONS_PER_TOPIC == 0:
            topic = UUID(int=rnd.getrandbits(128) | 1)
        out[ChannelId(topic, k % PARTITIONS_PER_TOPIC)] = rnd.randrange(2**40)
    return out


def best_ns(fn: Callable[[], object], calls: int, repeat: int) -> float:
    """Best-of-``repeat`` mean time per call, in ns."""
    return min(timeit.repeat(fn, number=calls, repeat=repeat)) / calls * 1e9


def run(repeat: int) -> list[tuple[int, int, int, float, float, float, float]]:
    rnd = random.Random(1)
    rows = []
    for entries in SIZES:
        causes = frontier(entries, rnd)
        value = wire.encode_causes(causes)
        assert wire.decode_causes(value) == causes
        calls = max(20, 40_000 // entries)

        def cold(value: bytes = value) -> object:
            wire._clear_cache()
            return wire.decode_causes(value)

        rows.append((
            entries,
            len({c.topic_id for c in causes}),
            len(value),
            best_ns(lambda value=value: wire.decode_causes(value), calls, repeat),
            best_ns(cold, calls, repeat),
            best_ns(lambda causes=causes: wire.encode_causes(causes), calls, repeat),
            best_ns(lambda causes=causes: wire.encoded_size(causes), calls, repeat),
        ))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds per figure (best kept)")
    args = parser.parse_args()
    print(f"{'entries':>7} {'topics':>6} {'bytes':>7} {'decode warm':>12} {'decode cold':>12} "
          f"{'encode':>11} {'size':>11}   (ns per header; ns per entry in brackets)")
    for entries, topics, size, warm, cold, enc, sz in run(args.repeat):
        print(f"{entries:>7} {topics:>6} {size:>7} {warm:>12,.0f} {cold:>12,.0f} {enc:>11,.0f} "
              f"{sz:>11,.0f}   [{warm / entries:,.0f} / {cold / entries:,.0f} / "
              f"{enc / entries:,.0f}]")


if __name__ == "__main__":
    main()
