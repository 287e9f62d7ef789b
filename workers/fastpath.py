"""The native fast path of a delivery batch: the handler frame's common case in Rust.

With the native core (``PARSLEY_ENGINE`` unset or ``native``),
:meth:`workers.step.TaskStep.drain` hands each delivery batch to
``parsley._native.FastFrame.run``, which does for each *plain* entry of a per-record
handler what :meth:`parsley.frame.HandlerFrame.run` and the step's send do, and for each
plain run of a batch handler's entries (``Process.receives_batch``) what
:meth:`parsley.frame.HandlerFrame.run_batch` and the step's sends do, in the same order
and with the same results. At the first entry (or run) that is not plain it stops and says
why (:data:`STOP_RECORD`, :data:`STOP_EFFECTS`, :data:`STOP_RAISED`, :data:`STOP_PRODUCE`,
with the time it spent on the entry or run); the step finishes that entry, or the whole
run, in Python and calls it again for the rest. A call that raises leaves what it handled
in ``FastFrame.partial()``.

What "plain" is, and what the step does at each stop: docs/architecture.md, "The
worker", "The native fast path". ``tests/unit/test_worker_fastpath.py`` runs the same
batches through both paths and compares every send, count and refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from parsley.channels import Channel
from parsley.declarations import Effects, Send
from parsley.effects import Delivery
from parsley.engine.channel import ChannelId
from parsley.frame import HandlerFrame
from parsley.native import NATIVE
from parsley.wire import CAUSES_HEADER
from workers.transaction import TaskTransaction

__all__ = ["STOP_EFFECTS", "STOP_PRODUCE", "STOP_RAISED", "STOP_RECORD", "fast_frame"]

STOP_RECORD: Final = 0
"""The entry (a batch handler's: its whole run) needs the whole Python frame (its
handler was not called)."""
STOP_EFFECTS: Final = 1
"""The handler returned the payload; the Python frame plans it."""
STOP_RAISED: Final = 2
"""The handler raised the payload (an ``Exception``)."""
STOP_PRODUCE: Final = 3
"""``produce`` refused a planned send and queued nothing of it. The payload is ``(send,
rest)``: ``send`` stamped as ``(topic, key, value, headers, timestamp_ms)`` with
``parsley.causes`` last, for ``TaskTransaction.send_counted``; ``rest`` the sends after it
(a batch handler's), not yet produced, as :meth:`parsley.frame.HandlerFrame.plan` plans
them, for the step to stamp and produce. The sends before it were produced."""


def fast_frame(frame: HandlerFrame, txn: TaskTransaction,
               channels: Mapping[str, ChannelId]) -> Any | None:
    """The ``parsley._native.FastFrame`` of one task.

    Args:
        frame: the task's handler frame (its handlers, serdes plans, latch and state view).
        txn: the task's transaction (its producer's ``produce``, its ledger's callback).
        channels: received topic name -> the channel object the engine was given (and
            hands back in each delivery: the fast path matches it by identity).

    Returns:
        The fast frame, or ``None`` without the native core or when no received channel
        has built-in serdes (every entry would be handed back).
    """
    if NATIVE is None:
        return None
    plans, outputs = frame.fast_plans()
    # (topic, partition, handler, decode key, decode value, max_records or None)
    inputs = {id(ch): (name, ch.partition, *plans[name])
              for name, ch in channels.items() if name in plans}
    if not inputs:
        return None  # no entry could be plain: every one would be handed back
    # The producer's produce and the ledger's callback are held for the step's life: the
    # worker keeps one producer and one ledger per task (workers.transaction).
    return NATIVE.FastFrame(inputs, outputs, frame, frame.state, (Delivery, Effects, Send, Channel),
                            txn.producer.produce, txn.ledger.on_delivery, CAUSES_HEADER)
