"""Profile the worker's hot path on a parsley-1 relay with pyinstrument (docs/performance.md, "The
worker's hot path").

A backlog of ``--messages`` records (16-entry ``parsley.causes`` header, all causes
settled) is written before the worker starts, so almost all of its run is the
drain: poll, feed the engine, deliver, run the handler frame, send, commit. The
worker runs under ``pyinstrument`` (wall-clock sampling, 1 ms); the profile text is
printed and written to ``--out``. Wall-clock sampling shows waiting (``consume``,
``commit_transaction``) next to CPU work.

Run: ``python -m perf.profile_worker --bootstrap-servers HOST:PORT [--messages 30000]
[--value-bytes 100] [--batch] [--out /tmp/worker-profile.txt] [--html FILE]``; ``--batch``
profiles the relay of ``parsley-1-batch`` (a batch handler, ``Process.receives_batch``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient

from perf.measure import OutputReader
from perf.runs import OUTPUT_CONFIG, Loader, ParsleyRelay, create_topics, delete_topics

__all__ = ["profiled_run"]


def profiled_run(spec: Any, out_path: str, html_path: str | None = None,
                 patches: tuple[str, ...] = ()) -> int:
    """``workers.main.run(spec)`` under pyinstrument; writes the profile text to ``out_path``.

    ``patches`` names :data:`perf.patches.PATCHES` applied first.
    """
    from pyinstrument import Profiler

    from perf.patches import PATCHES
    from workers.main import run

    for name in patches:
        PATCHES[name]()
    prof = Profiler(interval=0.001)
    prof.start()
    try:
        return run(spec)
    finally:
        prof.stop()
        with open(out_path, "w") as f:
            f.write(prof.output_text(unicode=False, color=False))
        if html_path:
            with open(html_path, "w") as f:
                f.write(prof.output_html())


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perf.profile_worker", description=__doc__)
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--messages", type=int, default=30_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--batch", action="store_true",
                    help="the batch handler's relay (parsley-1-batch) instead of parsley-1's")
    ap.add_argument("--out", default="/tmp/worker-profile.txt")
    ap.add_argument("--html")
    ap.add_argument("--worker-patch", action="append", default=[], metavar="NAME",
                    help="apply a candidate fix from perf/patches.py in the worker")
    a = ap.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": a.bootstrap_servers})
    tag = f"perf-{uuid.uuid4().hex[:8]}-profile"
    inp, out = f"{tag}-in", f"{tag}-out"
    create_topics(admin, [(inp, 1, {}), (out, 1, OUTPUT_CONFIG)])
    loader = Loader(a.bootstrap_servers, a.value_bytes, True, {})
    for seq in range(a.messages):
        loader.plain(inp, 1, seq)
    loader.flush()
    with tempfile.TemporaryDirectory(prefix="parsley-perf-") as workdir:
        relay = ParsleyRelay(a.bootstrap_servers, [inp], out, tag, 100, workdir,
                             batch=a.batch)
        reader = OutputReader(a.bootstrap_servers, [out])
        t0 = time.monotonic()
        relay.start(120.0, target=profiled_run, extra_args=(a.out, a.html, tuple(a.worker_patch)))
        ok = reader.read_until(a.messages, 600.0)
        took = time.monotonic() - t0
        relay.stop()
        reader.close()
    delete_topics(admin, [inp, out], tag)
    print(f"relayed {len(reader.records)} of {a.messages} ({'ok' if ok else 'TIMEOUT'}) "
          f"in {took:.1f} s including startup")
    with open(a.out) as f:
        print(f.read())


if __name__ == "__main__":
    main()
