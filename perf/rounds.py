"""Interleaved rounds: every ratio as the median of its per-round ratios, with its min-max.

``python -m perf`` runs the kinds in rounds (baseline, parsley-1, ..., then again), so each
round's kinds meet the same moment of a shared machine. A ratio is computed within each
round (parsley-1's msg/s over the baseline's of the same round and value size), and the
report gives the median of those per-round ratios with their min and max: one lucky round
of one kind moves the median by at most one place. CPU µs per record of every kind, the
steadier figure on a busy machine, is reported the same way.

Shapes: a *round* is ``{run key: figures of perf.runs.run_one}`` (:func:`perf.report.run_key`);
:func:`summarize` takes the list of rounds. Pure code, unit-tested in
``tests/unit/test_perf_report.py``.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["RATIOS", "cpu_us_per_record", "per_round", "representative", "summarize"]

RATIOS: Final[dict[str, tuple[str, str, str]]] = {
    "parsley1_vs_baseline": ("parsley-1", "baseline", "msgs_per_s"),
    "parsley1_vs_baseline_cpu": ("parsley-1", "baseline", "msgs_per_worker_cpu_s"),
    "parsley1_batch_vs_baseline": ("parsley-1-batch", "baseline", "msgs_per_s"),
    "parsley1_batch_vs_baseline_cpu": ("parsley-1-batch", "baseline", "msgs_per_worker_cpu_s"),
    "parsley1_python_vs_baseline": ("parsley-1-python", "baseline", "msgs_per_s"),
    "parsley2_vs_parsley1": ("parsley-2", "parsley-1", "msgs_per_s"),
    "parsley2_cpu_efficiency": ("parsley-2", "parsley-1", "msgs_per_worker_cpu_s"),
    "parsley1_vs_quix": ("parsley-1", "quix-100ms", "msgs_per_s"),
    "parsley1_vs_quix_5s": ("parsley-1", "quix-5s", "msgs_per_s"),
    "parsley1_vs_kstreams": ("parsley-1", "kstreams", "msgs_per_s"),
    "parsley1_batch_vs_kstreams": ("parsley-1-batch", "kstreams", "msgs_per_s"),
}
"""Ratio name -> (numerator kind, denominator kind, figure): higher is better for each.
``*_cpu`` ratios compare records per worker CPU-second (the inverse of CPU per record)."""

WORST_IS_HIGHEST: Final = frozenset({"held_added_p99_ms", "parsley1_batch_cpu_over_baseline"})
"""Figures where a higher value is worse (the headline takes the highest over sizes)."""


def _key(kind: str, size: int) -> str:
    return f"{kind}-{size}B"


def _figure(run: Mapping[str, Any] | None, field: str) -> float | None:
    value = None if run is None else run.get(field)
    return float(value) if isinstance(value, int | float) and value > 0 else None


def cpu_us_per_record(run: Mapping[str, Any] | None) -> float | None:
    """Worker CPU µs per record of one run (``1e6 / msgs_per_worker_cpu_s``), or None."""
    per_s = _figure(run, "msgs_per_worker_cpu_s")
    return None if per_s is None else 1e6 / per_s


def _held_p99(run: Mapping[str, Any] | None) -> float | None:
    held = (run or {}).get("held") or {}
    value = (held.get("from_cause_send") or {}).get("p99_ms")
    return float(value) if isinstance(value, int | float) else None


def per_round(round_: Mapping[str, Mapping[str, Any]], size: int) -> dict[str, float | None]:
    """Every ratio of :data:`RATIOS` within one round at one value size (None where a run is
    missing or a figure is 0), plus ``held_added_p99_ms`` (the diamond's held-then-released
    p99 from its cause's send, minus the baseline's p99, ms) and
    ``parsley1_batch_cpu_over_baseline`` (parsley-1-batch's CPU per record over the
    baseline's; lower is better)."""
    out: dict[str, float | None] = {}
    for name, (num, den, field) in RATIOS.items():
        a = _figure(round_.get(_key(num, size)), field)
        b = _figure(round_.get(_key(den, size)), field)
        out[name] = None if a is None or b is None else a / b
    held = _held_p99(round_.get(_key("diamond", size)))
    base = (round_.get(_key("baseline", size)) or {}).get("latency") or {}
    base_p99 = base.get("p99_ms")
    out["held_added_p99_ms"] = (held - float(base_p99) if held is not None
                                and isinstance(base_p99, int | float) else None)
    batch = cpu_us_per_record(round_.get(_key("parsley-1-batch", size)))
    base_cpu = cpu_us_per_record(round_.get(_key("baseline", size)))
    out["parsley1_batch_cpu_over_baseline"] = (None if batch is None or base_cpu is None
                                               else batch / base_cpu)
    return out


def _spread(values: Sequence[float | None]) -> dict[str, Any]:
    got = [v for v in values if v is not None]
    if not got:
        return {"median": None, "min": None, "max": None, "rounds": list(values)}
    return {"median": statistics.median(got), "min": min(got), "max": max(got),
            "rounds": list(values)}


def representative(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One kind's rounds at one size as one row: the round of median throughput (the lower
    middle one for an even count), with every round's msg/s, CPU µs per record and load
    average beside it, and the median CPU µs per record."""
    ordered = sorted(results, key=lambda r: r.get("msgs_per_s") or 0.0)
    row = dict(ordered[(len(ordered) - 1) // 2])
    row["rounds_msgs_per_s"] = [r.get("msgs_per_s") for r in results]
    cpu = [cpu_us_per_record(r) for r in results]
    row["rounds_cpu_us_per_record"] = cpu
    row["cpu_us_per_record"] = _spread(cpu)["median"]
    row["rounds_load_avg"] = [r.get("load_avg") for r in results]
    return row


def summarize(rounds: Sequence[Mapping[str, Mapping[str, Any]]]) -> dict[str, Any]:
    """The report's ``runs`` and ``ratios`` from the interleaved rounds.

    Returns:
        ``{"runs": {run key: representative row}, "ratios": {name: worst median over the
        sizes, ..., "by_size": {"<size>": {name: median, name + "_min": min, name +
        "_max": max, name + "_rounds": [per round], "cpu_us_per_record": {kind: median},
        "cpu_us_per_record_range": {kind: [min, max]}}}}}``. The headline of a ratio is
        the lowest median over the sizes (the highest for :data:`WORST_IS_HIGHEST`), so a
        target met by the headline is met at every size.
    """
    by_key: dict[str, list[Mapping[str, Any]]] = {}
    for round_ in rounds:
        for key, result in round_.items():
            by_key.setdefault(key, []).append(result)
    runs = {key: representative(results) for key, results in by_key.items()}
    sizes = sorted({int(r["value_bytes"]) for r in runs.values()})
    kinds = list(dict.fromkeys(r["kind"] for r in runs.values()))
    by_size: dict[str, dict[str, Any]] = {}
    names = [*RATIOS, "held_added_p99_ms", "parsley1_batch_cpu_over_baseline"]
    for size in sizes:
        each = [per_round(r, size) for r in rounds]
        entry: dict[str, Any] = {}
        for name in names:
            spread = _spread([e[name] for e in each])
            entry[name] = spread["median"]
            entry[f"{name}_min"] = spread["min"]
            entry[f"{name}_max"] = spread["max"]
            entry[f"{name}_rounds"] = spread["rounds"]
        cpu: dict[str, float | None] = {}
        cpu_range: dict[str, list[float | None]] = {}
        for kind in kinds:
            spread = _spread([cpu_us_per_record(r.get(_key(kind, size))) for r in rounds
                              if _key(kind, size) in r])
            if spread["rounds"]:
                cpu[kind] = spread["median"]
                cpu_range[kind] = [spread["min"], spread["max"]]
        entry["cpu_us_per_record"] = cpu
        entry["cpu_us_per_record_range"] = cpu_range
        by_size[str(size)] = entry
    ratios: dict[str, Any] = {}
    for name in names:
        vals = [e[name] for e in by_size.values() if e[name] is not None]
        worst = max if name in WORST_IS_HIGHEST else min
        ratios[name] = worst(vals) if vals else None
    ratios["by_size"] = by_size
    return {"runs": runs, "ratios": ratios}
