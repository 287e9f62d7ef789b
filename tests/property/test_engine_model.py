"""The engine against a tiny reference model, over random feeds (Hypothesis).

The model is the rule as the facts state it, written the slow obvious way:
keep every held message in a FIFO list per channel; a head is deliverable when
every cause on a received channel is settled (head - 1 while held, else
covered); deliver by scanning channels in channel order and taking the first
deliverable head (Java ``nextDeliverable``). The engine does the same with
wake-up heaps, caches and bodies moved to the store; the two must agree on
every delivery, in order, and on coverage, frontier, delivered past and holds.

A second property crashes the engine at random points: a new engine over a
store rebuilt from the committed deltas only, fed again from the committed
read positions, must deliver exactly what an uninterrupted run delivers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.deliverability import decide
from parsley.engine.engine import ProcessEngine
from parsley.engine.feed import FeedOutcome
from parsley.engine.store import InMemoryOrderingStore
from parsley.wire import encode_causes

pytestmark = pytest.mark.usefixtures("engine_impl")

A = ChannelId(UUID(int=0xA), 0)
A1 = ChannelId(UUID(int=0xA), 1)
B = ChannelId(UUID(int=0xB), 0)
C = ChannelId(UUID(int=0xC), 2)
X = ChannelId(UUID(int=0xEE), 0)  # named in causes, never received
RECEIVED = (A, A1, B, C)
ALL = (*RECEIVED, X)


@dataclass(frozen=True)
class Msg:
    channel: ChannelId
    position: int
    causes: tuple[tuple[ChannelId, int], ...]

    def received(self) -> ReceivedMessage:
        headers = (("app", b"%d" % self.position),)
        if self.causes or self.position % 2:
            headers += (("parsley.causes", encode_causes(dict(self.causes))),)
        return ReceivedMessage(self.channel, self.position, self.position, None,
                               b"%s" % str(self.channel).encode(), headers)


class Model:
    """The decision rule, literally (docs/wire-format.md, "What a receiver does with the entries";
    docs/model.md,
    "The decision rule")."""

    def __init__(self, start: dict[ChannelId, int]) -> None:
        self.covered: dict[ChannelId, int] = {c: s - 1 for c, s in start.items() if s > 0}
        self.held: dict[ChannelId, deque[Msg]] = {c: deque() for c in RECEIVED}
        self.frontier: dict[ChannelId, int] = {}
        self.past: dict[ChannelId, int] = {}

    def settled(self, ch: ChannelId) -> int | None:
        if self.held[ch]:
            return self.held[ch][0].position - 1
        return self.covered.get(ch)

    def receive(self, m: Msg) -> FeedOutcome:
        for c, p in m.causes:
            self.frontier[c] = max(p, self.frontier.get(c, -1))
        cov = self.covered.get(m.channel)
        if cov is not None and m.position <= cov:
            return FeedOutcome.DUPLICATE_DROPPED
        self.covered[m.channel] = m.position
        self.held[m.channel].append(m)
        return FeedOutcome.ACCEPTED

    def deliver_next(self) -> Msg | None:
        for ch in sorted(RECEIVED):
            if not self.held[ch]:
                continue
            head = self.held[ch][0]
            ok = all(
                c not in RECEIVED or ((s := self.settled(c)) is not None and s >= p)
                for c, p in head.causes
            )
            if ok:
                self.held[ch].popleft()
                self.frontier[ch] = max(head.position, self.frontier.get(ch, -1))
                for c, p in head.causes:
                    self.past[c] = max(p, self.past.get(c, -1))
                return head
        return None


@st.composite
def feeds(draw: st.DrawFn) -> tuple[dict[ChannelId, int], list[Msg]]:
    """Start positions and an interleaved feed of per-channel increasing positions."""
    per_channel: dict[ChannelId, list[int]] = {}
    for ch in RECEIVED:
        pos = draw(st.integers(0, 2))
        positions = []
        for _ in range(draw(st.integers(0, 6))):
            positions.append(pos)
            pos += draw(st.integers(1, 3))  # gaps: markers, aborted records
        per_channel[ch] = positions
    top = max((p for ps in per_channel.values() for p in ps), default=0) + 2
    start = {ch: draw(st.integers(0, 2)) for ch in RECEIVED if draw(st.booleans())}
    queues = {ch: deque(ps) for ch, ps in per_channel.items()}
    order: list[Msg] = []
    while any(queues.values()):
        ch = draw(st.sampled_from([c for c in RECEIVED if queues[c]]))
        pos = queues[ch].popleft()
        named = draw(st.lists(st.sampled_from(ALL), max_size=3, unique=True))
        causes = tuple(sorted((c, draw(st.integers(0, top))) for c in named))
        order.append(Msg(ch, pos, causes))
    return start, order


def drain_engine(e: ProcessEngine) -> list[tuple[ChannelId, int]]:
    out = []
    while (d := e.deliver_next()) is not None:
        out.append((d.channel, d.position))
    return out


def drain_model(m: Model) -> list[tuple[ChannelId, int]]:
    out = []
    while (d := m.deliver_next()) is not None:
        out.append((d.channel, d.position))
    return out


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feeds(), st.integers(0, 4))
def test_engine_agrees_with_the_model(feed: tuple[dict[ChannelId, int], list[Msg]],
                                      flush_every: int) -> None:
    start, order = feed
    e = ProcessEngine(InMemoryOrderingStore(), received=RECEIVED)
    e.start(start)
    model = Model(start)
    for i, m in enumerate(order):
        assert e.receive(m.received()) is model.receive(m), f"feed outcome of {m}"
        assert drain_engine(e) == drain_model(model), f"deliveries after feeding {m}"
        if flush_every and i % flush_every == 0:
            e.take_deltas()  # bodies move to the store; decisions must not change
        assert dict(e.frontier()) == model.frontier
        if i % 3 != flush_every % 3:  # sometimes several steps pass between headers
            assert e.causes_header() == encode_causes(model.frontier), "patched header"
        assert dict(e.delivered_past()) == model.past
        for ch in RECEIVED:
            assert e.held_positions(ch) == tuple(x.position for x in model.held[ch])
            assert e.settled(ch) == model.settled(ch)
            assert e.covered(ch) == model.covered.get(ch)
    assert e.causes_header() == encode_causes(model.frontier)
    # Diagnosis is the pure rule applied to each head.
    for held in e.diagnose().held:
        ch = next(c for c in RECEIVED if str(c.topic_id) == held.topic
                  and c.partition == held.partition)
        verdict = decide(model.held[ch][0].causes, frozenset(RECEIVED), model.settled)
        assert len(held.blockers) == len(getattr(verdict, "blockers", ())), "diagnosis"


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(feeds(), st.lists(st.integers(0, 40), max_size=3), st.integers(0, 3))
def test_restart_from_committed_deltas_delivers_as_an_uninterrupted_run(
    feed: tuple[dict[ChannelId, int], list[Msg]], crashes: list[int], lost_steps: int
) -> None:
    start, order = feed
    reference = ProcessEngine(InMemoryOrderingStore(), received=RECEIVED)
    reference.start(start)
    expected: list[tuple[ChannelId, int]] = []
    for m in order:
        reference.receive(m.received())
        expected += drain_engine(reference)

    log: list[tuple[bytes, bytes | None]] = []
    committed: list[tuple[ChannelId, int]] = []
    next_position = dict(start)  # committed read positions
    i = 0
    crash_points = sorted({c % (len(order) + 1) for c in crashes})
    while True:
        e = ProcessEngine(InMemoryOrderingStore.from_records(log), received=RECEIVED)
        e.start(next_position)
        crash_at = crash_points.pop(0) if crash_points else None
        while i < len(order) and (crash_at is None or i < crash_at):
            m = order[i]
            e.receive(m.received())
            committed += drain_engine(e)
            log += e.take_deltas()  # commit: deltas, deliveries and read position together
            next_position[m.channel] = m.position + 1
            i += 1
        if crash_at is None:
            break
        # Work after the last commit is lost with the crash.
        for m in order[i:i + lost_steps]:
            e.receive(m.received())
            drain_engine(e)
    assert committed == expected
