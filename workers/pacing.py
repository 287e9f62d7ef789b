"""How long a task's transaction may stay open, and how many records a consume call asks for.

Pure rules, no I/O (docs/operations.md, "Transaction time bound"):

* :func:`close_after_s`: a transaction is committed once it has been open half of
  ``transaction.timeout.ms`` (the broker aborts it at the full timeout and fences the
  producer, KIP-98), checked between deliveries, so one long drain (a cause releasing
  many held messages) is cut into several transactions;
* :class:`BatchSizer`: consume batches sized to the handler's measured cost, so one
  batch's deliveries take about :data:`BATCH_TARGET_FRACTION` of that time.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BATCH_TARGET_FRACTION", "MAX_BATCH", "BatchSizer", "close_after_s"]

MAX_BATCH: Final = 500
"""Most records per ``consume`` call."""
CLOSE_FRACTION: Final = 0.5
"""The part of ``transaction.timeout.ms`` after which an open transaction is committed."""
BATCH_TARGET_FRACTION: Final = 0.25
"""The part of the close time one batch's deliveries should take."""


def close_after_s(transaction_timeout_ms: int) -> float:
    """Seconds after which an open transaction is committed: half the timeout.

    Args:
        transaction_timeout_ms: the producer's ``transaction.timeout.ms``, ms (> 0).
    """
    return transaction_timeout_ms * CLOSE_FRACTION / 1000.0


class BatchSizer:
    """Records per ``consume`` call, from the measured cost of a delivery.

    Args:
        target_s: how long one batch's deliveries should take, s (> 0).
        max_records: the most records per call; also the size before any measure.
        smoothing: weight of the newest measure in the moving average (0..1].

    The cost is an exponential moving average of seconds per delivered message,
    measured over whole drains (handler, store writes and produce calls).
    """

    def __init__(self, target_s: float, max_records: int = MAX_BATCH,
                 smoothing: float = 0.3) -> None:
        if target_s <= 0 or max_records < 1 or not 0 < smoothing <= 1:
            raise ValueError("target_s > 0, max_records >= 1 and 0 < smoothing <= 1")
        self.target_s = target_s
        self.max_records = max_records
        self.smoothing = smoothing
        self.cost_s: float | None = None

    def observe(self, delivered: int, elapsed_s: float) -> None:
        """Account ``delivered`` messages delivered in ``elapsed_s`` s (nothing for none)."""
        if delivered <= 0 or elapsed_s < 0:
            return
        cost = elapsed_s / delivered
        if self.cost_s is None:
            self.cost_s = cost
        else:
            self.cost_s += self.smoothing * (cost - self.cost_s)

    def size(self) -> int:
        """Records to ask for next: ``target_s / cost``, within 1 .. ``max_records``."""
        if not self.cost_s:
            return self.max_records
        return max(1, min(self.max_records, int(self.target_s / self.cost_s)))
