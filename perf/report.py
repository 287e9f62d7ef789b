"""Ratios, JSON, PNG plot and the markdown table of ``python -m perf`` (docs/performance.md).

The JSON shape::

    {"runs": {"<kind>-<size>B": {...figures of perf.runs.run_one...}},
     "ratios": {"parsley1_vs_baseline": x, "parsley2_vs_parsley1": y,
                "parsley2_cpu_efficiency": z, "held_added_p99_ms": w,
                "parsley1_vs_baseline_cpu": c, "parsley1_python_vs_baseline": p,
                "by_size": {"<size>": {the same for that size}}},
     "restore": {...perf.restore figures...} | absent,
     "machine": {"cores": n, "cpu": str, "python": str, "load_avg": [..], ...}}

The headline ratios are the worst over the value sizes measured (the lowest
throughput ratio, the highest added latency), so a target met by the headline is
met at every size. A ratio whose inputs are missing is None.

Pure code (no broker): :func:`ratios_for`, :func:`ratios`, :func:`build_report`,
:func:`markdown_table`, :func:`replace_section`; unit-tested in
``tests/unit/test_perf_report.py``.
"""

from __future__ import annotations

import os
import platform
import re
from collections.abc import Mapping
from typing import Any

__all__ = [
    "SECTION_BEGIN",
    "SECTION_END",
    "best_of",
    "build_report",
    "machine_info",
    "markdown_section",
    "markdown_table",
    "plot",
    "ratios",
    "ratios_for",
    "replace_section",
    "run_key",
]

SECTION_BEGIN = "<!-- perf:relay begin -->"
SECTION_END = "<!-- perf:relay end -->"


def run_key(kind: str, size: int) -> str:
    """The ``runs`` key of relay ``kind`` with ``size``-byte values, e.g. ``"parsley-1-100B"``."""
    return f"{kind}-{size}B"


def _div(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return a / b


def _get(run: Mapping[str, Any] | None, *path: str) -> Any:
    cur: Any = run
    for p in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(p)
    return cur


def ratios_for(runs: Mapping[str, Mapping[str, Any]], size: int) -> dict[str, float | None]:
    """The ratios of one value size (docs/performance.md, "Targets").

    Returns:
        ``parsley1_vs_baseline`` = parsley-1 msg/s over baseline msg/s;
        ``parsley2_vs_parsley1`` = parsley-2 msg/s over parsley-1 msg/s;
        ``parsley2_cpu_efficiency`` = parsley-2 messages per worker CPU-second over
        parsley-1's; ``parsley1_vs_baseline_cpu`` = parsley-1 messages per worker
        CPU-second over the baseline's (the throughput ratio on a machine where each
        relay has a core to itself and the broker keeps up); ``parsley1_python_vs_baseline``
        = parsley-1-python msg/s (the reference engine) over baseline msg/s;
        ``held_added_p99_ms`` = the
        diamond's held-then-released p99 (from its cause's send) minus the baseline's p99,
        ms. None where a run is missing.
    """
    base = runs.get(run_key("baseline", size))
    p1 = runs.get(run_key("parsley-1", size))
    p1py = runs.get(run_key("parsley-1-python", size))
    p2 = runs.get(run_key("parsley-2", size))
    dia = runs.get(run_key("diamond", size))
    held_p99 = _get(dia, "held", "from_cause_send", "p99_ms")
    base_p99 = _get(base, "latency", "p99_ms")
    return {
        "parsley1_vs_baseline": _div(_get(p1, "msgs_per_s"), _get(base, "msgs_per_s")),
        "parsley2_vs_parsley1": _div(_get(p2, "msgs_per_s"), _get(p1, "msgs_per_s")),
        "parsley2_cpu_efficiency": _div(_get(p2, "msgs_per_worker_cpu_s"),
                                        _get(p1, "msgs_per_worker_cpu_s")),
        "parsley1_vs_baseline_cpu": _div(_get(p1, "msgs_per_worker_cpu_s"),
                                         _get(base, "msgs_per_worker_cpu_s")),
        "parsley1_python_vs_baseline": _div(_get(p1py, "msgs_per_s"),
                                            _get(base, "msgs_per_s")),
        "held_added_p99_ms": (held_p99 - base_p99
                              if held_p99 is not None and base_p99 is not None else None),
    }


def ratios(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Headline ratios (worst over sizes) plus ``by_size``; see the module docstring."""
    sizes = sorted({int(r["value_bytes"]) for r in runs.values()})
    by_size = {str(s): ratios_for(runs, s) for s in sizes}
    out: dict[str, Any] = {}
    for name in ("parsley1_vs_baseline", "parsley2_vs_parsley1", "parsley2_cpu_efficiency",
                 "parsley1_vs_baseline_cpu", "parsley1_python_vs_baseline"):
        vals = [x for v in by_size.values() if (x := v[name]) is not None]
        out[name] = min(vals) if vals else None
    added = [x for v in by_size.values() if (x := v["held_added_p99_ms"]) is not None]
    out["held_added_p99_ms"] = max(added) if added else None
    out["by_size"] = by_size
    return out


def best_of(kept: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """Of two rounds of one run, the one with the higher throughput; ``rounds_msgs_per_s``
    lists every round's throughput (the usual way to read through a busy machine)."""
    rates = [*(kept or {}).get("rounds_msgs_per_s", []), new.get("msgs_per_s")]
    best = dict(new)
    if kept is not None and (kept.get("msgs_per_s") or 0) >= (new.get("msgs_per_s") or 0):
        best = dict(kept)
    best["rounds_msgs_per_s"] = rates
    return best


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


def build_report(runs: Mapping[str, Mapping[str, Any]], machine: Mapping[str, Any],
                 restore: Mapping[str, Any] | None = None,
                 settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON report: ``{"runs", "ratios", "machine"}`` (+ ``restore``, ``settings``)."""
    report: dict[str, Any] = {"runs": dict(runs), "ratios": ratios(runs), "machine": dict(machine)}
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
    """One row per run: engine, msg/s, p50/p99, header bytes, RSS, CPU s, msg per CPU-s,
    µs of worker CPU per message."""
    rows = ["| run | engine | value | msg/s | p50 ms | p99 ms | header B/msg | worker RSS MiB "
            "| worker CPU s | msg / worker CPU-s | worker CPU µs / msg |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for run in report["runs"].values():
        per_cpu_s = run.get("msgs_per_worker_cpu_s")
        rows.append(
            f"| {run['kind']} | {run.get('engine') or '–'} | {run['value_bytes']} B "
            f"| {_fmt(run.get('msgs_per_s'))} "
            f"| {_fmt(_get(run, 'latency', 'p50_ms'), 1)} "
            f"| {_fmt(_get(run, 'latency', 'p99_ms'), 1)} "
            f"| {_fmt(run.get('header_bytes_per_msg'))} "
            f"| {_fmt(run.get('worker_rss_bytes'), 0, 1 << 20)} "
            f"| {_fmt(run.get('worker_cpu_s'), 2)} | {_fmt(per_cpu_s)} "
            f"| {_fmt(1e6 / per_cpu_s if per_cpu_s else None, 1)} |"
        )
    return "\n".join(rows)


def _ratio_lines(report: Mapping[str, Any]) -> list[str]:
    r = report["ratios"]
    lines = [
        f"* `parsley1_vs_baseline` = **{_fmt(r.get('parsley1_vs_baseline'), 3)}** "
        "(target >= 0.75, goal 0.95)",
        f"* `parsley2_vs_parsley1` = **{_fmt(r.get('parsley2_vs_parsley1'), 3)}** "
        "(target >= 1.7 on 4+ cores)",
        f"* `parsley2_cpu_efficiency` = **{_fmt(r.get('parsley2_cpu_efficiency'), 3)}** "
        "(target >= 0.9)",
        f"* `parsley1_vs_baseline_cpu` (messages per worker CPU-second) = "
        f"**{_fmt(r.get('parsley1_vs_baseline_cpu'), 3)}** (target >= 0.6)",
        f"* `parsley1_python_vs_baseline` (the reference engine) = "
        f"**{_fmt(r.get('parsley1_python_vs_baseline'), 3)}**",
        f"* held-then-released p99 over the baseline's p99: "
        f"**{_fmt(r.get('held_added_p99_ms'), 1)} ms** (target <= one commit interval)",
    ]
    for size, v in r.get("by_size", {}).items():
        lines.append(
            f"* {size} B: parsley-1/baseline {_fmt(v['parsley1_vs_baseline'], 3)}, "
            f"parsley-2/parsley-1 {_fmt(v['parsley2_vs_parsley1'], 3)}, "
            f"CPU efficiency {_fmt(v['parsley2_cpu_efficiency'], 3)}, "
            f"parsley-1/baseline per CPU-second {_fmt(v['parsley1_vs_baseline_cpu'], 3)}, "
            f"parsley-1-python/baseline {_fmt(v.get('parsley1_python_vs_baseline'), 3)}, "
            f"held added p99 {_fmt(v['held_added_p99_ms'], 1)} ms"
        )
    return lines


def markdown_section(report: Mapping[str, Any],
                     heading: str = "### Figures of the last `python -m perf` run") -> str:
    """The docs/performance.md section for this report, between the section markers."""
    m = report["machine"]
    parts = [SECTION_BEGIN, heading, "",
             f"`python -m perf{' --quick' if (report.get('settings') or {}).get('quick') else ''}`"
             f" on {m.get('cores')} cores ({m.get('cpu')}), Python "
             f"{m.get('python')}, load average {m.get('load_avg')} at the end. "
             "Figures of one invocation; the ratios compare runs of that same invocation.",
             "", markdown_table(report), "", *_ratio_lines(report)]
    rest = report.get("restore")
    if rest:
        parts += ["", f"Restore: {rest.get('held')} held messages of {rest.get('value_bytes')} B: "
                  f"processing again {_fmt(rest.get('seconds_to_process'), 2)} s after the "
                  f"restart, resident {_fmt(rest.get('rss_bytes'), 0, 1 << 20)} MiB."]
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
            per_cpu_s = run.get("msgs_per_worker_cpu_s")
            cpu_us.append(1e6 / per_cpu_s if per_cpu_s else 0)
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
