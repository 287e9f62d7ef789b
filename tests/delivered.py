"""A stand-in for the ``confluent_kafka.Message`` a delivery report names: only the topic
and partition that :class:`workers.ledger.DeliveryLedger` reads."""

from __future__ import annotations


class DeliveredRecord:
    """The record of a delivery report on ``topic``'s ``partition``."""

    def __init__(self, topic: str, partition: int = 0) -> None:
        self._topic, self._partition = topic, partition

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition
