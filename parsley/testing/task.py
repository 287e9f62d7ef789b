"""One task of a process under the test driver: the worker's step, with no Kafka.

A :class:`DrivenTask` holds what a worker's task holds (``workers/main.py``,
``workers/step.py``): a :class:`~parsley.engine.engine.ProcessEngine` over an
:class:`~parsley.engine.store.InMemoryOrderingStore`, the
:class:`parsley.frame.HandlerFrame` that runs the handlers, the task's declared stores
(:class:`parsley.task_stores.TaskStores`, kept in memory) and its committed read
positions. :meth:`DrivenTask.step` is one transaction of the worker's loop: feed,
deliver through the frame, commit. A refusal or a handler failure aborts the step and
nothing of it is kept, as an aborted transaction leaves nothing a ``read_committed``
consumer sees; :meth:`DrivenTask.restart` then builds a fresh engine from the
committed state (docs/model.md, "Restart").

The step's procedure: docs/architecture.md, "parsley/testing/task.py".
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from parsley.engine import engine_type
from parsley.engine.channel import ChannelId, Header
from parsley.engine.cross_partition import CrossPartition
from parsley.engine.engine import ProcessEngine
from parsley.engine.store import InMemoryOrderingStore
from parsley.frame import HandlerFrame, SerializedSend
from parsley.process import Process
from parsley.task_stores import TaskStores
from parsley.testing.records import Record

__all__ = ["DrivenTask", "StepSend"]

_DELIVER_BATCH: Final = 256
"""Heads taken per ``ProcessEngine.deliver_batch`` call; the batch size changes nothing a
per-record handler sees (each entry carries the header after its own delivery). A batch
handler gets a run of consecutive heads of its channel within one such call, at most its
``max_records``, as in the worker (which takes up to the largest ``max_records``)."""

_CREATE_TIME: Final = 1
"""``confluent_kafka.TIMESTAMP_CREATE_TIME``: what a fetched record's ``timestamp()``
pairs with its ms."""


class _Fetched:
    """A driver record as the engine's batch feed reads a fetched one: the accessor
    methods of ``confluent_kafka.Message`` (``parsley.engine.feed.RecordLike``)."""

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def topic(self) -> str:
        return self._record.topic

    def offset(self) -> int:
        return self._record.offset

    def timestamp(self) -> tuple[int, int]:
        return (_CREATE_TIME, self._record.timestamp_ms)

    def key(self) -> bytes | None:
        return self._record.key_bytes

    def value(self) -> bytes | None:
        return self._record.value_bytes

    def headers(self) -> list[Header]:
        return list(self._record.raw_headers)


@dataclass(frozen=True, slots=True)
class StepSend:
    """One send of a committed step: the frame's serialized send and the
    ``parsley.causes`` value it carries (bytes, docs/wire-format.md)."""

    send: SerializedSend
    causes: bytes


class DrivenTask:
    """Task ``task`` of ``process``, fed from the driver's topics.

    Args:
        process: the declaration.
        task: the task number: it receives partition ``task`` of each received topic
            that has one (docs/model.md, "Channels and positions").
        channels: received topic name -> its channel (topic id, partition ``task``),
            in the order the task is fed.
        budget_bytes: the metadata budget, bytes (docs/operations.md, "Configuration").
        cross_partition: the task's policy for a cause on another task's partition.
        on_warning: called with each warning the engine issues.

    Attributes:
        engine: the running engine, or ``None`` after an aborted step until
            :meth:`restart`.
        stores: the task's declared stores.
        positions: committed read positions, topic -> next offset to feed.
        delivered: messages delivered in committed steps.
        batch_calls: batch-handler calls (``Process.receives_batch``) made, aborted
            steps' and calls that raised included (``HandlerFrame.batch_calls``).
    """

    def __init__(
        self,
        process: Process,
        task: int,
        channels: Mapping[str, ChannelId],
        *,
        budget_bytes: int,
        cross_partition: CrossPartition,
        on_warning: Callable[[str], None],
    ) -> None:
        self.process = process
        self.task = task
        self.channels = dict(channels)
        self._topics = {ch.topic_id: name for name, ch in self.channels.items()}
        self._budget = budget_bytes
        self._cross = cross_partition
        self._on_warning = on_warning
        self._ordering = InMemoryOrderingStore()
        self.stores = TaskStores(None, [s.name for s in process.declared_stores])
        self.positions: dict[str, int] = dict.fromkeys(self.channels, 0)
        self.delivered = 0
        self.batch_calls = 0
        self.engine: ProcessEngine | None = None
        self._frame: HandlerFrame | None = None
        self.restart()

    def restart(self) -> None:
        """Build a fresh engine and frame over the committed state and start the engine
        at the committed read positions (docs/model.md, "Restart").

        Raises:
            ParsleyFailClosedError: the engine's restore refusals.
        """
        self.stores.discard()
        self.engine = None
        engine: ProcessEngine = engine_type()(
            self._ordering, received=self.channels.values(), budget_bytes=self._budget,
            on_warning=self._on_warning, cross_partition=self._cross)
        engine.bind_names({name: ch.topic_id for name, ch in self.channels.items()})
        engine.start({ch: self.positions[name] for name, ch in self.channels.items()})
        self._frame = HandlerFrame(self.process, self.task, self.stores)
        self.engine = engine

    def close(self) -> None:
        """Release the engine, the frame and the stores' caches."""
        self.engine = None
        self._frame = None
        self.stores.close()

    def view(self) -> ProcessEngine:
        """The running engine; after an aborted step, an engine restored from the
        committed ordering store (not started), to inspect what is held.

        Raises:
            ParsleyFailClosedError: the engine's restore refusals.
        """
        if self.engine is not None:
            return self.engine
        engine: ProcessEngine = engine_type()(
            self._ordering, received=self.channels.values(), budget_bytes=self._budget,
            cross_partition=self._cross)
        engine.bind_names({name: ch.topic_id for name, ch in self.channels.items()})
        return engine

    def step(
        self,
        unread: Callable[[str, int, int], list[Record]],
        paused: Collection[str],
    ) -> list[StepSend] | None:
        """Feed, deliver and commit one step.

        Args:
            unread: ``(topic, partition, position) -> records`` at offsets ``>=
                position``, in offset order.
            paused: received topics not fed in this step.

        Returns:
            The sends of the committed step, in the order the handlers made them, or
            ``None`` when there was nothing to feed or deliver.

        Raises:
            ParsleyFailClosedError: an engine or frame refusal; the step is aborted.
            HandlerFailure: a handler raised; the step is aborted.
            RuntimeError: the task was not restarted after an aborted step.
        """
        engine, frame = self.engine, self._frame
        if engine is None or frame is None:
            raise RuntimeError(f"{self.process.name} task {self.task} was stopped; restart it")
        positions = dict(self.positions)
        sends: list[StepSend] = []
        fed = delivered = 0
        try:
            batch = [_Fetched(r) for name, ch in self.channels.items() if name not in paused
                     for r in unread(name, ch.partition, positions[name])]
            if batch:
                fed, _, last = engine.feed_records(batch, self.channels)
                for name, offset in last.items():
                    positions[name] = offset + 1
            topics = self._topics
            limits = frame.batch_limits
            size = max([_DELIVER_BATCH, *limits.values()])
            while entries := engine.deliver_batch(size):
                i = 0
                while i < len(entries):
                    ch, position, ts, key, value, headers, causes = entries[i]
                    topic = topics[ch.topic_id]
                    limit = limits.get(topic)
                    if limit is None:
                        result = frame.deliver(topic, ch.partition, position, ts, key, value,
                                               headers)
                        end = i + 1
                    else:
                        # As the worker: a run of this channel's heads in one call, its
                        # sends stamped with the frontier after the run's last delivery.
                        end = _run_end(entries, i, limit)
                        before = frame.batch_calls
                        try:
                            result = frame.deliver_batch(topic, ch.partition, [
                                (e[1], e[2], e[3], e[4], e[5]) for e in entries[i:end]])
                        finally:
                            # Counted once the handler is called, as the worker counts
                            # (HandlerFrame.batch_calls): a call that raised included.
                            self.batch_calls += frame.batch_calls - before
                        causes = entries[end - 1][6]
                    if result.writes:
                        self.stores.apply(result.writes)
                    sends.extend(StepSend(s, causes) for s in result.sends)
                    delivered += end - i
                    i = end
            if not fed and not delivered:
                return None
            engine.take_deltas()
        except Exception:
            self.stores.discard()
            self.engine = None
            self._frame = None
            raise
        self.stores.committed()
        self.positions = positions
        self.delivered += delivered
        return sends


def _run_end(entries: Sequence[tuple[object, ...]], start: int, limit: int) -> int:
    """The end (exclusive) of the run of ``entries[start]``'s channel from ``start``: its
    consecutive entries, at most ``limit`` (``workers.step`` cuts runs the same way)."""
    ch = entries[start][0]
    end, stop = start + 1, min(len(entries), start + limit)
    while end < stop and entries[end][0] is ch:
        end += 1
    return end
