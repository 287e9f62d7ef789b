"""JSON, PNG plot and the markdown table of ``python -m perf`` (docs/performance.md).

The JSON shape::

    {"runs": {"<kind>-<size>B": {...figures of the round of median msg/s (perf.runs.run_one),
                                 "rounds_msgs_per_s": [..], "rounds_cpu_us_per_record": [..],
                                 "cpu_us_per_record": median, "rounds_load_avg": [..]}},
     "ratios": {"parsley1_vs_baseline": x, ...,          # headline: worst median over sizes
                "by_size": {"<size>": {"parsley1_vs_baseline": median,
                                       "parsley1_vs_baseline_min": .., "_max": ..,
                                       "_rounds": [..], ...,
                                       "cpu_us_per_record": {kind: median},
                                       "cpu_us_per_record_range": {kind: [min, max]}}}},
     "rounds": [{"<kind>-<size>B": figures}, ...],    # every round, in run order
     "round_load_avg": [{"round": i, "start": [1, 5, 15 min], "end": [..]}, ...],
     "restore": {...perf.restore figures...} | absent,
     "machine": {"cores": n, "cpu": str, "python": str, "load_avg": [..], ...}}

Ratios are the median of per-round ratios (:mod:`perf.rounds`), with their min and max.
A ratio whose inputs are missing is None.

Pure code (no broker): :func:`build_report`, :func:`markdown_table`,
:func:`markdown_section`, :func:`replace_section`; unit-tested in
``tests/unit/test_perf_report.py``.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping, Sequence
from typing import Any

from perf.rounds import RATIOS, summarize

__all__ = [
    "SECTION_BEGIN",
    "SECTION_END",
    "TARGETS",
    "build_report",
    "machine_info",
    "markdown_section",
    "markdown_table",
    "plot",
    "replace_section",
    "run_key",
]

TARGETS: dict[str, str] = {
    "parsley1_vs_baseline": ">= 0.75 at 100 B, >= 0.85 at 1 KiB",
    "parsley1_batch_vs_baseline": ">= 0.9",
    "parsley1_batch_cpu_over_baseline": "<= 1.2",
    "parsley1_vs_quix": ">= 2.5",
    "parsley1_vs_kstreams": ">= 1.0",
    "parsley2_cpu_efficiency": ">= 0.9",
    "held_added_p99_ms": "<= one commit interval (100 ms)",
}
"""The targets of docs/performance.md ("Targets"), printed beside each figure."""

SECTION_BEGIN = "<!-- perf:relay begin -->"
SECTION_END = "<!-- perf:relay end -->"


def run_key(kind: str, size: int) -> str:
    """The ``runs`` key of relay ``kind`` with ``size``-byte values, e.g. ``"parsley-1-100B"``."""
    return f"{kind}-{size}B"


def _get(run: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = run
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def machine_info() -> dict[str, Any]:
    """Cores, CPU model, Python and platform, load average (the context of every figure)."""
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }


def build_report(rounds: Sequence[Mapping[str, Mapping[str, Any]]],
                 machine: Mapping[str, Any],
                 restore: Mapping[str, Any] | None = None,
                 settings: Mapping[str, Any] | None = None,
                 round_load: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The JSON report (module docstring) from the interleaved ``rounds`` (each ``{run key:
    figures}``); ``round_load`` is each round's load average at its start and end."""
    summary = summarize(rounds)
    report: dict[str, Any] = {"runs": summary["runs"], "ratios": summary["ratios"],
                              "rounds": [dict(r) for r in rounds],
                              "round_load_avg": [dict(x) for x in round_load or []],
                              "machine": dict(machine)}
    if restore is not None:
        report["restore"] = dict(restore)
    if settings is not None:
        report["settings"] = dict(settings)
    return report


def _fmt(v: Any, digits: int = 0, scale: float = 1.0) -> str:
    if v is None:
        return "–"
    if isinstance(v, list):
        return " + ".join(_fmt(x, digits, scale) for x in v)
    return f"{v / scale:,.{digits}f}"


def markdown_table(report: Mapping[str, Any]) -> str:
    """One row per run and size: engine, msg/s (the median round, every round's min-max),
    CPU µs per record (median, min-max), p50/p99 latency, header bytes, RSS."""
    rows = ["| run | engine | value | msg/s (median) | msg/s min–max | CPU µs / record "
            "(median) | CPU µs min–max | p50 ms | p99 ms | header B/msg | worker RSS MiB |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in report["runs"].values():
        rates = [r for r in run.get("rounds_msgs_per_s") or [] if r]
        cpus = [c for c in run.get("rounds_cpu_us_per_record") or [] if c]
        rows.append(
            f"| {run['kind']} | {run.get('engine') or '–'} | {run['value_bytes']} B "
            f"| {_fmt(run.get('msgs_per_s'))} "
            f"| {_range(rates, 0)} "
            f"| {_fmt(run.get('cpu_us_per_record'), 1)} "
            f"| {_range(cpus, 1)} "
            f"| {_fmt(_get(run, 'latency', 'p50_ms'), 1)} "
            f"| {_fmt(_get(run, 'latency', 'p99_ms'), 1)} "
            f"| {_fmt(run.get('header_bytes_per_msg'))} "
            f"| {_fmt(run.get('worker_rss_bytes'), 0, 1 << 20)} |"
        )
    return "\n".join(rows)


def _range(values: Sequence[float], digits: int) -> str:
    if not values:
        return "–"
    return f"{_fmt(min(values), digits)}–{_fmt(max(values), digits)}"


def _ratio_lines(report: Mapping[str, Any]) -> list[str]:
    r = report["ratios"]
    names = [*RATIOS, "held_added_p99_ms", "parsley1_batch_cpu_over_baseline"]
    lines = []
    for name in names:
        per = [(size, v) for size, v in r.get("by_size", {}).items() if v.get(name) is not None]
        if not per:
            continue
        digits = 1 if name == "held_added_p99_ms" else 3
        each = "; ".join(f"{size} B **{_fmt(v[name], digits)}** "
                         f"({_fmt(v[name + '_min'], digits)}–{_fmt(v[name + '_max'], digits)})"
                         for size, v in per)
        target = f" — target {TARGETS[name]}" if name in TARGETS else ""
        lines.append(f"* `{name}`: {each}{target}")
    for size, v in r.get("by_size", {}).items():
        cpu = v.get("cpu_us_per_record") or {}
        if cpu:
            lines.append(f"* CPU µs per record at {size} B (median): " + ", ".join(
                f"{kind} {_fmt(us, 1)}" for kind, us in cpu.items()))
    loads = report.get("round_load_avg") or []
    if loads:
        lines.append("* load average (1 min) per round, at its start and end: " + ", ".join(
            f"round {x.get('round')}: {_fmt((x.get('start') or [None])[0], 2)} → "
            f"{_fmt((x.get('end') or [None])[0], 2)}" for x in loads))
    return lines


def markdown_section(report: Mapping[str, Any],
                     heading: str = "### Figures of the last `python -m perf` run") -> str:
    """The docs/performance.md section for this report, between the section markers."""
    m = report["machine"]
    parts = [SECTION_BEGIN, heading, "",
             f"`python -m perf{' --quick' if (report.get('settings') or {}).get('quick') else ''}"
             f"{' --peers' if (report.get('settings') or {}).get('peers') else ''}`"
             f" on {m.get('cores')} cores ({m.get('cpu')}), Python "
             f"{m.get('python')}, load average {m.get('load_avg')} at the end. "
             f"Figures of one invocation, {len(report.get('rounds') or [])} interleaved rounds; "
             "each ratio is the median of its per-round ratios (min–max in brackets).",
             "", markdown_table(report), "", *_ratio_lines(report)]
    rest = report.get("restore")
    if rest:
        parts += ["", f"Restore: {rest.get('held')} held messages of {rest.get('value_bytes')} B: "
                  f"processing again {_fmt(rest.get('seconds_to_process'), 2)} s after the "
                  f"restart, resident {_fmt(rest.get('rss_bytes'), 0, 1 << 20)} MiB; after a "
                  f"clean stop, processing again "
                  f"{_fmt(rest.get('clean_restart_seconds_to_process'), 2)} s after the "
                  f"restart (checkpoint trusted: {rest.get('clean_restart_checkpoint')}, "
                  f"{rest.get('clean_restart_restore_records')} changelog records read; "
                  "target < 1 s)."]
    parts.append(SECTION_END)
    return "\n".join(parts)


def replace_section(document: str, section: str) -> str:
    """``document`` with its marked relay section replaced by ``section`` (appended if absent).

    Only the text between :data:`SECTION_BEGIN` and :data:`SECTION_END` is touched, so
    other owners' sections stay as they are.
    """
    pattern = re.compile(re.escape(SECTION_BEGIN) + r".*?" + re.escape(SECTION_END), re.S)
    if pattern.search(document):
        return pattern.sub(lambda _m: section, document, count=1)
    sep = "" if document.endswith("\n\n") else ("\n" if document.endswith("\n") else "\n\n")
    return document + sep + section + "\n"


def plot(report: Mapping[str, Any], path: str) -> None:
    """A PNG: throughput, worker CPU µs per message and p50/p99 latency per run and size.

    Raises:
        ImportError: matplotlib is not installed (``pip install .[perf]``).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = list(report["runs"].values())
    kinds = list(dict.fromkeys(r["kind"] for r in runs))
    sizes = sorted({r["value_bytes"] for r in runs})
    fig, (ax1, ax3, ax2) = plt.subplots(1, 3, figsize=(15, 4.6))
    width = 0.8 / max(1, len(sizes))
    for j, size in enumerate(sizes):
        xs, tput, p50, p99, cpu_us = [], [], [], [], []
        for i, kind in enumerate(kinds):
            run = report["runs"].get(run_key(kind, size))
            if run is None:
                continue
            xs.append(i + j * width)
            tput.append(run.get("msgs_per_s") or 0)
            p50.append(_get(run, "latency", "p50_ms") or 0)
            p99.append(_get(run, "latency", "p99_ms") or 0)
            # The median over the rounds, as the table gives it (not the CPU of the round
            # whose throughput was the median).
            median_cpu = run.get("cpu_us_per_record")
            per_cpu_s = run.get("msgs_per_worker_cpu_s")
            cpu_us.append(median_cpu if median_cpu is not None
                          else 1e6 / per_cpu_s if per_cpu_s else 0)
        ax1.bar(xs, tput, width, label=f"{size} B")
        ax3.bar(xs, cpu_us, width, label=f"{size} B")
        ax2.bar(xs, p99, width, label=f"p99 {size} B", alpha=0.5)
        ax2.bar(xs, p50, width, label=f"p50 {size} B")
    for ax in (ax1, ax3, ax2):
        ax.set_xticks([i + width * (len(sizes) - 1) / 2 for i in range(len(kinds))])
        ax.set_xticklabels(kinds, rotation=25, ha="right")
        ax.legend(fontsize=8)
    ax1.set_ylabel("messages / s")
    ax1.set_title("Relay throughput (backlog drain)")
    ax3.set_ylabel("µs")
    ax3.set_title("Worker CPU per message")
    ax2.set_ylabel("ms")
    ax2.set_title("End-to-end latency (read_committed)")
    fig.suptitle(f"python -m perf on {report['machine'].get('cores')} cores "
                 "(parsley-1: native engine; parsley-1-python: the reference engine)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
