"""Parsley for Python: causal-order, exactly-once, fail-closed delivery of Kafka messages.

Public names are listed in ``__all__``; everything else is internal.
"""

from parsley import serdes, session, wire
from parsley.declarations import (
    EARLIEST,
    LATEST,
    BatchHandler,
    Channel,
    Delivery,
    Effects,
    Handler,
    InitialPosition,
    Process,
    State,
    Store,
    validate_declarations,
)
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.inspector import OrderingStateInspector
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "EARLIEST",
    "FED_TO_END",
    "LATEST",
    "BatchHandler",
    "Channel",
    "ChannelId",
    "Delivery",
    "Effects",
    "Handler",
    "InitialPosition",
    "OrderingStateInspector",
    "ParsleyFailClosedError",
    "Process",
    "Reason",
    "State",
    "Store",
    "serdes",
    "session",
    "validate_declarations",
    "wire",
]
