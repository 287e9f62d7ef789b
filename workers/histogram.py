"""Fixed-bucket histograms a worker keeps and reports, for the coordinator's metrics.

A worker counts observations into the buckets of one of the fixed bucket
sets below and puts the counts in its ``status`` and ``final`` messages
(:mod:`workers.protocol`); the coordinator adds them up across the task's
workers and exposes them as Prometheus histograms (docs/operations.md,
"Metrics"). Both sides read the bounds from this module (the coordinator and
its workers run the same build), so a report carries only the counts.

Observing is one bisection over a dozen floats and two additions: it is done
once per drain pass or per commit, never per message.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence
from typing import Any, Final

__all__ = ["HANDLER_BUCKETS_S", "TRANSACTION_BUCKETS_S", "BucketCounts", "add_counts"]

HANDLER_BUCKETS_S: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Upper bounds (inclusive, s) of the handler latency buckets; one more, ``+Inf``, follows."""

TRANSACTION_BUCKETS_S: Final = (0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5, 5.0,
                                10.0, 20.0, 30.0)
"""Upper bounds (inclusive, s) of the transaction duration buckets; then ``+Inf``.

A transaction is committed after the commit interval (100 ms by default) and
well inside ``transaction.timeout.ms`` (docs/operations.md, "Transaction time
bound"), so the buckets are dense between 0.1 and 0.5 s."""


class BucketCounts:
    """Observations counted into fixed buckets, with their sum.

    Args:
        bounds: ascending upper bounds in seconds; an implicit ``+Inf`` bucket follows.

    Attributes:
        counts: per bucket (not cumulative), ``len(bounds) + 1`` ints.
        sum_s: the sum of every observation, s.
    """

    __slots__ = ("bounds", "counts", "sum_s")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum_s = 0.0

    def observe(self, value_s: float, times: int = 1) -> None:
        """Count ``times`` observations of ``value_s`` seconds (``times`` >= 1)."""
        self.counts[bisect_left(self.bounds, value_s)] += times
        self.sum_s += value_s * times

    def to_json(self) -> dict[str, Any]:
        """``{"counts": [int, ...], "sum": float}``: the report's form."""
        return {"counts": list(self.counts), "sum": self.sum_s}


def add_counts(total: Mapping[str, Any] | None, more: Mapping[str, Any] | None,
               buckets: int) -> dict[str, Any]:
    """Two reports' histograms added up (pure): ``{"counts": [...], "sum": float}``.

    Args:
        total, more: :meth:`BucketCounts.to_json` forms, or ``None`` for none.
        buckets: how many buckets the histogram has (its bounds + 1); a form with
            another count (a report from a different build) is taken as empty.

    Returns:
        A new form with ``buckets`` counts.
    """
    counts = [0] * buckets
    sum_s = 0.0
    for form in (total, more):
        if not form:
            continue
        got = form.get("counts")
        if not isinstance(got, list) or len(got) != buckets:
            continue
        for i, c in enumerate(got):
            counts[i] += int(c)
        sum_s += float(form.get("sum", 0.0))
    return {"counts": counts, "sum": sum_s}
