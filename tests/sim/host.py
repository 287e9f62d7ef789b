"""A simulated host for one task: it drives a ``ProcessEngine`` as a worker must.

The host keeps the host obligations (README.md, "The verification kit"):

* H1: within an execution each channel is fed in increasing offset order;
  which channel goes next is random, and nothing fetchable is withheld forever
  (the simulation keeps stepping a task while it has records to fetch).
* H2/H4: every execution starts with full initialisation: a store rebuilt
  from the committed changelog image only, ``bind_names``, ``apply_identity``
  with the broker's answers (sometimes only some of them: the rest stay
  pending, as after a timed-out check), then ``start`` with the committed read
  positions. The first execution's positions come from a bootstrap: the log
  start (EARLIEST), or the log end for a late process (LATEST).
* H3: a commit applies the engine's deltas (possibly taken several times
  during the step) to the changelog image, appends
  the step's sends as one committed transaction and advances the committed read
  positions, all at once. A crash discards all three (the sends become an
  aborted transaction, whose records still take offsets).
* H5: after a crash the next execution resumes from the last commit, so
  every uncommitted record is fed again.
* H6: a step belongs to one execution; the host refuses to commit a step of a
  superseded execution (an assertion: the simulation never tries).
* Read positions: a step commits the position past trailing markers and
  aborted records once nothing visible lies before the log end (as the worker
  commits its consumer's position, ``workers.offsets.positions_past_markers``),
  and every execution's initialisation applies the worker's and the
  bootstrap's position guards (``workers.positions``): ``ORDERING_STATE_LOST``
  for commits over an empty changelog partition; a commit Parsley did not make
  (a foreign consumer's) over state is overridden with coverage + 1, as the
  bootstrap does (``coordinator.bootstrap.positions.override_foreign_positions``).
  ``guards=False`` disables them (the sabotage that proves they are live).

The handler is a deterministic function of the delivered record and the
process (SPEC assumption 16): it sends 0-2 records to declared outputs, each
stamped with ``causes_header()`` taken right after its delivery.

Each task also keeps a declared store, as a worker does: it counts the task's
committed deliveries, and every commit writes the count to the task's store
changelog (:class:`StoreChangelog`) in the same transaction. Every execution
judges the store changelog before restoring from it, with the worker's rule
(``workers.store_changelogs.judge_store_changelog``), and binds its name to its
topic id; a restored count other than the committed deliveries is ``S1``, a
store silently reset. A world may lose the changelog (``world.run``'s
``store_loss``); with ``store_guard`` off (the sabotage) the rule is skipped.

With ``running_check`` on (``world.run``'s ``illegal_delete``), every step of a
running execution first makes the worker's running identity check of the
received topics (``workers.identity.apply_received_verdicts``), as the worker's
status punctuation does: a received topic deleted while messages from it are held
is refused ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` there, not at a later start.
"""

from __future__ import annotations

import hashlib
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import TopicVerdict
from parsley.engine.feed import FeedOutcome
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError
from parsley.wire import CAUSES_HEADER, decode_causes
from workers.admin import TopicInfo
from workers.identity import apply_received_verdicts
from workers.offsets import offset_reset_refusal, positions_past_markers
from workers.positions import (
    BOOTSTRAP_METADATA,
    TASK_METADATA,
    foreign_positions,
    lost_positions,
    ordering_state_lost,
)
from workers.store_changelogs import judge_store_changelog

from .broker import Broker, Outgoing, at
from .generator import Scenario, TaskSpec
from .oracle import V2_DUP, X1, Body, Delivered, Oracle, Sent, Violation

__all__ = ["S1", "Clock", "StoreChangelog", "TaskHost", "handler_sends"]

S1 = "S1 store state kept"
"""A restored store holds every committed step's writes (docs/failing-closed.md,
"Store changelogs")."""
_COUNT = b"count"


@dataclass(slots=True)
class StoreChangelog:
    """A task's store changelog partition: its topic id, latest value per key, log start.

    ``exists`` is False once deleted; a start recreates it (a new incarnation).
    """

    name: str
    incarnation: int = 0
    exists: bool = True
    log_start: int = 0
    log_end: int = 0
    records: dict[bytes, bytes] = field(default_factory=dict)

    @property
    def topic_id(self) -> uuid.UUID:
        """The incarnation's topic id (deterministic: the same seed replays exactly)."""
        return uuid.uuid5(uuid.NAMESPACE_URL, f"{self.name}/{self.incarnation}")

    def write(self, key: bytes, value: bytes) -> None:
        """Append one record (in the committing transaction)."""
        self.records[key] = value
        self.log_end += 1

    def lose(self, how: str) -> None:
        """``delete`` (absent), ``recreate`` (empty, another id) or ``purge`` (records
        deleted below the log end: the log start moves)."""
        self.records.clear()
        if how == "delete":
            self.exists = False
        elif how == "recreate":
            self.incarnation += 1
            self.log_start = self.log_end = 0
        else:
            self.log_start = self.log_end


@dataclass(slots=True)
class Clock:
    """The simulation's record-timestamp source: strictly increasing ms."""

    now_ms: int = 1_700_000_000_000

    def tick(self) -> int:
        """Advance one millisecond and return the new time."""
        self.now_ms += 1
        return self.now_ms


def _digest(*parts: bytes) -> bytes:
    return hashlib.blake2b(b"\x00".join(parts), digest_size=16).digest()


def handler_sends(process: str, value: bytes, outputs: tuple[str, ...],
                  scenario: Scenario) -> list[tuple[str, int, bytes, bytes, tuple[Any, ...]]]:
    """The deterministic handler: what a process sends for one delivered value.

    A value is ``<hex id>:<depth>``; nothing is sent at ``scenario.max_depth``
    hops, so cycles end. Each send gets a fresh id derived from the parent's.

    Returns:
        ``(topic, partition, key, value, app_headers)`` per send, 0-2 of them.
    """
    if not outputs:
        return []
    depth = int(value.rpartition(b":")[2])
    h = _digest(process.encode(), value)
    if depth >= scenario.max_depth:
        return []
    count = (0, 0, 0, 1, 1, 1, 1, 2)[h[0] % 8]
    sends = []
    for k in range(count):
        topic = outputs[h[1 + k] % len(outputs)]
        partition = h[3 + k] % scenario.topics[topic].partitions
        child = _digest(h, bytes([k])).hex()[:12]
        key = None if h[5 + k] % 4 == 0 else b"k" + child[:4].encode()
        app_headers: tuple[Any, ...] = (("hop", bytes([depth + 1])),) if h[7 + k] % 2 else ()
        sends.append((topic, partition, key, f"{child}:{depth + 1}".encode(), app_headers))
    return sends


@dataclass(slots=True)
class _Step:
    deliveries: list[Delivered] = field(default_factory=list)
    sends: list[tuple[Outgoing, int]] = field(default_factory=list)  # (send, trigger index)
    deltas: list[tuple[bytes, bytes | None]] = field(default_factory=list)  # taken, uncommitted


class TaskHost:
    """One task's host: committed image, committed positions, and the live execution.

    Args:
        spec: the task.
        scenario: the world (for topic specs and the handler's depth bound).
        engine_cls: the engine class to build (``ProcessEngine`` or a sabotaged one).
        broker: the simulated broker.
        oracle: receives every committed step.
        clock: record timestamps.
        log: appends one line per event (the replay trace shown on failure).
        guards: apply the read-position guards at each initialisation.
        markers: commit positions past trailing markers and aborted records.
    """

    def __init__(self, spec: TaskSpec, scenario: Scenario, engine_cls: type[Any],
                 broker: Broker, oracle: Oracle, clock: Clock,
                 log: Callable[[str], None], *, guards: bool = True,
                 markers: bool = True) -> None:
        self.guards = guards
        self.markers = markers
        # Commit metadata per committed position: the bootstrap's, a step's
        # (TASK_METADATA), or "" (a foreign consumer's).
        self.metadata: dict[ChannelId, str] = {}
        self.overrides = 0  # foreign commits the guard replaced with coverage + 1
        self.commits = 0
        self.spec = spec
        self.scenario = scenario
        self.inputs = next(p.inputs for p in scenario.processes if p.name == spec.process)
        self.received: tuple[ChannelId, ...] = spec.received
        self.engine_cls = engine_cls
        self.broker = broker
        self.oracle = oracle
        self.clock = clock
        self.log = log
        self.image: dict[bytes, bytes | None] = {}  # compacted committed changelog
        self.committed: dict[ChannelId, int] = {}  # set by the bootstrap, first execution
        self.engine: Any = None
        self.epoch = 0
        self.fetch: dict[ChannelId, int] = {}
        self.executions = 0
        self.crashes = 0
        self.warnings: list[str] = []
        self.replay_below: dict[ChannelId, int] = {}
        self.violations: list[Violation] = []
        self.replays = 0
        self.rng = random.Random(f"{scenario.seed}/{spec.name}")
        self.weights: dict[ChannelId, float] = {}
        # Figures only, never judged: held messages summed over feeds, and commits
        # that leave something held (what makes a crash test the hold-back state).
        self.holds = 0
        self.deleted_verdicts = 0  # executions told a received topic is gone
        self.delivered = 0  # committed deliveries
        self.held_commits = 0
        self.cross_expected = 0  # this execution's records with a cross-partition cause
        self.cross_seen = 0  # figures only: over every execution
        self.upstream_deleted_verdicts = 0  # executions told an upstream topic is gone
        self.store = StoreChangelog(f"sim-{spec.name}-counts-changelog")
        self.store_guard = True
        self.running_check = False

    @property
    def name(self) -> str:
        """The task's name, ``<process>#<index>``."""
        return self.spec.name

    # ---- executions -----------------------------------------------------

    def start_execution(self) -> None:
        """H2/H4: rebuild the engine from the committed image only and start it."""
        if self.executions == 0:
            self._bootstrap()
        store = InMemoryOrderingStore.from_records(self.image.items())
        budget = {} if self.scenario.budget_bytes is None else {
            "budget_bytes": self.scenario.budget_bytes}
        engine = self.engine_cls(store, received=self.received,
                                 on_warning=self.warnings.append, **budget)
        wanted = set(self.inputs) | set(self.spec.outputs)
        live = self.broker.live_names()
        self._restore_store(engine.names())
        engine.bind_names({n: live[n] for n in sorted(wanted) if n in live}
                          | {self.store.name: self.store.topic_id})
        named = set(engine.names().values())
        verdicts = {}
        for topic_id in engine.known_topic_ids():
            if self.broker.exists(topic_id):
                verdicts[topic_id] = TopicVerdict.ALIVE
            elif topic_id in named:
                verdicts[topic_id] = TopicVerdict.DELETED
            # an id never named cannot be judged: it stays pending (docs/model.md, "Pruning").
        if self.rng.random() < 0.15:  # the check timed out for some ids: left pending
            verdicts = {k: v for k, v in verdicts.items() if self.rng.random() < 0.5}
        engine.apply_identity(verdicts)
        # Names of upstream ids are learned while alive, so a later deletion prunes them.
        engine.learn_names(live)
        if self.guards:
            self._check_positions(engine)
        received_ids = {ch.topic_id for ch in self.received}
        self.deleted_verdicts += sum(1 for tid, v in verdicts.items()
                                     if v is TopicVerdict.DELETED and tid in received_ids)
        self.upstream_deleted_verdicts += sum(
            1 for tid, v in verdicts.items()
            if v is TopicVerdict.DELETED and tid not in received_ids)
        engine.start(dict(self.committed))
        self.engine = engine
        self.cross_expected = 0
        self.epoch += 1
        self.executions += 1
        self.fetch = dict(self.committed)
        self.replay_below = dict(self.committed)
        # Each execution favours some channels, so others lag (H1 allows any
        # interleaving across channels); lagging is what makes messages wait.
        self.weights = {ch: self.rng.choice((0.02, 0.2, 1.0)) for ch in self.received}
        self.log(f"{self.name} start epoch={self.epoch} at {self._positions(self.committed)} "
                 f"verdicts={ {str(k)[:8]: v.name for k, v in verdicts.items()} }")

    def _check_positions(self, engine: Any) -> None:
        """The worker's and the bootstrap's read-position guards (``workers.positions``).

        A commit Parsley did not make, over state, is replaced by coverage + 1 (0 for a
        channel never covered), with the bootstrap's metadata, and counted in
        ``overrides``.

        Raises:
            ParsleyFailClosedError: ``ORDERING_STATE_LOST`` (committed positions
                over a changelog image with no records).
        """
        channels = {(str(ch.topic_id), ch.partition): ch for ch in self.committed}
        committed = {key: (self.committed[ch], self.metadata.get(ch, BOOTSTRAP_METADATA))
                     for key, ch in channels.items()}
        if not self.image:
            suspects = lost_positions(committed, None)
            if suspects:
                raise ordering_state_lost(suspects[0], f"{self.name}.changelog", True,
                                          self.spec.process)
            return
        covered = {key: engine.covered(ch) for key, ch in channels.items()
                   if channels[key].topic_id not in self.broker.deleted}
        for found in foreign_positions(committed, covered):
            ch = channels[(found.topic, found.partition)]
            resume = 0 if found.covered is None else found.covered + 1
            self.log(f"{self.name} OVERRIDE foreign commit {at(ch, found.committed)} -> "
                     f"{resume}")
            self.committed[ch] = resume
            self.metadata[ch] = BOOTSTRAP_METADATA
            self.overrides += 1

    def _check_retained(self) -> None:
        """The fetch under ``auto.offset.reset=error``: a position below the log start is
        ``POSITIONS_DISCARDED_UNREAD`` (``workers.offsets.offset_reset_refusal``).

        Raises:
            ParsleyFailClosedError: ``POSITIONS_DISCARDED_UNREAD``.
        """
        for ch in self.received:
            start = self.broker.log_start(ch)
            if ch.topic_id not in self.broker.deleted and self.fetch[ch] < start:
                refusal = offset_reset_refusal(str(ch.topic_id), ch.partition, self.fetch[ch],
                                               start, self.broker.end_offset(ch))
                assert isinstance(refusal, ParsleyFailClosedError)
                raise refusal

    def _restore_store(self, bound: Any) -> None:
        """Judge the store changelog (the worker's rule), then restore the count from it.

        Raises:
            ParsleyFailClosedError: ``ORDERING_STATE_LOST`` for a bound changelog found
                absent, recreated or purged (unless the guard is sabotaged).
        """
        store = self.store
        found = (TopicInfo(store.name, store.topic_id, 1, "compact", 1 << 20)
                 if store.exists else None)
        if self.store_guard:
            refusal = judge_store_changelog(store.name, bound.get(store.name), found, 1,
                                            {0: store.log_start}, app_id=self.spec.process)
            if refusal is not None:
                raise refusal
        if not store.exists:  # the start creates it where absent
            store.exists, store.incarnation = True, store.incarnation + 1
            store.log_start = store.log_end = 0
        restored = int(store.records.get(_COUNT, b"0"))
        if restored != self.delivered:
            self.violations.append(Violation(
                S1, f"{self.name}: the store restored count={restored} from {store.name} "
                    f"(incarnation {store.incarnation}, log start {store.log_start}) but "
                    f"{self.delivered} deliveries were committed: the store was silently reset"))

    def _check_received(self) -> bool:
        """The running identity check of the received topics; True when it stopped the
        execution (a deleted topic with nothing held: settled, and the worker stops).

        Raises:
            ParsleyFailClosedError: ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``.
        """
        names = {t.topic_id: n for n, t in self.scenario.topics.items()}
        channels = {f"{names[ch.topic_id]}/{ch.partition}": ch for ch in self.received}
        verdicts = {ch.topic_id: (TopicVerdict.ALIVE if self.broker.exists(ch.topic_id)
                                  else TopicVerdict.DELETED) for ch in self.received}
        if apply_received_verdicts(self.engine, verdicts, channels) is None:
            return False
        self.stop()
        return True

    def _bootstrap(self) -> None:
        # Java's bootstrap commits the start positions before the first
        # execution: the log start (EARLIEST), or the log end for a late process (LATEST).
        if self.spec.process in self.scenario.late:
            self.committed = {ch: self.broker.end_offset(ch) for ch in self.received}
        else:
            self.committed = {ch: self.broker.log_start(ch) for ch in self.received}
        self.metadata = dict.fromkeys(self.committed, BOOTSTRAP_METADATA)
        self.oracle.on_start(self.name, self.committed)

    def join(self) -> None:
        """The declaration gains the scenario's join topic; takes effect at the next start.

        The new channels have no committed read position, so they start at the
        log start (EARLIEST); the engine covers what its delivered past names.
        """
        gained = self.scenario.join_channels(self.spec)
        assert self.executions > 0, "a join is a change to a running task's declaration"
        self.received = self.received + gained
        self.inputs = (*self.inputs, self.scenario.join[1]) if self.scenario.join else self.inputs
        for ch in gained:
            self.committed[ch] = self.broker.log_start(ch)
            self.metadata[ch] = BOOTSTRAP_METADATA
        self.oracle.on_join(self.name, {ch: self.committed[ch] for ch in gained})
        self.stop()
        self.log(f"{self.name} JOIN {[at(ch, self.committed[ch]) for ch in gained]}")

    def rewind(self, rng: random.Random) -> None:
        """Re-fetch some records below the start positions (a replay of committed input).

        Everything below a start position lies at or below the session floor,
        so the engine must drop each such feed silently (docs/model.md, "The
        session floor", case 4); an accepted one is reported as ``V2 duplicate``.
        """
        for ch in self.received:
            start = self.committed[ch]
            earliest = self.broker.log_start(ch)
            if start > earliest and ch.topic_id not in self.broker.deleted and rng.random() < 0.5:
                self.fetch[ch] = max(earliest, start - rng.randint(1, 6))

    def stop(self) -> None:
        """A clean stop: the next step starts a new execution from committed state."""
        self.engine = None

    def _positions(self, positions: dict[ChannelId, int]) -> str:
        return ",".join(f"{str(c.topic_id)[:4]}-{c.partition}:{p}"
                        for c, p in sorted(positions.items()))

    # ---- fetching ----------------------------------------------------------

    def fetchable(self) -> list[ChannelId]:
        """Received channels holding a committed record at or past the fetch position."""
        if self.engine is None:
            return []
        # A position below the log start is fetchable too: the fetch refuses it
        # (:meth:`_check_retained`).
        return [ch for ch in self.received
                if (self.fetch[ch] < self.broker.log_start(ch)
                and ch.topic_id not in self.broker.deleted)
                or self.broker.fetch(ch, self.fetch[ch]) is not None]

    def needs_step(self) -> bool:
        """Whether stepping this task could make progress (H1: never withhold)."""
        return self.engine is None or bool(self.fetchable())

    # ---- one step ------------------------------------------------------------

    def step(self, rng: random.Random) -> None:
        """Fetch and feed a few records, deliver everything deliverable, then commit or crash.

        Raises:
            ParsleyFailClosedError: the engine refused (the simulation reports it).
        """
        if self.engine is None:
            self.start_execution()
            if rng.random() < 0.2:
                self.rewind(rng)
        elif self.running_check and self._check_received():
            return
        self._check_retained()
        engine = self.engine
        epoch = self.epoch
        step = _Step()
        for _ in range(rng.randint(1, 6)):
            channels = self.fetchable()
            if not channels:
                break
            ch = rng.choices(channels, [self.weights[c] for c in channels])[0]
            record = self.broker.fetch(ch, self.fetch[ch])
            assert record is not None
            outcome = engine.receive(record.as_received())
            if outcome is FeedOutcome.ACCEPTED:
                self._check_cross_partition(record.as_received())
            if record.offset < self.replay_below[ch]:
                self.replays += 1
                if outcome is not FeedOutcome.DUPLICATE_DROPPED:
                    self.violations.append(Violation(
                        V2_DUP, f"{self.name}: replay of {ch}@{record.offset}, below the start "
                                f"position {self.replay_below[ch]}, was {outcome} instead of "
                                "dropped (docs/model.md, session floor)"))
            self.fetch[ch] = record.offset + 1
            if rng.random() < 0.5:
                self._drain(step)
            if rng.random() < 0.2:  # deltas may be taken several times before one commit
                step.deltas.extend(engine.take_deltas())
        self._drain(step)
        self._skip_trailing_markers(rng)
        if rng.random() < self.scenario.crash_rate:
            self._crash(step)
        else:
            self._commit(step, epoch)

    def _check_cross_partition(self, msg: ReceivedMessage) -> None:
        """X1: the engine reports every cause it cannot enforce (the host's own count)."""
        raw = next((v for k, v in msg.headers if k == CAUSES_HEADER), None)
        topics = {ch.topic_id for ch in self.received}
        if raw is not None and any(c.topic_id in topics and c not in self.received
                                   for c in decode_causes(raw)):
            self.cross_expected += 1
            self.cross_seen += 1
        reported = self.engine.cross_partition_causes()
        if reported != self.cross_expected:
            self.violations.append(Violation(
                X1, f"{self.name}: {self.cross_expected} record(s) of this execution carried a "
                    f"cause on another task's partition of a received topic, the engine "
                    f"reported {reported} (last {at(msg.channel, msg.position)})"))
            self.cross_expected = reported

    def _drain(self, step: _Step) -> None:
        engine = self.engine
        while (msg := engine.deliver_next()) is not None:
            body = Body(msg.timestamp_ms, msg.key, msg.value, tuple(msg.headers))
            trigger = len(step.deliveries)
            step.deliveries.append(Delivered(msg.channel, msg.position, body, dict(msg.causes)))
            for topic, partition, key, value, app in handler_sends(
                    self.spec.process, msg.value, self.spec.outputs, self.scenario):
                channel = ChannelId(self.scenario.topics[topic].topic_id, partition)
                headers = (*app, (CAUSES_HEADER, engine.causes_header()))
                out = Outgoing(channel, self.clock.tick(), key, value, headers)
                step.sends.append((out, trigger))
        self.holds += engine.held_count()

    def _skip_trailing_markers(self, rng: random.Random) -> None:
        # A consumer's position moves past markers and aborted records once it
        # has seen there is nothing visible before the log end (V4, V6).
        # The position is the consumer's; which of them a commit takes is the worker's
        # rule (workers.offsets.positions_past_markers). Sabotaged (markers=False), the
        # host commits the last fed offset + 1 only.
        position = {}
        for ch in self.received:
            if (self.broker.fetch(ch, self.fetch[ch]) is None
                    and ch.topic_id not in self.broker.deleted and self.markers):
                position[ch] = self.broker.end_offset(ch)
        self.fetch.update(positions_past_markers(position, self.fetch))

    def _commit(self, step: _Step, epoch: int) -> None:
        assert epoch == self.epoch, f"H6: {self.name} committing a superseded execution"
        deltas = step.deltas + list(self.engine.take_deltas())
        if self.engine.held_count():
            self.held_commits += 1
        for key, value in deltas:
            self.image[key] = value
        records = self.broker.transaction([out for out, _ in step.sends], commit=True)
        for ch, pos in self.fetch.items():
            if self.committed.get(ch) != pos:
                self.metadata[ch] = TASK_METADATA
        self.committed = dict(self.fetch)
        self.commits += 1
        sends = []
        for rec, (_, trigger) in zip(records, step.sends, strict=True):
            app = tuple(h for h in rec.headers if h[0] != CAUSES_HEADER)
            raw = next(v for k, v in rec.headers if k == CAUSES_HEADER)
            sends.append(Sent(rec.channel, rec.offset,
                              Body(rec.timestamp_ms, rec.key, rec.value, app), trigger,
                              decode_causes(raw)))
        self.oracle.on_commit(self.name, step.deliveries, sends)
        self.delivered += len(step.deliveries)
        if step.deliveries:
            self.store.write(_COUNT, b"%d" % self.delivered)
        self.log(f"{self.name} commit delivered="
                 f"{[at(d.channel, d.position) for d in step.deliveries]} "
                 f"sent={[at(r.channel, r.offset) for r in records]} "
                 f"deltas={len(deltas)} positions={self._positions(self.committed)}")

    def _crash(self, step: _Step) -> None:
        self.broker.transaction([out for out, _ in step.sends], commit=False)
        self.engine = None
        self.crashes += 1
        self.log(f"{self.name} CRASH discarding {len(step.deliveries)} deliveries, "
                 f"{len(step.sends)} sends")
