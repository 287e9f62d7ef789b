"""The native engine against the reference, over the same random streams (Hypothesis).

Both engines (:class:`parsley.engine.engine.ProcessEngine`, the pure-Python reference,
and :class:`parsley.engine.native_engine.NativeProcessEngine`) are driven side by side
by one random host: records with random causes across a few channels (received, another
partition of a received topic, an upstream topic; a relay's same-shaped headers whose
positions move, which the native engine patches rather than decodes; absent, null,
malformed and duplicate ``parsley.causes`` headers), one at a time and in
``feed_records`` batches, deliveries one at a time and in ``deliver_batch`` calls,
headers, commits (``take_deltas``), name bindings, identity verdicts, and restarts from
the store rebuilt from the committed rows. After every step the two must agree on every
outcome and refusal (reason and detail text), every delivery, every ``parsley.causes``
header, every changelog row, the warnings, and every query (coverage, settled, session
floor, holds, frontier, delivered past, diagnosis).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.cross_partition import CrossPartition
from parsley.engine.engine import ProcessEngine
from parsley.engine.identity import TopicVerdict
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError
from parsley.wire import decode_causes, encode_causes
from tests.engines import engine_cls

A = ChannelId(UUID(int=0xA), 0)
A1 = ChannelId(UUID(int=0xA), 1)
B = ChannelId(UUID(int=0xB), 0)
C = ChannelId(UUID(int=0xC), 2)
A5 = ChannelId(UUID(int=0xA), 5)   # another task's partition of a received topic
X = ChannelId(UUID(int=0xEE), 0)   # upstream, never received
Y = ChannelId(UUID(int=0xEF), 3)
RECEIVED = (A, A1, B, C)
ALL = (*RECEIVED, A5, X, Y)
RELAY_FRONTIERS = ((B, C, X, Y), (B, A5, X))
"""The channels of the "relay" headers: each tuple one shape (the second with a cause on
another task's partition: a cross-partition cause, warned with its position or refused)."""
TOPIC_NAMES = {"a": A.topic_id, "b": B.topic_id, "c": C.topic_id, "x": X.topic_id}
TOPIC_OF = {A: "a", A1: "a", B: "b", C: "c"}


class Record:
    """The accessor methods of ``confluent_kafka.Message`` a feed reads."""

    def __init__(self, m: ReceivedMessage) -> None:
        self._m = m

    def topic(self) -> str:
        return f"t{RECEIVED.index(self._m.channel)}"

    def offset(self) -> int:
        return self._m.position

    def timestamp(self) -> tuple[int, int]:
        return (1, self._m.timestamp_ms)

    def key(self) -> bytes | None:
        return self._m.key

    def value(self) -> bytes | None:
        return self._m.value

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return list(self._m.headers) or None


CHANNELS = {f"t{i}": ch for i, ch in enumerate(RECEIVED)}


def outcome(fn: Callable[[], Any]) -> tuple[str, Any]:
    """What a call did: its value, or its refusal / error with the full text."""
    try:
        return "ok", fn()
    except ParsleyFailClosedError as exc:
        return "refused", (exc.reason, exc.detail)
    except (ValueError, RuntimeError, KeyError, TypeError, OverflowError) as exc:
        return "error", (type(exc).__name__, str(exc))


def state(e: Any) -> dict[str, Any]:
    """Everything a host can ask an engine."""
    out: dict[str, Any] = {
        "frontier": dict(e.frontier()),
        "past": dict(e.delivered_past()),
        "frontier_bytes": e.frontier_bytes(),
        "held": e.held_count(),
        "cross": e.cross_partition_causes(),
        "names": dict(e.names()),
        "known": e.known_topic_ids(),
        "unnamed": e.unnamed_topic_ids(),
        "started": e.started,
        "diagnosis": outcome(e.diagnose),
    }
    for ch in ALL:
        out[f"ch {ch}"] = (e.covered(ch), e.settled(ch), e.session_floor(ch),
                           e.held_count(ch), e.held_positions(ch))
    return out


@st.composite
def message(draw: st.DrawFn, ch: ChannelId, position: int) -> ReceivedMessage:
    kind = draw(st.sampled_from(["causes"] * 8 + ["relay"] * 6 + ["none", "empty", "null",
                                                                   "junk", "dup", "reserved",
                                                                   "relay_refused"]))
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if draw(st.booleans()):
        headers += (("app", b"h%d" % position),)
    if kind == "causes":
        named = draw(st.lists(st.sampled_from(ALL), max_size=4, unique=True))
        causes = {c: draw(st.integers(0, 12)) for c in named}
        headers += (("parsley.causes", encode_causes(causes)),)
    elif kind == "relay":
        # A relay's frontier: the same channels, positions moving up and down, so the
        # native engine patches the previous header of the channel instead of decoding.
        shape = draw(st.sampled_from(RELAY_FRONTIERS))
        causes = {c: draw(st.integers(0, 2**40)) for c in shape}
        headers += (("parsley.causes", encode_causes(causes)),)
    elif kind == "relay_refused":
        # The same shape with a position no header can carry: both must refuse alike.
        raw = bytearray(encode_causes({c: 1 for c in RELAY_FRONTIERS[0]}))
        raw[-8:] = draw(st.sampled_from([-1, 2**63 - 1])).to_bytes(8, "big", signed=True)
        headers += (("parsley.causes", bytes(raw)),)
    elif kind == "empty":
        headers += (("parsley.causes", b"\x01\x00"),)
    elif kind == "null":
        headers += (("parsley.causes", None),)
    elif kind == "junk":
        headers += (("parsley.causes", draw(st.binary(max_size=12))),)
    elif kind == "dup":
        headers += (("parsley.causes", b"\x01\x00"), ("parsley.causes", b"\x01\x00"))
    elif kind == "reserved":
        headers += (("parsley.trace", b"t"),)
    if draw(st.booleans()):
        headers += (("tail", None),)
    key = draw(st.sampled_from([None, b"k", b"\xff\x00", b""]))
    return ReceivedMessage(ch, position, 1000 + position, key, b"v%d" % position, headers)


class Pair:
    """The two engines, built and driven alike, and the committed changelog."""

    def __init__(self, budget: int, policy: CrossPartition) -> None:
        self.budget = budget
        self.policy = policy
        self.log: list[tuple[bytes, bytes | None]] = []
        self.warnings: tuple[list[str], list[str]] = ([], [])
        self.engines: tuple[Any, Any] = (None, None)

    def build(self) -> tuple[str, Any]:
        built = []
        for i, cls in enumerate((ProcessEngine, engine_cls("native"))):
            store = InMemoryOrderingStore.from_records(self.log)
            built.append(outcome(lambda cls=cls, store=store, i=i: cls(
                store, received=RECEIVED, budget_bytes=self.budget,
                on_warning=self.warnings[i].append, cross_partition=self.policy)))
        assert built[0][0] == built[1][0], built
        if built[0][0] != "ok":
            assert built[0] == built[1]
            return built[0]
        self.engines = (built[0][1], built[1][1])
        return "ok", None

    def both(self, call: Callable[[Any], Any]) -> tuple[str, Any]:
        py = outcome(lambda: call(self.engines[0]))
        native = outcome(lambda: call(self.engines[1]))
        assert py == native
        assert self.warnings[0] == self.warnings[1]
        return py

    def check_state(self) -> None:
        assert state(self.engines[0]) == state(self.engines[1])


def delivered(d: Any) -> Any:
    return None if d is None else (d.channel, d.position, d.timestamp_ms, d.key, d.value,
                                   d.headers, d.causes)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data(), st.sampled_from([262_144, 120, 60]),
       st.sampled_from([CrossPartition.WARN, CrossPartition.REFUSE]))
def test_both_engines_agree_on_every_decision_delta_and_header(
    data: st.DataObject, budget: int, policy: CrossPartition,
) -> None:
    pair = Pair(budget, policy)
    next_pos = {ch: 0 for ch in RECEIVED}
    started = False
    for _ in range(data.draw(st.integers(5, 60))):
        if pair.engines[0] is None:
            if pair.build()[0] != "ok":
                return
            started = False
        if not started:
            if data.draw(st.booleans()):
                pair.both(lambda e: e.bind_names(TOPIC_NAMES))
            if data.draw(st.integers(0, 5)) == 0:
                verdicts = {X.topic_id: TopicVerdict.DELETED}
                if data.draw(st.booleans()):
                    verdicts[B.topic_id] = data.draw(st.sampled_from(list(TopicVerdict)))
                pair.both(lambda e, v=verdicts: e.apply_identity(v))
            starts = {ch: data.draw(st.integers(0, next_pos[ch])) for ch in RECEIVED
                      if data.draw(st.booleans())}
            pair.both(lambda e, s=starts: e.start(s))
            started = True
        op = data.draw(st.sampled_from(
            ["receive"] * 4 + ["batch"] * 2 + ["deliver", "deliver_batch", "header",
                                               "commit", "restart", "learn"]))
        refused = False
        if op in ("receive", "batch"):
            msgs = []
            for _ in range(1 if op == "receive" else data.draw(st.integers(1, 6))):
                ch = data.draw(st.sampled_from(RECEIVED))
                position = next_pos[ch] + data.draw(st.integers(-1, 2))
                position = max(position, 0)
                next_pos[ch] = max(next_pos[ch], position + 1)
                msgs.append(data.draw(message(ch, position)))
            if op == "receive":
                result = pair.both(lambda e, m=msgs[0]: e.receive(m))
            else:
                result = pair.both(
                    lambda e, ms=msgs: e.feed_records([Record(m) for m in ms], CHANNELS))
            refused = result[0] != "ok"
        elif op == "deliver":
            result = pair.both(lambda e: delivered(e.deliver_next()))
            refused = result[0] != "ok"
        elif op == "deliver_batch":
            limit = data.draw(st.integers(1, 5))
            result = pair.both(lambda e, n=limit: e.deliver_batch(n))
            refused = result[0] != "ok"
        elif op == "header":
            result = pair.both(lambda e: e.causes_header())
        elif op == "commit":
            result = pair.both(lambda e: e.take_deltas())
            if result[0] == "ok":
                pair.log.extend(result[1])
                assert pair.engines[0]._store.items() == pair.engines[1]._store.items()
        elif op == "learn":
            pair.both(lambda e: e.learn_names({"y": Y.topic_id, "x": X.topic_id}))
        pair.check_state()
        if refused or op == "restart":
            pair.engines = (None, None)


EDGE = ChannelId(UUID(int=0xD), 2**31 - 1)   # the largest partition
EDGE_RECEIVED = (A, EDGE)
EDGE_POSITIONS = (0, 1, 2**63 - 3, 2**63 - 2, -1, -(2**63), 2**63 - 1, 2**63, 2**64)
"""Positions the wire can carry (0..2^63-2) and ones it cannot."""
EDGE_TIMESTAMPS = (0, -1, 2**63 - 1, -(2**63), 2**63, 2**70, -(2**63) - 1)
EDGE_HEADERS: tuple[Any, ...] = (
    (), None, [("a", b"1")], (("a", b"1", b"2"),), (("a",),), (["a", b"1"],),
    ((b"a", b"1"),), ((b"parsley.causes", b"\x01\x00"),), (("a", "s"),),
    (("parsley.x", b""), ("a", None)),
    (("parsley.causes", encode_causes({X: 2**63 - 2, EDGE: 3})),),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_both_engines_refuse_or_accept_edge_inputs_alike(data: st.DataObject) -> None:
    """Positions no header can carry, timestamps outside an int64, start positions past
    2^63, headers of the wrong shape, the largest partition: the same refusal (type and
    text) or the same deliveries, headers and deltas from both engines; never a
    ``parsley.causes`` header that a reader refuses."""
    engines = [cls(InMemoryOrderingStore(), received=EDGE_RECEIVED, budget_bytes=262_144,
                   cross_partition=CrossPartition.WARN)
               for cls in (ProcessEngine, engine_cls("native"))]

    def both(call: Callable[[Any], Any]) -> tuple[str, Any]:
        py, native = (outcome(lambda e=e: call(e)) for e in engines)
        assert py == native
        return py

    starts = {ch: data.draw(st.sampled_from((*EDGE_POSITIONS, 2**64 + 1)))
              for ch in EDGE_RECEIVED if data.draw(st.booleans())}
    if both(lambda e: e.start(starts))[0] != "ok":
        return
    for _ in range(data.draw(st.integers(1, 4))):
        ch = data.draw(st.sampled_from(EDGE_RECEIVED))
        msg = ReceivedMessage(ch, data.draw(st.sampled_from(EDGE_POSITIONS)),
                              data.draw(st.sampled_from(EDGE_TIMESTAMPS)), b"k", b"v",
                              data.draw(st.sampled_from(EDGE_HEADERS)))
        if msg.headers is not None and data.draw(st.booleans()):
            topic = f"t{EDGE_RECEIVED.index(ch)}"
            result = both(lambda e, m=msg, t=topic: e.feed_records(
                [_EdgeRecord(m, t)], {"t0": A, "t1": EDGE}))
        else:
            result = both(lambda e, m=msg: e.receive(m))
        if result[0] != "ok":
            return
    while True:
        result = both(lambda e: delivered(e.deliver_next()))
        if result[0] != "ok" or result[1] is None:
            break
        header = both(lambda e: e.causes_header())
        if header[0] == "ok":
            decode_causes(header[1])  # what a downstream reader does: never refused
    both(lambda e: e.take_deltas())


class _EdgeRecord(Record):
    def __init__(self, m: ReceivedMessage, topic: str) -> None:
        super().__init__(m)
        self._topic = topic

    def topic(self) -> str:
        return self._topic
