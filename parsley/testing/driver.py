"""The test driver: run declared processes over in-memory topics, with no broker.

:class:`ParsleyTestDriver` is Parsley's counterpart of Kafka Streams'
``TopologyTestDriver``: records piped into a topic are fed to every task that
receives its partition, through the same engine (the delivery rule, docs/model.md)
and the same handler frame (serdes, stores, refusals, docs/failing-closed.md) a
worker runs; what a handler sends lands in the driver's topics with its
``parsley.causes`` header and flows on to the processes that receive those
topics. Deterministic, single-threaded, in memory.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID, uuid5

from parsley.channels import Channel, Store
from parsley.engine.channel import ChannelId, Header
from parsley.engine.cross_partition import cross_partition_policy
from parsley.engine.shell import DEFAULT_BUDGET_BYTES
from parsley.naming import task_width, validate_declarations
from parsley.process import Process
from parsley.status import TaskDiagnosis
from parsley.testing.partitioner import partition_for
from parsley.testing.records import Cause, HeldMessage, Record, TopicLog
from parsley.testing.task import DrivenTask, StepSend
from parsley.wire import CAUSES_HEADER, encode_causes

__all__ = ["DEFAULT_MAX_DELIVERIES", "ParsleyTestDriver"]

DEFAULT_MAX_DELIVERIES: Final = 100_000
"""How many messages one :meth:`ParsleyTestDriver.run` may feed before it stops
with ``RuntimeError`` (a cycle of processes that answer each other for ever)."""

_TOPIC_IDS: Final = UUID("6d1e0b5a-2f0c-4c47-9a8e-1d0f5a3b7c21")
"""Namespace of the driver's topic ids: each topic's id is ``uuid5`` of its name in it,
so refusal details name the same ids in every run."""

_VALIDATION_PREFIX: Final = "parsley-test"


@dataclass(slots=True)
class _Running:
    """A process under the driver: its tasks and why it stopped, if it did."""

    process: Process
    tasks: list[DrivenTask]
    stopped: Exception | None = None
    paused: set[str] = field(default_factory=set)


class ParsleyTestDriver:
    """Run processes over in-memory topics, with the runtime's delivery rule and frame.

    Each process runs ``W`` tasks, ``W`` the largest partition count of the topics
    it receives; task ``i`` receives partition ``i`` of each (docs/model.md,
    "Channels and positions"). Every topic a process receives or sends exists, with
    the partition count given in ``partitions`` (default 1).

    :meth:`pipe` appends a record and then runs the processes (:meth:`run`) until
    nothing more can be fed or delivered, each task in turn doing one worker step
    (docs/testing.md, "How the processes run"). A process that refuses or whose
    handler raises stops with nothing of the failed step kept. The exception is
    raised once the other processes have settled, and the process stays stopped
    until :meth:`restart` (docs/testing.md, "Refusals and handler failures").

    Args:
        processes: a :class:`~parsley.Process` or several (e.g. an app's
            ``PROCESSES`` list); checked by :func:`parsley.validate_declarations`.
        partitions: topic name -> partition count; topics not named have 1.
        cross_partition_causes: ``"auto"``, ``"refuse"`` or ``"warn"``, as the
            runtime's setting (docs/operations.md, "Configuration").
        metadata_budget_bytes: the metadata budget, bytes (default 262,144).
        time_ms: the timestamp, ms since the epoch, of piped records that give none.
        seed: seeds the partition drawn for a record with a null key (a
            ``murmur2_random`` producer draws one at random), so runs repeat.
        max_deliveries: the most messages one :meth:`run` feeds before it raises
            ``RuntimeError``.

    Attributes:
        time_ms: as the argument; may be set between calls.
        warnings: ``(process, task, text)`` of each warning an engine issued (a
            cross-partition cause carried unenforced, a frontier near the budget).

    Raises:
        ValueError: declarations that :func:`parsley.validate_declarations`
            refuses, a partition count for a topic no process declares, a count
            below 1, or an unknown ``cross_partition_causes`` setting.
        TypeError: something other than a Process.
    """

    def __init__(
        self,
        processes: Process | Iterable[Process],
        *,
        partitions: Mapping[str, int] | None = None,
        cross_partition_causes: str = "auto",
        metadata_budget_bytes: int = DEFAULT_BUDGET_BYTES,
        time_ms: int = 0,
        seed: int = 0,
        max_deliveries: int = DEFAULT_MAX_DELIVERIES,
    ) -> None:
        procs = [processes] if isinstance(processes, Process) else list(processes)
        validate_declarations(_VALIDATION_PREFIX, procs)
        self.time_ms = time_ms
        self.warnings: list[tuple[str, int, str]] = []
        self._max_deliveries = max_deliveries
        self._rng = random.Random(seed)

        self._declared: dict[str, Channel[Any, Any]] = {}
        for p in procs:  # a received declaration first: it decodes what is piped
            for i in p.inputs:
                self._declared.setdefault(i.channel.name, i.channel)
        for p in procs:
            for c in p.outputs:
                self._declared.setdefault(c.name, c)
        counts = dict(partitions or {})
        unknown = sorted(set(counts) - set(self._declared))
        if unknown:
            raise ValueError(f"partitions given for {unknown}, which no process receives or "
                             f"sends; declared topics: {sorted(self._declared)}")
        for topic, n in counts.items():
            if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                raise ValueError(f"topic {topic!r}: a partition count is an int >= 1, got {n!r}")
        self._partitions = {t: counts.get(t, 1) for t in self._declared}
        self._ids = {t: uuid5(_TOPIC_IDS, t) for t in self._declared}
        self._names = {i: t for t, i in self._ids.items()}
        self._logs = {t: [TopicLog() for _ in range(n)] for t, n in self._partitions.items()}
        self._appended: list[Record] = []

        self._running: dict[str, _Running] = {}
        for p in procs:
            received = {t: self._partitions[t] for t in p.received_topics}
            policy = cross_partition_policy(received, cross_partition_causes)
            tasks = []
            for task in range(task_width(received)):
                channels = {t: ChannelId(self._ids[t], task)
                            for t in p.received_topics if received[t] > task}
                tasks.append(DrivenTask(
                    p, task, channels, budget_bytes=metadata_budget_bytes,
                    cross_partition=policy, on_warning=self._warner(p.name, task)))
            self._running[p.name] = _Running(p, tasks)

    def _warner(self, process: str, task: int) -> Callable[[str], None]:
        def warn(text: str) -> None:
            self.warnings.append((process, task, text))
        return warn

    # -- topics ------------------------------------------------------------------

    def topic_id(self, topic: str) -> UUID:
        """The Kafka topic id the driver gives ``topic`` (what ``parsley.causes`` names).

        Raises:
            KeyError: no process declares ``topic``.
        """
        return self._ids[self._topic(topic)]

    def partitions(self, topic: str) -> int:
        """The partition count of ``topic``.

        Raises:
            KeyError: no process declares ``topic``.
        """
        return self._partitions[self._topic(topic)]

    def causes_header(self, causes: Mapping[Cause, int]) -> bytes:
        """A ``parsley.causes`` value naming ``{(topic, partition): offset}`` with the
        driver's topic ids, to pipe as an upstream Parsley producer (Java or Python)
        would stamp it (docs/wire-format.md).

        Raises:
            KeyError: an undeclared topic.
            ValueError: a partition or offset out of range.
        """
        return encode_causes({ChannelId(self.topic_id(t), p): offset
                              for (t, p), offset in causes.items()})

    def _topic(self, topic: str) -> str:
        if topic not in self._declared:
            raise KeyError(f"topic {topic!r} is not declared by any process; declared topics: "
                           f"{sorted(self._declared)}")
        return topic

    def _process(self, process: str | Process) -> _Running:
        name = process.name if isinstance(process, Process) else process
        running = self._running.get(name)
        if running is None:
            raise KeyError(f"no process {name!r}; processes: {sorted(self._running)}")
        return running

    # -- input -------------------------------------------------------------------

    def pipe(
        self,
        topic: str,
        value: Any,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Mapping[str, bytes | None] | Iterable[Header] = (),
        timestamp_ms: int | None = None,
    ) -> Record:
        """Produce one record to ``topic`` and :meth:`run` the processes.

        Key and value are serialized with the serdes of the topic's first declaration
        (a received one if any); ``None`` stays a null key or a tombstone.

        Args:
            topic: a declared topic.
            value: the value.
            key: the key.
            partition: the partition; by default the key's murmur2 partition (Kafka's
                default partitioner), or for a null key one drawn from the seeded
                generator, as ``murmur2_random`` draws one.
            headers: ``(key, bytes | None)`` pairs or a mapping, in order; a
                ``parsley.causes`` header here is what an upstream producer stamped
                (see :meth:`causes_header`), and is read as such.
            timestamp_ms: the record timestamp, ms since the epoch; default
                :attr:`time_ms`.

        Returns:
            The record as appended (its partition and offset).

        Raises:
            ParsleyFailClosedError: a process refused while running; it is stopped.
            HandlerFailure: a handler raised while running; its process is stopped.
            KeyError: an undeclared topic.
            ValueError: a partition out of range, a negative timestamp.
            TypeError: a serde that returned something other than bytes, a malformed
                header.
        """
        channel = self._declared[self._topic(topic)]
        return self.pipe_bytes(
            topic, _serialize(channel.value_serde, value), _serialize(channel.key_serde, key),
            partition=partition, headers=headers, timestamp_ms=timestamp_ms)

    def pipe_bytes(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        headers: Mapping[str, bytes | None] | Iterable[Header] = (),
        timestamp_ms: int | None = None,
    ) -> Record:
        """As :meth:`pipe`, with raw key and value bytes (e.g. bytes no serde decodes)."""
        self._topic(topic)
        ts = self.time_ms if timestamp_ms is None else timestamp_ms
        if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
            raise ValueError(f"a timestamp is an int of ms >= 0, got {ts!r}")
        record = self._append(topic, key, value, _headers(headers), ts, partition, None, None,
                              self._declared[topic])
        self.run()
        return record

    def _append(self, topic: str, key: bytes | None, value: bytes | None,
                headers: tuple[Header, ...], timestamp_ms: int, partition: int | None,
                sender: str | None, task: int | None, channel: Channel[Any, Any]) -> Record:
        count = self._partitions[topic]
        if partition is None:
            partition = self._rng.randrange(count) if key is None else partition_for(key, count)
        elif not 0 <= partition < count:
            raise ValueError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
        log = self._logs[topic][partition]
        record = Record(topic, partition, log.next_offset, timestamp_ms, key, value, headers,
                        sender, task, channel, self._names)
        log.append(record)
        self._appended.append(record)
        return record

    # -- running -----------------------------------------------------------------

    def run(self) -> int:
        """Feed and deliver until no task can feed or deliver anything more.

        Tasks take turns in declaration order (process, then task number); each turn
        is one committed step (:class:`parsley.testing.task.DrivenTask`), and its
        sends are appended before the next turn. Stopped processes are skipped. A
        process that refuses or fails stops; the others run on until nothing moves,
        and then the first refusal or failure is raised.

        Returns:
            How many messages were delivered.

        Raises:
            ParsleyFailClosedError: a refusal; the process is stopped.
            HandlerFailure: a handler raised; the process is stopped.
            RuntimeError: more than ``max_deliveries`` messages delivered in this run.
        """
        total = 0
        first: Exception | None = None
        while True:
            progressed = False
            for running in self._running.values():
                for task in running.tasks:
                    if running.stopped is not None:
                        break
                    before = task.delivered
                    try:
                        sends = task.step(self._unread, running.paused)
                    except Exception as exc:
                        # The process stops; the others run on, as they would on a cluster.
                        running.stopped = exc
                        first = first or exc
                        progressed = True
                        continue
                    if sends is None:
                        continue
                    progressed = True
                    self._publish(running.process, task.task, sends)
                    total += task.delivered - before
                    if total > self._max_deliveries:
                        raise RuntimeError(
                            f"run delivered more than {self._max_deliveries} messages without "
                            "settling: processes that answer each other for ever? Raise "
                            "max_deliveries if the test needs more")
            if not progressed:
                if first is not None:
                    raise first
                return total

    def _unread(self, topic: str, partition: int, position: int) -> list[Record]:
        return self._logs[topic][partition].from_offset(position)

    def _publish(self, process: Process, task: int, sends: list[StepSend]) -> None:
        written: set[tuple[str, int]] = set()
        for s in sends:
            out = s.send
            channel = process.output(out.topic)
            assert channel is not None  # the frame resolved it against the declaration
            record = self._append(out.topic, out.key, out.value,
                                  (*out.headers, (CAUSES_HEADER, s.causes)), out.timestamp_ms,
                                  None, process.name, task, channel)
            written.add((record.topic, record.partition))
        for topic, partition in sorted(written):
            self._logs[topic][partition].mark()

    def pause(self, topic: str, process: str | Process | None = None) -> None:
        """Stop feeding ``topic`` to ``process`` (every process receiving it when
        ``None``): its records wait unread, as when a consumer lags on that topic.

        Raises:
            KeyError: an undeclared topic or process.
            ValueError: the process does not receive ``topic``.
        """
        for running in self._receivers(topic, process):
            running.paused.add(topic)

    def resume(self, topic: str, process: str | Process | None = None) -> int:
        """Feed ``topic`` again to ``process`` (every receiver when ``None``) and :meth:`run`.

        Returns:
            How many messages the run delivered.

        Raises:
            As :meth:`pause`, and as :meth:`run`.
        """
        for running in self._receivers(topic, process):
            running.paused.discard(topic)
        return self.run()

    def _receivers(self, topic: str, process: str | Process | None) -> list[_Running]:
        self._topic(topic)
        if process is None:
            return [r for r in self._running.values() if r.process.input(topic) is not None]
        running = self._process(process)
        if running.process.input(topic) is None:
            raise ValueError(f"process {running.process.name!r} does not receive {topic!r}")
        return [running]

    def restart(self, process: str | Process) -> int:
        """Restart ``process`` from its last committed step, as a worker restart does, and
        :meth:`run`: a refused or failed step is fed again (and refuses or fails again
        unless the cause went away).

        Returns:
            How many messages the run delivered.

        Raises:
            As :meth:`run`.
        """
        running = self._process(process)
        running.stopped = None
        for task in running.tasks:
            task.restart()
        return self.run()

    def close(self) -> None:
        """Release the tasks' in-memory stores; the driver is unusable afterwards (also
        on leaving a ``with`` block)."""
        for running in self._running.values():
            for task in running.tasks:
                task.close()
            running.stopped = RuntimeError("the driver was closed")

    def __enter__(self) -> ParsleyTestDriver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- inspection ----------------------------------------------------------------

    def read(self, topic: str, partition: int | None = None) -> list[Record]:
        """Every record of ``topic`` (of one partition), piped or sent, in the order they
        were appended; aborted steps' sends are never there.

        Raises:
            KeyError: an undeclared topic.
        """
        self._topic(topic)
        return [r for r in self._appended
                if r.topic == topic and (partition is None or r.partition == partition)]

    def sent(self, process: str | Process, topic: str | None = None) -> list[Record]:
        """What ``process`` sent (to ``topic``), in the order it was sent.

        Raises:
            KeyError: an undeclared process or topic.
        """
        name = self._process(process).process.name
        if topic is not None:
            self._topic(topic)
        return [r for r in self._appended
                if r.sender == name and (topic is None or r.topic == topic)]

    def store(self, process: str | Process, store: str | Store[Any, Any],
              task: int | None = None) -> dict[Any, Any]:
        """The committed content of a declared store, decoded by its declared serdes.

        Args:
            process: the process.
            store: the store or its name.
            task: one task's store; ``None`` merges every task's (each task keeps
                the keys of its own partitions; a key in two tasks reads as the
                higher task's value).

        Raises:
            KeyError: an undeclared process, store or task.
        """
        running = self._process(process)
        name = store.name if isinstance(store, Store) else store
        declared = running.process.store(name)
        if declared is None:
            raise KeyError(f"process {running.process.name!r} declares no store {name!r}")
        out: dict[Any, Any] = {}
        for t in self._tasks(running, task):
            for key, value in t.stores.items(name):
                out[declared.key_serde.deserialize(key)] = declared.value_serde.deserialize(value)
        return out

    def held(self, process: str | Process, task: int | None = None) -> list[HeldMessage]:
        """The messages ``process`` holds back (of one task), per task and channel in
        offset order, each head with the causes it waits for. For a stopped process,
        what its last committed step left held, as ``parsley-coordinator inspect``
        shows a stopped process (docs/operations.md).

        Raises:
            KeyError: an undeclared process or task.
        """
        running = self._process(process)
        out: list[HeldMessage] = []
        for t in self._tasks(running, task):
            engine = t.view()
            heads = {(h.topic, h.partition): h for h in engine.diagnose().held}
            for name, ch in t.channels.items():
                positions = engine.held_positions(ch)
                for i, position in enumerate(positions):
                    head = heads.get((name, ch.partition))
                    blockers = head.blockers if i == 0 and head is not None else ()
                    out.append(HeldMessage(running.process.name, t.task,
                                           self._logs[name][ch.partition].at(position),
                                           i == 0, blockers))
        return out

    def diagnose(self, process: str | Process, task: int = 0) -> TaskDiagnosis:
        """The task's diagnosis as status shows it (docs/failing-closed.md, "Diagnosis");
        for a stopped process, its last committed step's.

        Raises:
            KeyError: an undeclared process or task.
        """
        [t] = self._tasks(self._process(process), task)
        return t.view().diagnose()

    def stopped(self, process: str | Process) -> Exception | None:
        """Why ``process`` stopped (the refusal or the handler failure), or ``None``
        while it runs."""
        return self._process(process).stopped

    def tasks(self, process: str | Process) -> int:
        """How many tasks ``process`` runs."""
        return len(self._process(process).tasks)

    def _tasks(self, running: _Running, task: int | None) -> list[DrivenTask]:
        if task is None:
            return running.tasks
        if not 0 <= task < len(running.tasks):
            raise KeyError(f"process {running.process.name!r} has tasks "
                           f"0..{len(running.tasks) - 1}, not {task}")
        return [running.tasks[task]]


def _serialize(serde: Any, data: Any) -> bytes | None:
    if data is None:
        return None
    raw = serde.serialize(data)
    if raw is None or isinstance(raw, bytes):
        return raw
    if isinstance(raw, bytearray | memoryview):
        return bytes(raw)
    raise TypeError(f"serializer returned {type(raw).__name__}, not bytes")


def _headers(headers: Mapping[str, bytes | None] | Iterable[Header]) -> tuple[Header, ...]:
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    out: list[Header] = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"a header is a (key, value) pair, got {pair!r}")
        k, v = pair
        if not isinstance(k, str) or not (v is None or isinstance(v, bytes | bytearray)):
            raise TypeError(f"a header is (str, bytes | None), got {pair!r}")
        out.append((k, None if v is None else bytes(v)))
    return tuple(out)
