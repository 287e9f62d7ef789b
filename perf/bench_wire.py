"""Benchmark of the ``parsley.causes`` codec, both implementations side by side.

Run: ``python -m perf.bench_wire`` (``--repeat N`` for more rounds). Prints a
table; asserts nothing about time (figures go to docs/performance.md, "Codec").

Shape: N entries over ceil(N / 8) topics, partitions 0..7 of each (a frontier
is the sum of partition counts over the upstream topics, docs/wire-format.md, "Size"),
positions random below 2^40. Each figure is the best of several rounds, the
usual way to read through noise on a shared machine.

Columns, ns per header:
    py decode / py cold        the Python reference (``wire.reference_decode_causes``),
                               with its channel cache warm, and emptied before every call
    rs decode / rs cold        the Rust codec through the Python API (``parsley._native``):
                               the same dict of ``ChannelId`` -> int, cache warm and cold
    rs pairs                   the Rust codec returning a tuple of (ChannelId, int) pairs
                               (``parsley._native.decode_pairs``, the shape of
                               ``DeliverableMessage.causes``): no dict, no ``__hash__`` calls
    rs core                    the Rust decoder alone, looped inside Rust (no Python values)
    dict floor                 ``dict(pairs)`` of the same cached channels and ints: what
                               building the returned dict costs in CPython, whoever decodes
    py encode / rs encode      ``encode_causes`` from a dict, each implementation
    rs enc core                the Rust encoder alone, looped inside Rust
    py size / rs size          ``encoded_size`` (the budget arithmetic)
"""

from __future__ import annotations

import argparse
import random
import timeit
from collections.abc import Callable
from uuid import UUID

from parsley import wire
from parsley.engine.channel import ChannelId
from parsley.native import BUILT

SIZES = (1, 16, 64, 200, 2000)
PARTITIONS_PER_TOPIC = 8
COLUMNS = ("py decode", "py cold", "rs decode", "rs cold", "rs pairs", "rs core", "dict floor",
           "py encode", "rs encode", "rs enc core", "py size", "rs size")


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


def measure(entries: int, rnd: random.Random, repeat: int) -> dict[str, float]:
    """Every column for one frontier size (native columns absent when not built)."""
    causes = frontier(entries, rnd)
    value = wire.reference_encode_causes(causes)
    assert wire.reference_decode_causes(value) == causes
    calls = max(20, 40_000 // entries)
    row: dict[str, float] = {}

    def py_cold() -> object:
        wire._clear_cache()
        return wire.reference_decode_causes(value)

    row["py decode"] = best_ns(lambda: wire.reference_decode_causes(value), calls, repeat)
    row["py cold"] = best_ns(py_cold, max(10, calls // 4), repeat)
    row["py encode"] = best_ns(lambda: wire.reference_encode_causes(causes), calls, repeat)
    row["py size"] = best_ns(lambda: wire.reference_encoded_size(causes), calls, repeat)
    pairs = list(wire.reference_decode_causes(value).items())
    row["dict floor"] = best_ns(lambda: dict(pairs), calls, repeat)
    if BUILT is not None:
        native = BUILT
        assert native.decode_causes(value) == causes
        assert native.encode_causes(causes) == value

        def rs_cold() -> object:
            native.clear_channel_cache()
            return native.decode_causes(value)

        row["rs decode"] = best_ns(lambda: native.decode_causes(value), calls, repeat)
        row["rs cold"] = best_ns(rs_cold, max(10, calls // 4), repeat)
        row["rs pairs"] = best_ns(lambda: native.decode_pairs(value), calls, repeat)
        rounds = max(1000, 2_000_000 // entries)
        row["rs core"] = min(native.bench_decode(value, rounds) for _ in range(repeat))
        row["rs encode"] = best_ns(lambda: native.encode_causes(causes), calls, repeat)
        row["rs enc core"] = min(native.bench_encode(value, rounds) for _ in range(repeat))
        row["rs size"] = best_ns(lambda: native.encoded_size(causes), calls, repeat)
    row["bytes"] = len(value)
    row["topics"] = len({c.topic_id for c in causes})
    return row


def run(repeat: int) -> list[tuple[int, dict[str, float]]]:
    """One row per size in :data:`SIZES`."""
    rnd = random.Random(1)
    return [(entries, measure(entries, rnd, repeat)) for entries in SIZES]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds per figure (best kept)")
    args = parser.parse_args()
    if BUILT is None:
        print("parsley._native is not built: Python reference only")
    print(f"{'entries':>7} {'topics':>6} {'bytes':>6} "
          + " ".join(f"{c:>11}" for c in COLUMNS) + "   (ns per header)")
    for entries, row in run(args.repeat):
        cells = " ".join(f"{row[c]:>11,.0f}" if c in row else f"{'-':>11}" for c in COLUMNS)
        print(f"{entries:>7} {row['topics']:>6.0f} {row['bytes']:>6.0f} {cells}")


if __name__ == "__main__":
    main()
