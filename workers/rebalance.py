"""The task's assignment as the group hands it out: the rebalance callbacks and their state.

librdkafka calls :meth:`Assignment.on_assign` and :meth:`Assignment.on_revoke` from inside
``consume``; they only record what changed (and pause an inexact assignment), and the loop
acts on it afterwards (:meth:`Assignment.take_change`). A task processes only on the exact
assignment, partition ``i`` of each received topic with more than ``i`` partitions
(docs/operations.md, "Running"); anything else is ``REBALANCING``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition

from workers.assignment import IncompleteAssignment

__all__ = ["Assignment"]

log = logging.getLogger("parsley.worker")


class Assignment:
    """What the group assigned the task, against what it must be assigned.

    Args:
        app_id: the application id (named in the log lines).
        task: the task index.
        expected: the exact assignment, ``{(topic, partition)}``.
    """

    def __init__(self, app_id: str, task: int, expected: frozenset[tuple[str, int]]) -> None:
        self.app_id = app_id
        self.task = task
        self.expected = expected
        self.current: frozenset[tuple[str, int]] = frozenset()
        self.changed = False
        self.incomplete = IncompleteAssignment()
        self.callback_error: BaseException | None = None
        """An error met inside a callback, re-raised by the loop after ``consume``."""

    @property
    def exact(self) -> bool:
        """Whether the current assignment is exactly the expected one."""
        return self.current == self.expected

    def on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """librdkafka's ``on_assign``: record it; pause an inexact assignment."""
        self.current = frozenset((tp.topic, tp.partition) for tp in partitions)
        self.changed = True
        log.info("%s task %d assigned %s", self.app_id, self.task,
                 [f"{tp.topic}-{tp.partition}" for tp in partitions])
        if not partitions:
            return
        if not self.exact:
            consumer.pause(partitions)
        else:
            consumer.resume(partitions)  # a pause from an earlier assignment must not stick

    def on_revoke(self, partitions: list[TopicPartition], abort: Callable[[], None]) -> None:
        """librdkafka's ``on_revoke``/``on_lost``: record it, calling ``abort`` (the open
        transaction's) and keeping what it raises for the loop."""
        log.info("%s task %d revoked %s", self.app_id, self.task,
                 [f"{tp.topic}-{tp.partition}" for tp in partitions])
        try:
            abort()
        except BaseException as exc:  # re-raised from the loop
            self.callback_error = exc

    def revoked(self) -> None:
        """Clear the assignment after a revoke."""
        self.current = frozenset()
        self.changed = True

    def take_error(self) -> None:
        """Re-raise an error a callback met, once."""
        if self.callback_error is not None:
            failure, self.callback_error = self.callback_error, None
            raise failure

    def take_change(self) -> bool | None:
        """Consume a recorded change: ``None`` when nothing changed, ``True`` for the exact
        assignment, ``False`` (logged, at INFO at a start while the siblings join) for
        any other."""
        if not self.changed:
            return None
        self.changed = False
        if self.exact:
            return True
        level = self.incomplete.assigned(bool(self.current), time.monotonic())
        if level is not None:  # INFO at a start: the siblings are still joining
            log.log(level, "%s task %d was assigned %s, not exactly %s: processing nothing "
                    "until the missing members %s", self.app_id, self.task,
                    sorted(self.current), sorted(self.expected),
                    "rejoin" if level == logging.WARNING else "join")
        return False

    def warn_if_overdue(self) -> None:
        """Log when an inexact assignment has lasted past its warning point."""
        waited = self.incomplete.overdue(time.monotonic())
        if waited is not None:
            log.warning("%s task %d has been assigned %s, not exactly %s, for %.0f s "
                        "since its start: processing nothing until the missing members "
                        "join", self.app_id, self.task, sorted(self.current),
                        sorted(self.expected), waited)
