"""The handler frame's cost per message, without a broker.

See docs/performance.md, "Handler frame and batch loop".

Times, in CPU µs per message (``time.process_time``, best of ``--repeat`` rounds, so
that a busy machine's waits do not count), the parts of the worker's per-message path
that are pure Python and independent of the engine:

* ``Delivery(...)``: the object every handler receives;
* ``builder().send().build()``: the effects of a one-send handler;
* ``frame.run``: :meth:`parsley.frame.HandlerFrame.run` for a relay handler (decode,
  ``Delivery``, the handler, target resolution, serialization, header checks), with
  BYTES serdes and with STRING keys and JSON values; ``frame.deliver`` adds the
  :class:`parsley.frame.FrameResult` the public form returns;
* ``frame.run + headers``: ``frame.run`` plus appending ``parsley.causes`` to the header
  list, as :meth:`workers.step.TaskStep.drain` does before ``Producer.produce``;
* ``frame.run, counter``: a handler that reads a STRING/JSON store, puts the new count and
  sends it (a dict as the worker's store view).

Run: ``python -m perf.bench_frame [--repeat 15] [--number 20000]``.
"""

from __future__ import annotations

import argparse
import time
import timeit
from typing import Any

from parsley import Channel, Effects, Process, Store
from parsley.effects import Delivery
from parsley.frame import HandlerFrame
from parsley.serdes import BYTES, JSON, STRING

__all__ = ["main"]


class _NoStores:
    def get(self, store_name: str, key: bytes) -> bytes | None:
        return None


def _relay_frame(key_serde: Any, value_serde: Any) -> HandlerFrame:
    out = Channel("out", key_serde, value_serde)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, delivery.value).build()

    process = Process("relay").receives(Channel("in", key_serde, value_serde), handle).sends(out)
    return HandlerFrame(process, 0, _NoStores())


class _DictStores:
    def __init__(self) -> None:
        self.data: dict[tuple[str, bytes], bytes] = {("counts", b"k"): b"41"}

    def get(self, store_name: str, key: bytes) -> bytes | None:
        return self.data.get((store_name, key))


def _counter_frame() -> HandlerFrame:
    counts: Store[str, int] = Store("counts", STRING, JSON)
    out = Channel("out", STRING, JSON)

    def handle(delivery: Any, state: Any) -> Effects:
        n = (state.get(counts, delivery.key) or 0) + 1
        return Effects.builder().put(counts, delivery.key, n).send(out, delivery.key, n).build()

    process = (Process("counter").receives(Channel("in", STRING, JSON), handle).sends(out)
               .stores(counts))
    return HandlerFrame(process, 0, _DictStores())


def main(argv: list[str] | None = None) -> None:
    """Print µs per message for each part (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perf.bench_frame", description=__doc__)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--number", type=int, default=20_000)
    a = ap.parse_args(argv)
    key, value, json_value = b"123", b"v" * 100, b'{"id":123,"text":"' + b"x" * 80 + b'"}'
    out = Channel("out", BYTES, BYTES)
    bytes_frame = _relay_frame(BYTES, BYTES)
    json_frame = _relay_frame(STRING, JSON)
    counter_frame = _counter_frame()
    causes = ("parsley.causes", b"\x01" * 220)
    run = bytes_frame.run

    def run_and_stamp() -> None:
        sends, _ = run("in", 0, 5, 1000, key, value, ())
        for s in sends:
            s[3].append(causes)

    cases: list[tuple[str, Any]] = [
        ("Delivery(...)", lambda: Delivery("in", 0, 5, 1000, key, value, ())),
        ("builder().send().build()", lambda: Effects.builder().send(out, key, value).build()),
        ("Effects.send() (one send)", lambda: Effects.send(out, key, value)),
        ("frame.run, BYTES relay", lambda: run("in", 0, 5, 1000, key, value, ())),
        ("frame.run + headers, BYTES relay", run_and_stamp),
        ("frame.deliver, BYTES relay",
         lambda: bytes_frame.deliver("in", 0, 5, 1000, key, value, ())),
        ("frame.run, STRING/JSON relay",
         lambda: json_frame.run("in", 0, 5, 1000, key, json_value, ())),
        ("frame.run, counter (store read, put, send)",
         lambda: counter_frame.run("in", 0, 5, 1000, b"k", b"1", ())),
    ]
    print(f"{'part':44s} {'µs per message':>15s}")
    for name, fn in cases:
        best = min(timeit.repeat(fn, timer=time.process_time, number=a.number,
                                 repeat=a.repeat))
        print(f"{name:44s} {best / a.number * 1e6:15.2f}")


if __name__ == "__main__":
    main()
