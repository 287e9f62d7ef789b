"""``workers.hold_figures.consumer_positions``: the reader's position a blocker is classed
with (docs/runbooks.md, "A message is held and not moving", ``no_record``).

Right after a start the consumer has no position on a partition it has fetched nothing
from (at its end, or past trailing markers); the committed read position, where it starts
reading, stands in, so a cause at a marker below it is ``no_record``, not ``behind``.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from workers.hold_figures import consumer_positions


class _Consumer:
    def __init__(self, at: dict[tuple[str, int], int] | None) -> None:
        self.at = at

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        if self.at is None:
            raise KafkaException(KafkaError(KafkaError._STATE))
        return [TopicPartition(tp.topic, tp.partition, self.at.get((tp.topic, tp.partition),
                                                                   OFFSET_INVALID))
                for tp in tps]


def test_a_partition_not_fetched_since_the_start_reads_from_its_committed_position() -> None:
    positions: Any = consumer_positions(_Consumer({("b", 0): 5}), {("a", 0): 2, ("b", 0): 3})
    assert positions([("a", 0), ("b", 0), ("c", 0)]) == {("a", 0): 2, ("b", 0): 5}


def test_the_consumers_position_wins_only_when_ahead() -> None:
    positions: Any = consumer_positions(_Consumer({("a", 0): 1}), {("a", 0): 2})
    assert positions([("a", 0)]) == {("a", 0): 2}


def test_no_consumer_or_a_failed_one_leaves_the_committed_positions() -> None:
    committed = {("a", 0): 2, ("b", 0): -1001}
    assert consumer_positions(None, committed)([("a", 0), ("b", 0)]) == {("a", 0): 2}
    assert consumer_positions(_Consumer(None), committed)([("a", 0)]) == {("a", 0): 2}
