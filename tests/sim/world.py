"""One seeded simulation: sources, tasks, crashes, deletion, run to quiescence, then judge.

``run(seed)`` builds the scenario for ``seed``, then repeatedly picks one
enabled action at random (a source sends a batch, a task steps, an eligible
topic is deleted, retention truncates a log below every receiver's committed
read position) until nothing is enabled. It then restarts every task from
its committed state and steps it once more, repeating until a whole round
makes no progress, and asks the oracle whether everything received was
delivered (V5). The schedule draws from its own ``random.Random``, so the
same seed replays the same run with the same engine.
"""

from __future__ import annotations

import hashlib
import random
import traceback
from dataclasses import dataclass, field
from typing import Any

from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.engine.state_codec import load_image
from parsley.refusals import ParsleyFailClosedError
from parsley.wire import CAUSES_HEADER, EMPTY_CAUSES, encode_causes
from workers.positions import BOOTSTRAP_METADATA

from .broker import Broker, Outgoing, at
from .generator import Scenario, SourceSpec, generate
from .host import Clock, TaskHost
from .oracle import Body, Oracle, Violation

__all__ = ["SimResult", "run"]

REFUSED = "refused in a legal world"
D1 = "D1 deletion noticed while running"
"""A received topic deleted while a running task holds messages from it is refused at
the task's next punctuation (docs/failing-closed.md)."""
ENGINE_ERROR = "engine error"
NO_QUIESCENCE = "V5 liveness (no quiescence)"
TRACE_TAIL = 200


@dataclass(frozen=True, slots=True)
class SimResult:
    """The outcome of one seed: its scenario, what broke, figures and the event trace."""

    scenario: Scenario
    violations: tuple[Violation, ...]
    stats: dict[str, int]
    trace: tuple[str, ...] = field(repr=False)  # the last TRACE_TAIL events
    trace_digest: str = ""  # SHA-1 of every event, for replay checks

    @property
    def failed(self) -> bool:
        """Whether any clause broke."""
        return bool(self.violations)

    def clauses(self) -> set[str]:
        """The broken clauses' names."""
        return {v.clause for v in self.violations}

    def report(self, tail: int = 60) -> str:
        """A replayable failure description: scenario, violations, last trace lines."""
        lines = [self.scenario.describe(), f"stats={self.stats}"]
        lines += [f"  {v}" for v in self.violations[:10]]
        lines += ["  trace (last events):"] + [f"    {t}" for t in self.trace[-tail:]]
        return "\n".join(lines)


class _Source:
    """An external producer: no Parsley engine, causes only from what it has read."""

    def __init__(self, spec: SourceSpec, scenario: Scenario, broker: Broker, oracle: Oracle,
                 clock: Clock, log: Any) -> None:
        self.spec = spec
        self.channels = scenario.topics[spec.topic].channels()
        self.broker = broker
        self.oracle = oracle
        self.clock = clock
        self.log = log
        self.remaining = spec.messages
        self.seq = 0

    def _observe(self, rng: random.Random) -> dict[ChannelId, int]:
        # Read some live channel up to one of its committed records.
        if rng.random() >= self.spec.cause_rate:
            return {}
        candidates = [ch for ch, log in self.broker.logs.items()
                      if log.visible and ch.topic_id not in self.broker.deleted]
        if not candidates:
            return {}
        ch = rng.choice(sorted(candidates))
        return {ch: rng.choice(self.broker.logs[ch].visible).offset}

    def step(self, rng: random.Random) -> None:
        batch: list[tuple[Outgoing, dict[ChannelId, int]]] = []
        for _ in range(rng.randint(1, min(3, self.remaining))):
            observed = self._observe(rng)
            past = self.oracle.observed_past(observed)
            headers: tuple[Any, ...] = (("origin", self.spec.name.encode()),)
            if past:
                headers += ((CAUSES_HEADER, encode_causes(past)),)
            elif rng.random() < 0.3:
                headers += ((CAUSES_HEADER, EMPTY_CAUSES),)
            value = f"{self.spec.name}-{self.seq}:0".encode()
            self.seq += 1
            out = Outgoing(rng.choice(self.channels), self.clock.tick(), b"s", value, headers)
            batch.append((out, observed))
        commit = not self.spec.transactional or rng.random() < 0.85
        if self.spec.transactional:
            records = self.broker.transaction([o for o, _ in batch], commit=commit)
        else:
            records = [self.broker.produce(o) for o, _ in batch]
        if commit:
            self.remaining -= len(batch)
            for rec, (_, observed) in zip(records, batch, strict=True):
                app = tuple(h for h in rec.headers if h[0] != CAUSES_HEADER)
                self.oracle.on_source_record(
                    rec.channel, rec.offset, Body(rec.timestamp_ms, rec.key, rec.value, app),
                    observed)
        self.log(f"{self.spec.name} {'commit' if commit else 'ABORT'} "
                 f"{[at(r.channel, r.offset) for r in records]}")


def _engine_class() -> type[Any]:
    from tests.engines import current_engine
    return current_engine()


FOREIGN_COMMIT = "foreign commit"
"""A fault: a consumer outside Parsley in a task's group reads some visible records
and commits past them while the task is stopped, or (one time in four) an offset
reset moves the task's position back below what it covers."""
EMPTIED_CHANGELOG = "emptied changelog"
"""A fault: a task's ordering-changelog partition is emptied (its records purged)
under the live process; the task then rebuilds (a crash respawn)."""
FAULTS = (FOREIGN_COMMIT, EMPTIED_CHANGELOG)


def _inject(fault: str, hosts: list[TaskHost], broker: Broker, rng: random.Random) -> str | None:
    """Inject ``fault`` into one eligible task; returns what was done, or ``None`` (none yet)."""
    ready = [h for h in hosts if h.commits > 0]
    rng.shuffle(ready)
    for h in ready:
        if fault == EMPTIED_CHANGELOG:
            if h.image and any(m != BOOTSTRAP_METADATA for m in h.metadata.values()):
                h.image.clear()
                h.stop()
                return f"EMPTY changelog of {h.name}"
            continue
        fed = load_image(sorted((k, v) for k, v in h.image.items() if v is not None)).fed
        if rng.random() < 0.25:  # a rewind: kafka-consumer-groups --reset-offsets back
            for ch in sorted(h.committed):
                covered = fed.get(ch)
                start = broker.log_start(ch)
                if covered is None or covered == FED_TO_END or covered < start:
                    continue
                h.committed[ch] = rng.randint(start, covered)
                h.metadata[ch] = ""
                h.stop()
                return f"FOREIGN rewind {h.name} {at(ch, covered + 1)} -> {h.committed[ch]}"
        for ch in sorted(h.committed):
            # Past what the task covers: a rewound commit may lie below its coverage.
            pos = max(h.committed[ch], fed.get(ch, -1) + 1)
            if pos < broker.log_start(ch) or fed.get(ch) == FED_TO_END:
                continue
            first = broker.fetch(ch, pos)
            if first is None:
                continue
            ahead = broker.fetch(ch, first.offset + 1) if rng.random() < 0.5 else None
            last = ahead if ahead is not None else first
            h.committed[ch] = last.offset + 1
            h.metadata[ch] = ""
            h.stop()
            return f"FOREIGN commit {h.name} {at(ch, pos)} -> {last.offset + 1}"
    return None


def run(seed: int, engine_cls: type[Any] | None = None, *, max_ticks: int = 20_000,
        max_deliveries: int = 20_000, guards: bool = True, markers: bool = True,
        fault: str | None = None, store_loss: str | None = None,
        store_guard: bool = True, illegal_delete: bool = False,
        deletion_check: bool = True) -> SimResult:
    """Simulate the world of ``seed`` with ``engine_cls`` and judge it with the oracle.

    Args:
        seed: the scenario and schedule seed (the same seed replays exactly).
        engine_cls: the engine to test; the real ``ProcessEngine`` by default.
        max_ticks: scheduler actions before the run counts as not quiescing (V5).
        max_deliveries: committed deliveries before the run counts as a runaway
            (V5); sound runs stay far below (the sweep's largest is ~3,000).
        guards: the hosts apply the read-position guards (``False``: the sabotage
            that proves them live).
        markers: the hosts commit past trailing markers (``False``: the sabotage
            that leaves a committed position at a marker, which an emptied quiet
            partition then reports discarded unread).
        fault: one of :data:`FAULTS`, injected once into a task that has
            committed (``stats["faults"]`` says whether it was): the guards must
            override a foreign commit (``stats["overrides"]``) so that the oracle
            finds nothing, and refuse an emptied changelog by name.
        store_loss: ``None`` (a legal world), or how one task's store changelog
            is lost once that task has committed a delivery: ``"delete"``,
            ``"recreate"`` or ``"purge"`` (:meth:`tests.sim.host.StoreChangelog.lose`).
            The task is stopped at once, so its next step rebuilds from it; the
            right outcome is ``ORDERING_STATE_LOST`` (a ``refused`` violation).
        store_guard: ``False`` skips the store-changelog rule (the sabotage:
            the loss must then show as ``S1``).
        illegal_delete: once, delete a received topic from which a running task
            holds messages (breaching the deletion hygiene), then step that task
            at once (its next punctuation); the right outcome is
            ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` at that step.
        deletion_check: ``False`` skips the running check (the sabotage: the
            step after the deletion runs on and is reported ``D1``).

    Returns:
        A :class:`SimResult`; an engine refusal or exception is a violation
        (``refused in a legal world`` / ``engine error``), not a raise.
    """
    scenario = generate(seed)
    engine_cls = engine_cls or _engine_class()
    rng = random.Random(seed * 1_000_003 + 17)
    trace: list[str] = []
    broker = Broker(scenario.topics.values(), scenario.base_offsets)
    oracle = Oracle({t.name: t.received for t in scenario.tasks})
    joiners = [t.name for t in scenario.tasks if scenario.join_channels(t)]
    clock = Clock()
    hosts = [TaskHost(t, scenario, engine_cls, broker, oracle, clock, trace.append,
                      guards=guards, markers=markers)
             for t in scenario.tasks]
    injected = 0
    for h in hosts:
        h.store_guard = store_guard
        h.running_check = illegal_delete and deletion_check
    store_lost = store_loss is None
    illegally_deleted = not illegal_delete
    sources = [_Source(s, scenario, broker, oracle, clock, trace.append)
               for s in scenario.sources]
    pending_deletes = list(scenario.deletable)
    # Some tasks run slowly, so their input backs up and channels drift apart.
    speed = {h.name: rng.choice((0.1, 0.4, 1.0)) for h in hosts}
    extra: list[Violation] = []

    def eligible(topic: str) -> bool:
        # SPEC assumption 17: no obligations left on the channel.
        if any(s.remaining for s in sources if s.spec.topic == topic):
            return False
        chans = set(scenario.topics[topic].channels())
        return all(oracle.delivered_all(h.name, ch)
                   for h in hosts for ch in h.received if ch in chans)

    def delete(topic: str) -> None:
        broker.delete_topic(topic)
        oracle.on_delete(scenario.topics[topic].topic_id)
        pending_deletes.remove(topic)
        trace.append(f"DELETE topic {topic} ({scenario.topics[topic].topic_id})")
        for h in hosts:
            if rng.random() < 0.7:
                h.stop()

    receivers: dict[ChannelId, list[TaskHost]] = {}
    for h in hosts:
        for ch in h.received + scenario.join_channels(h.spec):
            receivers.setdefault(ch, []).append(h)
    truncations = 0

    def stability_bound(ch: ChannelId) -> int:
        # V7: below every receiver's committed read position, nobody will read again.
        readers = receivers.get(ch, [])
        if any(h.executions == 0 for h in readers):
            return broker.log_start(ch)  # a reader yet to start reads from the log start
        if any(ch not in h.committed for h in readers):
            return broker.log_start(ch)  # a joiner yet to join reads from the log start
        return min((h.committed[ch] for h in readers), default=broker.end_offset(ch))

    def truncatable() -> list[ChannelId]:
        if not scenario.truncate:
            return []
        return [ch for ch in sorted(broker.logs)
                if ch.topic_id not in broker.deleted
                and stability_bound(ch) > broker.log_start(ch)]

    def quiet(ch: ChannelId) -> bool:
        # Retention may empty a partition whose last record every reader has read and
        # whose last transaction committed (log start = log end = last marker + 1).
        log = broker.logs[ch]
        readers = receivers.get(ch, [])
        if (not scenario.truncate or ch.topic_id in broker.deleted
                or log.kinds[-2:] != ["D", "M"] or log.log_start == log.end_offset
                or any(h.executions == 0 or ch not in h.committed for h in readers)):
            return False
        last = log.end_offset - 2
        return all(h.committed[ch] > last and (h.engine is None or h.fetch[ch] > last)
                   for h in readers)

    def empty(ch: ChannelId) -> None:
        nonlocal truncations
        broker.truncate(ch, broker.end_offset(ch))
        truncations += 1
        trace.append(f"EMPTY quiet {at(ch, broker.end_offset(ch))}")

    def truncate(ch: ChannelId) -> None:
        nonlocal truncations
        point = rng.randint(broker.log_start(ch) + 1, stability_bound(ch))
        broker.truncate(ch, point)
        truncations += 1
        trace.append(f"TRUNCATE {at(ch, point)}")

    def progress() -> int:
        return oracle.deliveries + sum(len(log.kinds) for log in broker.logs.values())

    ticks = 0
    try:
        while True:
            ticks += 1
            if ticks > max_ticks:
                extra.append(Violation(NO_QUIESCENCE, f"still busy after {max_ticks} actions"))
                break
            if oracle.deliveries > max_deliveries:
                # A broken engine can re-deliver around a cycle forever; stop it early.
                extra.append(Violation(NO_QUIESCENCE, f"runaway: over {max_deliveries} "
                                                      "deliveries"))
                break
            actions: list[tuple[str, Any]] = []
            actions += [("source", s) for s in sources if s.remaining]
            actions += [("task", h) for h in hosts if h.needs_step()]
            actions += [("delete", t) for t in pending_deletes if eligible(t)]
            if not store_lost and rng.random() < 0.05:
                actions += [("lose", h) for h in hosts if h.delivered > 0]
            if not illegally_deleted and rng.random() < 0.05:
                actions += [("illegal_delete", (h, ch)) for h in hosts if h.engine is not None
                            for ch in h.received if h.engine.held_count(ch) > 0
                            and ch.topic_id not in broker.deleted]
            if rng.random() < 0.05:
                actions += [("truncate", ch) for ch in truncatable()]
                actions += [("empty", ch) for ch in sorted(broker.logs) if quiet(ch)]
            if fault is not None and not injected and rng.random() < 0.05:
                done = _inject(fault, hosts, broker, rng)
                if done is not None:
                    injected = 1
                    trace.append(done)
            if joiners and rng.random() < 0.05:
                # Once its process has delivered a few; all its tasks join at once.
                ready = [h for h in hosts if h.name in joiners and h.executions > 0]
                if len(ready) == len(joiners) and sum(h.delivered for h in ready) >= 3:
                    actions.append(("join", ready))
            if actions:
                weights = [speed[actor.name] if kind == "task" else 1.0
                           for kind, actor in actions]
                kind, actor = rng.choices(actions, weights)[0]
                if kind == "illegal_delete":
                    host, ch = actor
                    name = next(n for n, t in scenario.topics.items()
                                if t.topic_id == ch.topic_id)
                    held = host.engine.held_count(ch)
                    broker.delete_topic(name)
                    oracle.on_delete(ch.topic_id)
                    illegally_deleted = True
                    trace.append(f"ILLEGAL DELETE topic {name} while {host.name} holds {held} "
                                 f"on {ch}")
                    host.step(rng)  # its next punctuation: must refuse here
                    extra.append(Violation(D1, f"{host.name} stepped on after {name} was deleted "
                                               f"while it held {held} message(s) from {ch}"))
                    continue
                if kind == "source":
                    actor.step(rng)
                elif kind == "task":
                    actor.step(rng)
                    if actor.engine is not None and rng.random() < scenario.restart_rate:
                        trace.append(f"{actor.name} clean restart")
                        actor.stop()
                elif kind == "truncate":
                    truncate(actor)
                elif kind == "empty":
                    empty(actor)
                elif kind == "lose":
                    assert store_loss is not None
                    actor.store.lose(store_loss)
                    actor.stop()
                    store_lost = True
                    trace.append(f"LOSE store changelog of {actor.name} ({store_loss}) after "
                                 f"{actor.delivered} committed deliveries")
                elif kind == "join":
                    for h in actor:
                        h.join()
                    joiners.clear()
                    trace.append(f"JOIN {scenario.join}")
                else:
                    delete(actor)
                continue
            # Nothing enabled: restart every task from committed state and step it
            # once; done when a whole round changes nothing.
            before = progress()
            for h in hosts:
                h.stop()
                h.step(rng)
            if progress() == before and not any(h.needs_step() for h in hosts):
                break
    except ParsleyFailClosedError as exc:
        extra.append(Violation(REFUSED, f"{exc.reason.name}: {exc.detail}"))
    except Exception as exc:  # a broken engine may raise anything; report, never hide
        tb = traceback.format_exception(exc)[-3:]
        extra.append(Violation(ENGINE_ERROR, f"{type(exc).__name__}: {exc} | {''.join(tb)}"))
    else:
        oracle.finish()
    stats = {
        "ticks": ticks,
        "deliveries": oracle.deliveries,
        "records": sum(len(log.visible) for log in broker.logs.values()),
        "offsets": sum(len(log.kinds) for log in broker.logs.values()),
        "crashes": sum(h.crashes for h in hosts),
        "executions": sum(h.executions for h in hosts),
        "deleted": len(broker.deleted),
    }
    stats["replays"] = sum(h.replays for h in hosts)
    stats["truncations"] = truncations
    stats["faults"] = injected
    stats["overrides"] = sum(h.overrides for h in hosts)
    stats["joins"] = sum(1 for line in trace if line.startswith("JOIN"))
    stats["join_clamps"] = oracle.clamps
    stats["budget_warnings"] = sum(len(h.warnings) for h in hosts)
    stats["held_commits"] = sum(h.held_commits for h in hosts)
    stats["holds"] = sum(h.holds for h in hosts)
    stats["deleted_verdicts"] = sum(h.deleted_verdicts for h in hosts)
    stats["upstream_deleted_verdicts"] = sum(h.upstream_deleted_verdicts for h in hosts)
    stats["cross_partition_causes"] = sum(h.cross_seen for h in hosts)
    stats["store_losses"] = sum(1 for line in trace if line.startswith("LOSE"))
    stats["illegal_deletes"] = sum(1 for line in trace if line.startswith("ILLEGAL DELETE"))
    found = oracle.violations + [v for h in hosts for v in h.violations] + extra
    digest = hashlib.sha1("\n".join(trace).encode()).hexdigest()
    return SimResult(scenario, tuple(found), stats, tuple(trace[-TRACE_TAIL:]), digest)
