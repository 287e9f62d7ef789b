"""Test declared processes without a broker: :class:`ParsleyTestDriver`.

Like Kafka Streams' ``TopologyTestDriver``: pipe records into declared topics,
and the processes' handlers run through the runtime's own engine (the delivery
rule of docs/model.md) and handler frame (serdes, stores and refusals of
docs/failing-closed.md); read what each process sent, with its ``parsley.causes``,
inspect stores and held messages, and see refusals raised as
:class:`parsley.ParsleyFailClosedError`. Deterministic, in memory, no Kafka and no
processes. docs/testing.md shows how::

    from parsley.testing import ParsleyTestDriver

    driver = ParsleyTestDriver(PROCESSES, partitions={"shop.orders": 2})
    driver.pipe("shop.orders", {"id": "o1", "amount": 10}, key="customer-1")
    assert [r.value for r in driver.read("shop.ledger")] == ["paid o1"]
"""

from __future__ import annotations

from parsley.frame import HandlerFailure
from parsley.status import Blocker
from parsley.testing.driver import DEFAULT_MAX_DELIVERIES, ParsleyTestDriver
from parsley.testing.partitioner import murmur2, partition_for
from parsley.testing.records import Cause, HeldMessage, Record

__all__ = [
    "DEFAULT_MAX_DELIVERIES",
    "Blocker",
    "Cause",
    "HandlerFailure",
    "HeldMessage",
    "ParsleyTestDriver",
    "Record",
    "murmur2",
    "partition_for",
]
