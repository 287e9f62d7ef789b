"""Random worlds for the simulator: topics, external sources, processes and their tasks.

A :class:`Scenario` is a pure function of its seed (``generate(seed)``), so a
failing seed replays exactly. Shapes are drawn from the topologies the
verification obligations name (README.md, "The verification kit", V1/V6): a chain, a diamond, a
fan-in, a process receiving its own output (a cycle), and a random mix; then
partition counts (1-3 per topic), sources, fault rates and which source
topic, if any, is deleted once it carries no obligations (SPEC assumption 17).

Tasks follow Kafka Streams' partition grouping: a process is as wide as its
widest received topic, and task ``i`` receives partition ``i`` of every
received topic that has one (docs/model.md, "The stored form", "one partition per task").
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from uuid import UUID

from parsley.engine.channel import ChannelId
from parsley.wire import encoded_size

__all__ = [
    "SHAPES",
    "ProcessSpec",
    "Scenario",
    "SourceSpec",
    "TaskSpec",
    "TopicSpec",
    "generate",
]

SHAPES = ("chain", "diamond", "fan_in", "self_loop", "random")


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic: its name, its Kafka topic id and its partition count (1-3)."""

    name: str
    topic_id: UUID
    partitions: int

    def channels(self) -> tuple[ChannelId, ...]:
        """Every channel (topic-partition) of the topic, partition order."""
        return tuple(ChannelId(self.topic_id, p) for p in range(self.partitions))


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """An external producer writing ``messages`` records to one source topic.

    Attributes:
        name: the producer's name (prefix of its record values).
        topic: the topic it writes.
        messages: how many records it commits in total.
        transactional: writes in transactions (commit markers take offsets, and
            about one batch in six is aborted, leaving invisible records).
        cause_rate: probability that a record carries causes the producer
            legitimately has (it read some committed record first), 0..1.
    """

    name: str
    topic: str
    messages: int
    transactional: bool
    cause_rate: float


@dataclass(frozen=True, slots=True)
class ProcessSpec:
    """A declared process: the topics it receives and the topics it may send to."""

    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task of a process: the channels it receives and the topics it sends to."""

    process: str
    index: int
    received: tuple[ChannelId, ...]
    outputs: tuple[str, ...]

    @property
    def name(self) -> str:
        """``<process>#<index>``, the name violations and traces use."""
        return f"{self.process}#{self.index}"


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything random about one simulated world, fixed by ``seed``.

    Attributes:
        seed: the seed it was generated from.
        shape: one of :data:`SHAPES`.
        topics: every topic by name.
        sources: the external producers (one per source topic).
        processes: the declared processes.
        tasks: every task of every process.
        max_depth: handler emissions stop at this hop count (keeps cycles finite).
        crash_rate: probability that a task step crashes instead of committing.
        restart_rate: probability of a clean restart after a committed step.
        deletable: source topics deleted once they carry no obligations.
        late: processes that start at the log end (``LATEST``) rather than at
            the log start: what lies below their first start position is never theirs.
        base_offsets: first offset of each channel's log (absent: 0); some are
            large or just below 2^31, so positions exercise int64 arithmetic.
        truncate: whether retention (delete-records) advances log starts up to
            the committed read positions of every receiver (V7).
        budget_bytes: the metadata budget every engine gets: ``None`` for the
            default, or exactly the encoded size of a frontier naming every
            channel in the world, the largest a legal run can reach, so the
            engine's size arithmetic is tested at its edge.
        join: ``(process, topic)``: the process's declaration gains ``topic`` at
            a restart mid-run (a joining channel: what its delivered past names
            is covered, docs/model.md, "Covered and settled").
    """

    seed: int
    shape: str
    topics: dict[str, TopicSpec]
    sources: tuple[SourceSpec, ...]
    processes: tuple[ProcessSpec, ...]
    tasks: tuple[TaskSpec, ...]
    max_depth: int
    crash_rate: float
    restart_rate: float
    deletable: tuple[str, ...]
    late: tuple[str, ...] = ()
    base_offsets: dict[ChannelId, int] = field(default_factory=dict)
    truncate: bool = False
    join: tuple[str, str] | None = None
    budget_bytes: int | None = None

    def join_channels(self, task: TaskSpec) -> tuple[ChannelId, ...]:
        """The channels ``task`` gains when its process joins :attr:`join`'s topic."""
        if self.join is None or self.join[0] != task.process:
            return ()
        topic = self.topics[self.join[1]]
        return (ChannelId(topic.topic_id, task.index),) if topic.partitions > task.index else ()

    def describe(self) -> str:
        """A one-paragraph summary used in failure messages (replay aid)."""
        procs = "; ".join(f"{p.name}: {','.join(p.inputs)} -> {','.join(p.outputs)}"
                          for p in self.processes)
        parts = ",".join(f"{t.name}x{t.partitions}" for t in self.topics.values())
        srcs = ",".join(f"{s.name}->{s.topic}({s.messages}{'t' if s.transactional else ''})"
                        for s in self.sources)
        return (f"seed={self.seed} shape={self.shape} topics=[{parts}] sources=[{srcs}] "
                f"processes=[{procs}] crash={self.crash_rate:.2f} "
                f"restart={self.restart_rate:.2f} delete={list(self.deletable)} "
                f"late={list(self.late)} truncate={self.truncate} "
                f"bases={sorted(set(self.base_offsets.values()))} join={self.join} "
                f"budget={self.budget_bytes}")


def _shape_edges(rng: random.Random, shape: str) -> tuple[list[str], list[tuple[str, ...]],
                                                       list[tuple[list[str], list[str]]]]:
    """Topic names, source topics, and (inputs, outputs) per process for a shape."""
    if shape == "chain":
        n = rng.randint(2, 4)
        topics = [f"t{i}" for i in range(n + 1)]
        procs = [([topics[i]], [topics[i + 1]]) for i in range(n)]
        return topics, [(topics[0],)], procs
    if shape == "diamond":
        topics = ["a", "b", "c", "d"]
        last_in = ["b", "c", "a"] if rng.random() < 0.6 else ["b", "c"]
        procs = [(["a"], ["b"]), (["a"], ["c"]), (last_in, ["d"])]
        return topics, [("a",)], procs
    if shape == "fan_in":
        topics = ["a", "b", "c", "d"]
        procs = [(["a"], ["c"]), (["b"], ["c"] if rng.random() < 0.5 else ["d"]),
                 (["a", "b", "c"], ["d"])]
        return topics, [("a",), ("b",)], procs
    if shape == "self_loop":
        topics = ["a", "b", "c"]
        second = rng.choice((["b", "c"], ["a", "c"], ["a", "b", "c"]))
        procs = [(["a", "b"], ["b", "c"]), (second, [])]
        return topics, [("a",)], procs
    # random: a few topics and processes, inputs drawn from anything, cycles allowed.
    n_topics = rng.randint(3, 6)
    topics = [f"r{i}" for i in range(n_topics)]
    n_sources = rng.randint(1, 2)
    source_topics = [(topics[i],) for i in range(n_sources)]
    procs = []
    for _ in range(rng.randint(2, 5)):
        inputs = rng.sample(topics, rng.randint(1, min(3, n_topics)))
        outputs = rng.sample(topics[n_sources:], rng.randint(0, min(2, n_topics - n_sources)))
        procs.append((inputs, outputs))
    for (source_topic,) in source_topics:  # every source is read by someone
        if not any(source_topic in inputs for inputs, _ in procs):
            rng.choice(procs)[0].append(source_topic)
    return topics, source_topics, procs


def generate(seed: int) -> Scenario:
    """Build the world for ``seed``; the same seed always gives the same world.

    Args:
        seed: any integer; seeds 1-300 are the CI sweep.

    Returns:
        A :class:`Scenario`.
    """
    rng = random.Random(seed)
    shape = SHAPES[rng.randrange(len(SHAPES))]
    names, source_topics, proc_edges = _shape_edges(rng, shape)
    topics: dict[str, TopicSpec] = {}
    for name in names:
        topic_id = UUID(int=rng.getrandbits(128) | 1)  # never the zero id
        partitions = rng.choice((1, 1, 2, 2, 3))
        topics[name] = TopicSpec(name, topic_id, partitions)
    sources = tuple(
        SourceSpec(name=f"src{i}", topic=st[0], messages=rng.randint(6, 30),
                   transactional=rng.random() < 0.5,
                   cause_rate=rng.choice((0.0, 0.0, 0.3)))
        for i, st in enumerate(source_topics)
    )
    processes = tuple(ProcessSpec(f"p{i}", tuple(inp), tuple(out))
                      for i, (inp, out) in enumerate(proc_edges))
    tasks: list[TaskSpec] = []
    for proc in processes:
        width = max(topics[t].partitions for t in proc.inputs)
        for i in range(width):
            received = tuple(ChannelId(topics[t].topic_id, i) for t in proc.inputs
                             if topics[t].partitions > i)
            tasks.append(TaskSpec(proc.name, i, received, proc.outputs))
    deletable: tuple[str, ...] = ()
    if rng.random() < 0.3:
        deletable = (rng.choice(sources).topic,)
    late: tuple[str, ...] = ()
    source_names = {s.topic for s in sources}
    downstream = [p.name for p in processes if not source_names & set(p.inputs)]
    if downstream and rng.random() < 0.3:  # a source reader starting late may see nothing
        late = (rng.choice(downstream),)
    base_offsets: dict[ChannelId, int] = {}
    if rng.random() < 0.3:
        for topic in topics.values():
            for ch in topic.channels():
                base_offsets[ch] = rng.choice((0, 2**31 - 3, rng.randrange(2**40, 2**50)))
    join: tuple[str, str] | None = None
    if rng.random() < 0.3:
        # A topic the process does not receive yet, no wider than the process
        # (a wider one would change the task count: TASK_WIDTH_CHANGED).
        # Preferably a topic upstream of the process (transitively), so its
        # delivered past names the topic and the join clamp has work to do.
        def upstream(proc: ProcessSpec) -> set[str]:
            found: set[str] = set()
            frontier = set(proc.inputs)
            while frontier:
                writers = [p for p in processes if set(p.outputs) & frontier]
                frontier = {t for p in writers for t in p.inputs} - found
                found |= frontier
            return found

        def candidates(proc: ProcessSpec, only_upstream: bool) -> list[TopicSpec]:
            width = max(topics[t].partitions for t in proc.inputs)
            ups = upstream(proc)
            return [t for t in topics.values() if t.name not in proc.inputs
                    and t.name not in deletable and t.partitions <= width
                    and (t.name in ups or not only_upstream)]

        joinable = [p for p in processes if candidates(p, True)]
        proc = rng.choice(joinable or list(processes))
        options = candidates(proc, bool(joinable))
        if options:
            join = (proc.name, rng.choice(options).name)
    return Scenario(
        seed=seed, shape=shape, topics=topics, sources=sources, processes=processes,
        tasks=tuple(tasks), max_depth=rng.randint(1, 3) if shape == "random" else rng.randint(2, 5),
        crash_rate=rng.choice((0.0, 0.1, 0.25)), restart_rate=rng.choice((0.0, 0.05, 0.15)),
        deletable=deletable, late=late, base_offsets=base_offsets,
        truncate=rng.random() < 0.3, join=join,
        budget_bytes=(encoded_size({ch: 0 for t in topics.values() for ch in t.channels()})
                      if rng.random() < 0.3 else None),
    )
