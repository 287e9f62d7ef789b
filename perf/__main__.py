"""``python -m perf``: the relay benchmarks of docs/performance.md in one invocation.

Usage::

    python -m perf [--quick] [--json FILE] [--plot FILE.png] [--bootstrap-servers HOST:PORT]
                   [--runs baseline,parsley-1,parsley-1-python,parsley-2,diamond]
                   [--sizes 100,1024]
                   [--no-restore] [--docs docs/performance.md]

Without ``--bootstrap-servers`` it starts a private broker in a temporary
directory (``devtools.devbroker.up``) and stops it at the end. It runs the
baseline, parsley-1 (native engine), parsley-1-python (the reference engine),
parsley-2 and diamond relays (``perf.runs``) for each value
size, then the restore benchmark (``perf.restore``), prints every figure and the
ratios against the baseline of the same invocation, and writes the JSON, the PNG
plot and the docs table when asked. Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from perf import report as rep
from perf.runs import FULL, KINDS, QUICK, run_one


def _say(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks; returns the exit status (0, or 1 when a run failed)."""
    ap = argparse.ArgumentParser(prog="python -m perf", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    from perf.patches import PATCHES

    ap.add_argument("--quick", action="store_true",
                    help="backlogs of 10^5 records, 2 rounds (a few minutes; the default is "
                         "2*10^5 records, 3 rounds)")
    ap.add_argument("--json", metavar="FILE", help="write the JSON report here")
    ap.add_argument("--plot", metavar="FILE.png", help="write a PNG plot here (matplotlib)")
    ap.add_argument("--bootstrap-servers", help="use this broker instead of a private one")
    ap.add_argument("--runs", default=",".join(KINDS), help="comma-separated relay runs")
    ap.add_argument("--sizes", help="comma-separated value sizes in bytes (default 100,1024)")
    ap.add_argument("--messages", type=int, help="backlog records per run (overrides)")
    ap.add_argument("--rounds", type=int,
                    help="rounds of every run; the best throughput is kept (default quick 2, 3)")
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
        report = rep.build_report(saved["runs"], saved["machine"], saved.get("restore"),
                                  saved.get("settings"))
        return 1 if _emit(report, a) else 0

    settings = QUICK if a.quick else FULL
    if a.sizes:
        settings = dataclasses.replace(settings, sizes=tuple(int(s) for s in a.sizes.split(",")))
    if a.messages:
        settings = dataclasses.replace(settings, messages=a.messages)
    bad = set(a.worker_patch) - set(PATCHES)
    if bad:
        ap.error(f"unknown worker patches {sorted(bad)}; choose from {sorted(PATCHES)}")
    kinds = [k for k in a.runs.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        ap.error(f"unknown runs {sorted(unknown)}; choose from {list(KINDS)}")

    workdir = tempfile.mkdtemp(prefix="parsley-perf-")
    private_dir: Path | None = None
    bootstrap = a.bootstrap_servers
    failed = False
    runs: dict[str, Any] = {}
    restore: dict[str, Any] | None = None
    try:
        if bootstrap is None:
            from devtools import devbroker

            private_dir = Path(workdir) / "broker"
            _say(f"starting a private broker in {private_dir}")
            state, _ = devbroker.up(private_dir, say=_say)
            bootstrap = state.bootstrap
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": bootstrap})
        rounds = a.rounds or (2 if a.quick else 3)
        for _ in range(rounds):
            for size in settings.sizes:
                for kind in kinds:
                    key = rep.run_key(kind, size)
                    try:
                        result = run_one(kind, size, settings, bootstrap, admin, workdir,
                                         tuple(a.worker_patch))
                    except Exception as exc:  # one failed run must not lose the others
                        failed = True
                        _say(f"{kind} {size} B FAILED: {exc!r}")
                        traceback.print_exc()
                        continue
                    runs[key] = rep.best_of(runs.get(key), result)
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

    report = rep.build_report(runs, rep.machine_info(), restore,
                              dataclasses.asdict(settings) | {"quick": a.quick})
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
