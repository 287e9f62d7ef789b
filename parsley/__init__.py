"""Parsley for Python: causal-order, exactly-once, fail-closed delivery of Kafka messages.

Public names are listed in ``__all__``; everything else is internal.
"""

from parsley import wire
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "FED_TO_END",
    "ChannelId",
    "ParsleyFailClosedError",
    "Reason",
    "wire",
]
