"""``python -m perf``: the relay benchmarks of docs/performance.md in one invocation.

Usage::

    python -m perf [--quick] [--peers] [--json FILE] [--plot FILE.png]
                   [--bootstrap-servers HOST:PORT]
                   [--runs baseline,parsley-1,parsley-1-batch,parsley-1-python,parsley-2,diamond]
                   [--sizes 100,1024] [--rounds N] [--messages N]
                   [--no-restore] [--docs docs/performance.md]

Without ``--bootstrap-servers`` it starts a private broker in a temporary
directory (``devtools.devbroker.up``) and stops it at the end. It runs the kinds in
interleaved rounds (every kind at every size, then again: ``--rounds``, default 3 with
``--quick``, 5 without), each run on fresh topics that are deleted, and gone from
``list_topics``, before the next starts (``perf.runs``). ``--peers`` adds Quix Streams
(exactly-once, commit 100 ms and 5 s) and Kafka Streams (``exactly_once_v2``, commit
100 ms) to every round, each installed in its own environment first (``perf.peers``; a
missing Java, Maven or network stops the benchmark with what to do). Then the restore
benchmark (``perf.restore``). Each ratio is the median of its per-round ratios, with
its min and max, beside CPU µs per record of every kind and the load average of every
round (``perf.rounds``); it prints every figure and writes the JSON, the PNG plot and
the docs table when asked. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from perf import report as rep
from perf.runs import FULL, KINDS, PEER_KINDS, QUICK, run_one


def _say(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit status (0, or 1 when a run failed)."""
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    from perf.patches import PATCHES

    ap.add_argument("--quick", action="store_true",
                    help="backlogs of 10^5 records, 3 rounds (under 15 minutes on 2 quiet "
                         "cores, peers included; the default is 2*10^5 records, 5 rounds)")
    ap.add_argument("--peers", action="store_true",
                    help="add Quix Streams (exactly-once, commit 100 ms and 5 s) and Kafka "
                         "Streams (exactly_once_v2, commit 100 ms) to every round; each is "
                         "installed in its own environment under the cache directory first "
                         "(perf/peers.py: needs PyPI, Maven Central, Java 17 and Maven)")
    ap.add_argument("--json", metavar="FILE", help="write the JSON report here")
    ap.add_argument("--plot", metavar="FILE.png", help="write a PNG plot here (matplotlib)")
    ap.add_argument("--bootstrap-servers", help="use this broker instead of a private one")
    ap.add_argument("--runs", help="comma-separated relay runs (default: all of "
                                   f"{','.join(KINDS)}; --quick leaves parsley-1-python out)")
    ap.add_argument("--sizes", help="comma-separated value sizes in bytes (default 100,1024)")
    ap.add_argument("--messages", type=int, help="backlog records per run (overrides)")
    ap.add_argument("--rounds", type=int,
                    help="interleaved rounds of every run; each ratio is the median of the "
                         "per-round ratios (default quick 3, 5)")
    ap.add_argument("--worker-patch", action="append", default=[], metavar="NAME",
                    help="apply a candidate worker fix from perf/patches.py in the workers")
    ap.add_argument("--no-restore", action="store_true", help="skip the restore benchmark")
    ap.add_argument("--scale-out", action="store_true",
                    help="run only the scale-out run (perf/scale_out.py: 4 tasks over 1 vs 2 "
                         "--join coordinators; on one machine it measures overhead)")
    ap.add_argument("--restore-held", type=int,
                    help="held messages for the restore benchmark (default 10^5, quick too)")
    ap.add_argument("--docs", metavar="FILE",
                    help="replace the relay section of this markdown file (docs/performance.md)")
    ap.add_argument("--from-json", metavar="FILE",
                    help="run nothing: re-render the report, plot and docs from a saved JSON")
    a = ap.parse_args(argv)
    if a.scale_out:
        from perf import scale_out

        return scale_out.main(
            (["--bootstrap-servers", a.bootstrap_servers] if a.bootstrap_servers else [])
            + (["--messages", str(a.messages)] if a.messages else []))
    if a.from_json:
        saved = json.loads(Path(a.from_json).read_text())
        report = rep.build_report(saved["rounds"], saved["machine"], saved.get("restore"),
                                  saved.get("settings"), saved.get("round_load_avg"))
        return 1 if _emit(report, a) else 0

    settings = QUICK if a.quick else FULL
    if a.sizes:
        settings = dataclasses.replace(settings, sizes=tuple(int(s) for s in a.sizes.split(",")))
    if a.messages:
        settings = dataclasses.replace(settings, messages=a.messages)
    bad = set(a.worker_patch) - set(PATCHES)
    if bad:
        ap.error(f"unknown worker patches {sorted(bad)}; choose from {sorted(PATCHES)}")
    if a.runs:
        kinds = [k for k in a.runs.split(",") if k]
    else:  # the reference engine serves no target: --quick keeps within its 15 minutes
        kinds = [k for k in KINDS if not (a.quick and k == "parsley-1-python")]
    if a.peers:
        kinds += [k for k in PEER_KINDS if k not in kinds]
    unknown = set(kinds) - set(KINDS) - set(PEER_KINDS)
    if unknown:
        ap.error(f"unknown runs {sorted(unknown)}; choose from {[*KINDS, *PEER_KINDS]}")
    peers = [k for k in kinds if k in PEER_KINDS]
    if peers:
        from perf.peers import PeerUnavailable, prepare

        _say(f"preparing the peers {peers} (installed once, under the cache directory)")
        try:
            prepare(peers)
        except PeerUnavailable as exc:
            _say(f"the peers cannot run here: {exc}")
            return 2

    workdir = tempfile.mkdtemp(prefix="parsley-perf-")
    private_dir: Path | None = None
    bootstrap = a.bootstrap_servers
    failed = False
    rounds: list[dict[str, Any]] = []
    round_load: list[dict[str, Any]] = []
    restore: dict[str, Any] | None = None
    began = time.monotonic()
    try:
        if bootstrap is None:
            from devtools import devbroker

            private_dir = Path(workdir) / "broker"
            _say(f"starting a private broker in {private_dir}")
            state, _ = devbroker.up(private_dir, say=_say)
            bootstrap = state.bootstrap
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        for number in range(1, (a.rounds or (3 if a.quick else 5)) + 1):
            _say(f"round {number}: load average {os.getloadavg()}")
            load = {"round": number, "start": [round(x, 2) for x in os.getloadavg()]}
            this: dict[str, Any] = {}
            for size in settings.sizes:
                for kind in kinds:
                    try:
                        result = run_one(kind, size, settings, bootstrap, admin, workdir,
                                         tuple(a.worker_patch))
                    except Exception as exc:  # one failed run must not lose the others
                        failed = True
                        _say(f"{kind} {size} B FAILED: {exc!r}")
                        traceback.print_exc()
                        continue
                    result["round"] = number
                    this[rep.run_key(kind, size)] = result
            load["end"] = [round(x, 2) for x in os.getloadavg()]
            rounds.append(this)
            round_load.append(load)
        if not a.no_restore:
            from perf.restore import restore_benchmark

            held = a.restore_held or 100_000
            try:
                restore = restore_benchmark(bootstrap, admin, held, 1024, workdir,
                                            worker_patches=tuple(a.worker_patch))
            except Exception as exc:
                failed = True
                _say(f"restore FAILED: {exc!r}")
                traceback.print_exc()
    finally:
        admin = None  # type: ignore[assignment]  # outliving the broker, it logs failures
        import gc

        gc.collect()
        if private_dir is not None:
            from devtools import devbroker

            _say("stopping the private broker")
            devbroker.down(private_dir)
        shutil.rmtree(workdir, ignore_errors=True)

    settings_doc = dataclasses.asdict(settings) | {
        "quick": a.quick, "peers": a.peers, "kinds": kinds,
        "elapsed_s": round(time.monotonic() - began, 1)}
    report = rep.build_report(rounds, rep.machine_info(), restore, settings_doc, round_load)
    _say(f"done in {settings_doc['elapsed_s']:.0f} s")
    return 1 if _emit(report, a) or failed else 0


def _emit(report: dict[str, Any], a: argparse.Namespace) -> bool:
    """Print the table and ratios; write the JSON, plot and docs asked for. True on a failure."""
    failed = False
    print(rep.markdown_table(report))
    print()
    print(json.dumps(report["ratios"], indent=2))
    if report.get("restore"):
        print(json.dumps({"restore": report["restore"]}, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")
        _say(f"wrote {a.json}")
    if a.plot:
        try:
            rep.plot(report, a.plot)
            _say(f"wrote {a.plot}")
        except ImportError:
            _say("matplotlib is missing: pip install -e '.[perf]' for --plot")
            failed = True
    if a.docs:
        path = Path(a.docs)
        doc = path.read_text() if path.exists() else "# Performance\n"
        path.write_text(rep.replace_section(doc, rep.markdown_section(report)))
        _say(f"updated {a.docs}")
    return failed


if __name__ == "__main__":
    sys.exit(main())
