"""The native fast path of a delivery batch: the handler frame's common case in Rust.

With the native core (``PARSLEY_ENGINE`` unset or ``native``),
:meth:`workers.step.TaskStep.drain` hands each delivery batch to
``parsley._native.FastFrame.run``, which does for each entry what
:meth:`parsley.frame.HandlerFrame.run` and the step's send do, in the same order
and with the same results, while the entry is *plain*:

* its channel's serdes are built in (BYTES, STRING, JSON) and it has no application
  headers, and no refusal is latched;
* the handler returns an :class:`parsley.Effects` with no store write and at most one
  :class:`parsley.Send`, without headers, to a declared output whose serdes are built in,
  whose key and value serialize to ``bytes`` or ``None``;
* ``Producer.produce`` takes the record.

The ``Delivery`` is built slot by slot, the handler is called with the frame's state
view (the refusal latch is set for the batch, :meth:`HandlerFrame.latching`), and the
send is produced with ``parsley.causes`` = the entry's header, as the step does.

At the first entry that is not plain it stops and says why (with the time it already
spent on the entry, which the step adds to that entry's cost when it sizes the next
batch); the step then finishes that entry in Python and calls it again for the rest:

* :data:`STOP_RECORD` — the handler was not called: the frame runs the entry whole
  (a failed decode is decoded again: built-in decoders are pure);
* :data:`STOP_EFFECTS` — the handler returned the payload: the frame plans it
  (:meth:`HandlerFrame.plan`: every check, refusal and serializer of the Python path;
  built-in serializers are pure);
* :data:`STOP_RAISED` — the handler raised the payload, an ``Exception``
  (:meth:`HandlerFrame.handler_raised`); anything else (``KeyboardInterrupt``) is raised
  by the call itself;
* :data:`STOP_PRODUCE` — ``produce`` raised for the payload, the planned send
  ``(topic, key, value, headers, timestamp_ms)``, and queued nothing: the step sends it
  through ``TaskTransaction.send_counted`` (which waits out a full queue or classifies the
  failure).

A call that raises (a ``BaseException`` that is not an ``Exception``, or a failure of
its own) leaves what it had handled in ``FastFrame.partial()``, which the step counts.

``tests/unit/test_worker_fastpath.py`` runs the same batches through both paths and
compares every send, count and refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from parsley.declarations import Effects, Send
from parsley.effects import Delivery
from parsley.engine.channel import ChannelId
from parsley.frame import HandlerFrame
from parsley.native import NATIVE
from parsley.wire import CAUSES_HEADER
from workers.transaction import TaskTransaction

__all__ = ["STOP_EFFECTS", "STOP_PRODUCE", "STOP_RAISED", "STOP_RECORD", "fast_frame"]

STOP_RECORD: Final = 0
"""The entry needs the whole Python frame (its handler was not called)."""
STOP_EFFECTS: Final = 1
"""The handler returned the payload; the Python frame plans it."""
STOP_RAISED: Final = 2
"""The handler raised the payload (an ``Exception``)."""
STOP_PRODUCE: Final = 3
"""``produce`` refused the planned send (the payload); nothing was queued."""


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
    inputs = {id(ch): (name, ch.partition, *plans[name])
              for name, ch in channels.items() if name in plans}
    if not inputs:
        return None  # no entry could be plain: every one would be handed back
    # The producer's produce and the ledger's callback are held for the step's life: the
    # worker keeps one producer and one ledger per task (workers.transaction).
    return NATIVE.FastFrame(inputs, outputs, frame, frame.state, (Delivery, Effects, Send),
                            txn.producer.produce, txn.ledger.on_delivery, CAUSES_HEADER)
