"""How long a task's transaction may stay open, and how many records a consume call asks for.

Pure rules, no I/O (docs/operations.md, "Transaction time bound"):

* :func:`close_after_s`: a transaction is committed once it has been open half of
  ``transaction.timeout.ms`` (the broker aborts it at the full timeout and fences the
  producer, KIP-98), checked between deliveries, so one long drain (a cause releasing
  many held messages) is cut into several transactions;
* :class:`BatchSizer`: consume batches sized to the handler's measured cost, so one
  batch's deliveries take about :data:`BATCH_TARGET_FRACTION` of that time;
* :func:`delivery_batches`: the sizer of the engine's delivery batches
  (``ProcessEngine.deliver_batch``), whose every head is handled before the time bound and
  the pass length are checked again, so one batch takes about
  :data:`DELIVERY_TARGET_FRACTION` of the shorter of the two, and never more than the
  time left before either at the slowest recent per-message cost.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "BATCH_TARGET_FRACTION",
    "DELIVERY_PEAK_DECAY",
    "DELIVERY_TARGET_FRACTION",
    "MAX_BATCH",
    "MAX_DELIVERY_BATCH",
    "BatchSizer",
    "close_after_s",
    "delivery_batches",
]

MAX_BATCH: Final = 500
"""Most records per ``consume`` call."""
CLOSE_FRACTION: Final = 0.5
"""The part of ``transaction.timeout.ms`` after which an open transaction is committed."""
BATCH_TARGET_FRACTION: Final = 0.25
"""The part of the close time one batch's deliveries should take."""
MAX_DELIVERY_BATCH: Final = 64
"""Most heads per ``deliver_batch`` call: enough to spread the call's fixed cost thin."""
DELIVERY_TARGET_FRACTION: Final = 0.1
"""The part of the shorter of the close time and the pass length one delivery batch should
take."""
DELIVERY_PEAK_DECAY: Final = 0.5
"""Per delivery batch, how much of the slowest recent message's cost is kept: a slow
message bounds the next batches until about ``log2(slow / fast)`` faster batches pass."""
DEFAULT_DELIVERY_TARGET_S: Final = 0.1
"""A delivery batch's target when the step has neither a close time nor a pass length, s."""


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
        max_records: the most records per call.
        smoothing: weight of the newest measure in the moving average (0..1].
        initial: the size before any measure (1 .. ``max_records``); default
            ``max_records``.

        peak_decay: with it, the sizer also keeps the largest recent cost of one
            message (:attr:`peak_s`): each measure's slowest message, or the old peak
            times ``peak_decay`` (0..1) when that is larger, so a slow batch cuts the size
            at once and a fast run lets it grow back by halves; ``None`` (the default)
            keeps the average only.

    The cost is an exponential moving average of seconds per delivered message,
    measured over whole drains (handler, store writes and produce calls). With
    ``peak_decay`` the size is taken from the larger of the average and the peak.
    """

    def __init__(self, target_s: float, max_records: int = MAX_BATCH,
                 smoothing: float = 0.3, initial: int | None = None,
                 peak_decay: float | None = None) -> None:
        if target_s <= 0 or max_records < 1 or not 0 < smoothing <= 1:
            raise ValueError("target_s > 0, max_records >= 1 and 0 < smoothing <= 1")
        if initial is not None and not 1 <= initial <= max_records:
            raise ValueError("1 <= initial <= max_records")
        if peak_decay is not None and not 0 <= peak_decay < 1:
            raise ValueError("0 <= peak_decay < 1")
        self.target_s = target_s
        self.max_records = max_records
        self.smoothing = smoothing
        self.initial = max_records if initial is None else initial
        self.peak_decay = peak_decay
        self.cost_s: float | None = None
        self.peak_s: float | None = None

    def observe(self, delivered: int, elapsed_s: float,
                slowest_s: float | None = None) -> None:
        """Account ``delivered`` messages delivered in ``elapsed_s`` s (nothing for none);
        ``slowest_s``, s, is the slowest one's cost when measured (else the mean counts)."""
        if delivered <= 0 or elapsed_s < 0:
            return
        cost = elapsed_s / delivered
        if self.cost_s is None:
            self.cost_s = cost
        else:
            self.cost_s += self.smoothing * (cost - self.cost_s)
        if self.peak_decay is not None:
            slowest = cost if slowest_s is None else max(cost, slowest_s)
            old = self.peak_s
            self.peak_s = slowest if old is None else max(slowest, old * self.peak_decay)

    def size(self) -> int:
        """Records to ask for next: ``target_s / cost``, within 1 .. ``max_records``
        (``initial`` before any measure); the cost is the larger of the average and
        :attr:`peak_s`."""
        cost = self.cost_s
        if cost is None:
            return self.initial
        if self.peak_s is not None and self.peak_s > cost:
            cost = self.peak_s
        if not cost:
            return self.max_records
        return max(1, min(self.max_records, int(self.target_s / cost)))

    def limit(self, time_left_s: float) -> int:
        """Records to ask for when ``time_left_s`` s remain before a bound: :meth:`size`,
        and no more than fit in the time left at the slowest recent cost
        (:attr:`peak_s`, else the average); at least 1 (a pass always makes progress).

        Args:
            time_left_s: seconds until the nearer bound (may be <= 0: one record).
        """
        n = self.size()
        cost = self.peak_s if self.peak_s is not None else self.cost_s
        if not cost:
            return n if time_left_s > 0 else 1
        return max(1, min(n, int(time_left_s / cost)))


def delivery_batches(close_after_s: float | None, pass_s: float | None,
                     max_records: int = MAX_DELIVERY_BATCH) -> BatchSizer:
    """The sizer of one step's delivery batches (heads per ``ProcessEngine.deliver_batch``).

    A head taken from the engine counts as delivered in its next deltas, so the step
    handles a whole batch before it checks the transaction's age (``close_after_s``) and
    the pass length (``pass_s``) again: either bound is overrun by at most one batch.
    Batches are therefore sized to the measured cost of a delivery (handler, store
    writes and produce calls) so that one takes about :data:`DELIVERY_TARGET_FRACTION`
    of the shorter bound, from 1 to :data:`MAX_DELIVERY_BATCH` heads, and the first
    batch, before any measure, is one head. The cost is the slowest recent message's
    (:data:`DELIVERY_PEAK_DECAY`), not the average, and the step asks
    :meth:`BatchSizer.limit` with the time left before the nearer bound, so at the
    slowest recent cost no batch outlives either bound; a handler that slows down
    within a batch overruns it by at most that batch at its new cost
    (docs/operations.md, "Transaction time bound").

    Args:
        close_after_s: the step's close time, s, or ``None`` (it never commits mid-drain).
        pass_s: the step's pass length, s, or ``None`` (no limit).
        max_records: the most heads per batch: :data:`MAX_DELIVERY_BATCH`, or more for
            a process with a batch handler (``Process.receives_batch``), whose calls
            get as many of one batch's heads as its ``max_records`` allows.

    Returns:
        A :class:`BatchSizer`; the step calls ``observe(delivered, elapsed_s)`` per batch.
    """
    bounds = [b for b in (close_after_s, pass_s) if b is not None and b > 0]
    target_s = (DELIVERY_TARGET_FRACTION * min(bounds) if bounds
                else DEFAULT_DELIVERY_TARGET_S)
    return BatchSizer(target_s, max_records=max_records, initial=1,
                      peak_decay=DELIVERY_PEAK_DECAY)
