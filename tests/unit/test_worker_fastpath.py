"""The native fast path of a delivery batch (``workers.fastpath``) against the Python frame.

The same records, fed to two native engines, are drained by a :class:`TaskStep` with the
fast path and by one without it (every delivery through :meth:`HandlerFrame.run`): every
send (topic, key, value, headers, timestamp), every store write, the counts and any
refusal or handler failure must be the same. The handlers cover the plain case and every
way out of it (``workers.fastpath``'s stop kinds).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest

from parsley import Channel, Effects, Process, Store
from parsley.declarations import Delivery, Send, State
from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.store import InMemoryOrderingStore
from parsley.frame import HandlerFailure, HandlerFrame
from parsley.refusals import ParsleyFailClosedError
from parsley.serdes import BYTES, JSON, STRING
from tests.engines import engine_cls
from workers.fastpath import STOP_EFFECTS, STOP_PRODUCE, STOP_RAISED, STOP_RECORD
from workers.step import TaskStep

CH = ChannelId(UUID(int=0xF00D), 0)
OUT = Channel("out", BYTES, BYTES)
TEXT_OUT = Channel("text-out", STRING, JSON)
COUNTS = Store("counts", STRING, JSON)


class _Ledger:
    def __init__(self) -> None:
        self.counted = 0

    def sent(self, n: int) -> None:
        self.counted += n

    def on_delivery(self, err: Any, msg: Any) -> None:
        pass


class _Producer:
    """``Producer.produce``'s shape; refuses the calls listed in ``refuse`` (by call number)."""

    def __init__(self, txn: _Txn, refuse: dict[int, BaseException]) -> None:
        self._txn = txn
        self.calls = 0
        self.refuse = refuse

    def produce(self, topic: str, value: Any, key: Any, *, on_delivery: Any, timestamp: int,
                headers: list[tuple[str, bytes]]) -> None:
        self.calls += 1
        if self.calls in self.refuse:
            raise self.refuse[self.calls]
        self._txn.sent.append((topic, key, value, list(headers), timestamp))


class _Txn:
    def __init__(self, refuse: dict[int, BaseException]) -> None:
        self.open = True
        self.opened_at = 0.0
        self.ledger = _Ledger()
        self.producer = _Producer(self, refuse)
        self.sent: list[tuple[str, Any, Any, list[tuple[str, bytes]], int]] = []

    def begin(self) -> None:
        self.open = True

    def send_counted(self, topic: str, key: Any, value: Any,
                     headers: list[tuple[str, bytes]], ts: int) -> None:
        self.sent.append((topic, key, value, list(headers), ts))


class _Stores:
    def __init__(self) -> None:
        self.data: dict[tuple[str, bytes], bytes | None] = {}
        self.applied: list[Any] = []

    def get(self, store_name: str, key: bytes) -> bytes | None:
        return self.data.get((store_name, key))

    def apply(self, writes: Any) -> None:
        for w in writes:
            self.applied.append((w.store, w.key, w.value))
            self.data[(w.store, w.key)] = w.value


Handler = Callable[[Delivery[Any, Any], State], Any]


class _Counting:
    """Counts the entries and batch-handler calls the native fast path handled itself,
    and its stops by kind."""

    def __init__(self, fast: Any) -> None:
        self.fast = fast
        self.handled = 0
        self.calls = 0
        self.stops: set[int] = set()

    def run(self, batch: Any, start: int) -> Any:
        result = self.fast.run(batch, start)
        self.handled += result[0]
        self.calls += result[2]
        if result[4] is not None:
            self.stops.add(result[4][1])
        return result

    def partial(self) -> Any:
        return self.fast.partial()


def _relay(d: Delivery[Any, Any], s: State) -> Any:
    return Effects.builder().send(OUT, d.key, d.value, timestamp=d.timestamp).build()


def _text_relay(d: Delivery[Any, Any], s: State) -> Any:
    return Effects.builder().send(TEXT_OUT, d.key, {"v": d.value}).build()


def _every(n: int, odd: Handler, plain: Handler = _relay) -> Handler:
    """``odd`` for every ``n``-th offset, ``plain`` otherwise."""
    def handle(d: Delivery[Any, Any], s: State) -> Any:
        return odd(d, s) if d.offset % n == n - 1 else plain(d, s)
    return handle


def _latched(d: Delivery[Any, Any], s: State) -> Any:
    with contextlib.suppress(ParsleyFailClosedError):
        Send(OUT, d.key, d.value, (("parsley.x", b"1"),))
    return _relay(d, s)


def _latched_one(d: Delivery[Any, Any], s: State) -> Any:
    with contextlib.suppress(ParsleyFailClosedError):
        Effects.send(OUT, d.key, d.value, headers=[("parsley.x", b"1")])
    return Effects.send(OUT, d.key, d.value)


def _raise(d: Delivery[Any, Any], s: State) -> Any:
    raise ValueError(f"no {d.offset}")


def _swallowed_state_refusal(d: Delivery[Any, Any], s: State) -> Any:
    with contextlib.suppress(ParsleyFailClosedError):
        s.get(Store("undeclared", STRING, JSON), "k")
    return _relay(d, s)


def _described(d: Delivery[Any, Any], s: State) -> Any:
    # Everything the handler is handed, in the value: a wrongly built Delivery shows.
    value = repr((d.topic, d.partition, d.offset, d.timestamp, d.key, d.value,
                  d.headers)).encode()
    return Effects.builder().send(OUT, d.key, value).build()


def _count(d: Delivery[Any, Any], s: State) -> Any:
    n = (s.get(COUNTS, "k") or 0) + 1
    return Effects.builder().put(COUNTS, "k", n).send(OUT, d.key, d.value).build()


CASES: dict[str, tuple[Handler, Any, Any]] = {
    "plain relay": (_relay, BYTES, BYTES),
    "what the handler is handed": (_described, BYTES, BYTES),
    "a swallowed state refusal": (_every(5, _swallowed_state_refusal), BYTES, BYTES),
    "nothing to send": (_every(3, lambda d, s: Effects.none()), BYTES, BYTES),
    "two sends": (_every(4, lambda d, s: Effects.builder().send(OUT, d.key, b"1")
                         .send(OUT, None, None).build()), BYTES, BYTES),
    "a send with headers": (_every(2, lambda d, s: Effects.builder().send(
        OUT, d.key, d.value, headers={"h": b"1"}).build()), BYTES, BYTES),
    "its own timestamp": (_every(2, lambda d, s: Effects.builder().send(
        OUT, d.key, d.value, timestamp=7).build()), BYTES, BYTES),
    "a store write": (_every(3, _count), BYTES, BYTES),
    "a handler that raises": (_every(5, _raise), BYTES, BYTES),
    "None returned": (_every(5, lambda d, s: None), BYTES, BYTES),
    "not Effects": (_every(5, lambda d, s: 42), BYTES, BYTES),
    "an undeclared output": (_every(5, lambda d, s: Effects.builder().send(
        Channel("elsewhere", BYTES, BYTES), d.key, d.value).build()), BYTES, BYTES),
    "a value BYTES cannot serialize": (_every(5, lambda d, s: Effects.builder().send(
        OUT, d.key, "text").build()), BYTES, BYTES),
    "a bytearray value": (_every(2, lambda d, s: Effects.builder().send(
        OUT, d.key, bytearray(b"ba")).build()), BYTES, BYTES),
    "a caught reserved header": (_every(5, _latched), BYTES, BYTES),
    "STRING and JSON": (_text_relay, STRING, JSON),
    "the one-send constructor": (lambda d, s: Effects.send(OUT, d.key, d.value),
                                 BYTES, BYTES),
    "the one-send constructor, refused": (_every(3, lambda d, s: Effects.send(
        OUT, d.key, d.value, headers=[("parsley.x", b"1")])), BYTES, BYTES),
    "the one-send constructor, its refusal caught": (_every(5, _latched_one), BYTES, BYTES),
    "JSON that does not serialize": (_every(5, lambda d, s: Effects.builder().send(
        TEXT_OUT, d.key, {1j}).build(), _text_relay), STRING, JSON),
}


def _records(value_serde: Any, n: int) -> list[ReceivedMessage]:
    out = []
    for q in range(n):
        value = b'{"n": %d}' % q if value_serde is JSON else b"v%d" % q
        if value_serde is JSON and q == 11:
            value = b"not json"  # a decode failure, for the STRING/JSON cases
        headers = (("app", b"h"),) if q % 7 == 6 else ()
        out.append(ReceivedMessage(CH, q, 1000 + q, None if q % 6 == 5 else b"k%d" % q,
                                   value, headers))
    return out


def _drain(handler: Handler, key_serde: Any, value_serde: Any, fast: bool,
           refuse: dict[int, BaseException]) -> tuple[Any, ...]:
    engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
    engine.start({})
    for m in _records(value_serde, 24):
        engine.receive(m)
    process = (Process("p").receives(Channel("in", key_serde, value_serde), handler)
               .sends(OUT, TEXT_OUT).stores(COUNTS))
    stores = _Stores()
    txn = _Txn(dict(refuse))
    step = TaskStep(task=0, engine=engine, frame=HandlerFrame(process, 0, stores),
                    stores=stores, txn=txn, channels={"in": CH},  # type: ignore[arg-type]
                    ordering_topic="o", store_topics={}, fast=fast)
    assert (step._fast is not None) == fast
    counting = _Counting(step._fast)
    if fast:
        step._fast = counting
    failure: tuple[Any, ...] | None = None
    try:
        while True:
            step.drain()
            if not step.more:
                break
    except (ParsleyFailClosedError, HandlerFailure) as exc:
        failure = (type(exc).__name__, getattr(exc, "reason", None), str(exc),
                   type(exc.__cause__).__name__)
    return (txn.sent, stores.applied, step.delivered, txn.ledger.counted, failure), \
        counting


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_path_sends_and_refuses_what_the_python_frame_does(case: str) -> None:
    handler, key_serde, value_serde = CASES[case]
    python, _ = _drain(handler, key_serde, value_serde, False, {})
    native, counting = _drain(handler, key_serde, value_serde, True, {})
    assert native == python
    assert python[0] or python[4], "the case sends something or refuses"
    assert counting.handled > 0, "the fast path handled the plain records before any way out"
    if python[4] is None:
        assert STOP_RECORD in counting.stops, "records with application headers are handed back"
    if case in ("plain relay", "what the handler is handed", "the one-send constructor"):
        # every record but those with application headers (offsets 6, 13, 20)
        assert counting.handled == 24 - 3
    expected_stop = {"a handler that raises": STOP_RAISED, "two sends": STOP_EFFECTS,
                     "None returned": STOP_EFFECTS, "a store write": STOP_EFFECTS,
                     "a caught reserved header": STOP_EFFECTS,
                     "the one-send constructor, its refusal caught": STOP_EFFECTS}.get(case)
    if expected_stop is not None:
        assert expected_stop in counting.stops


def test_a_refused_produce_goes_through_the_full_path_once() -> None:
    from confluent_kafka import KafkaError, KafkaException

    refuse: dict[int, BaseException] = {
        3: BufferError("queue full"), 9: KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))}
    python, _ = _drain(_relay, BYTES, BYTES, False, refuse)
    native, counting = _drain(_relay, BYTES, BYTES, True, refuse)
    assert native == python and counting.handled == 24 - 3 - 2
    assert STOP_PRODUCE in counting.stops
    assert len(native[0]) == 24 and native[3] == 24


def test_what_a_raising_call_had_handled_is_counted() -> None:
    # A BaseException (not an Exception) from the handler leaves the fast path at once;
    # the entries it had handled and sent still count (TaskStep's finally).
    def handler(d: Delivery[Any, Any], s: State) -> Any:
        if d.offset == 4:
            raise KeyboardInterrupt
        return _relay(d, s)

    counts = []
    for fast in (False, True):
        engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
        engine.start({})
        for m in _records(BYTES, 8):
            engine.receive(m)
        stores = _Stores()
        txn = _Txn({})
        step = TaskStep(task=0, engine=engine,
                        frame=HandlerFrame(Process("p").receives(Channel("in", BYTES, BYTES),
                                                                 handler).sends(OUT), 0, stores),
                        stores=stores, txn=txn, channels={"in": CH},  # type: ignore[arg-type]
                        ordering_topic="o", store_topics={}, fast=fast)
        with pytest.raises(KeyboardInterrupt):
            while True:
                step.drain()
                if not step.more:
                    break
        counts.append((step.delivered, txn.ledger.counted, len(txn.sent)))
    assert counts[0] == counts[1] == (4, 4, 4)


@pytest.mark.parametrize("slow_case", ["plain", "handed back"])
def test_a_slow_entry_counts_in_the_batch_sizing_on_either_path(slow_case: str) -> None:
    # The step sizes the next delivery batch from the slowest entry: an entry the fast
    # path handles, or one it hands back after calling its handler, must both count.
    import time

    def handler(d: Delivery[Any, Any], s: State) -> Any:
        if d.offset == 2:
            time.sleep(0.05)
            if slow_case == "handed back":
                return Effects.builder().put(COUNTS, "k", 1).send(OUT, d.key, d.value).build()
        return _relay(d, s)

    engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
    engine.start({})
    for m in _records(BYTES, 5):
        engine.receive(m)
    stores = _Stores()
    process = Process("p").receives(Channel("in", BYTES, BYTES), handler).sends(OUT).stores(COUNTS)
    step = TaskStep(task=0, engine=engine, frame=HandlerFrame(process, 0, stores),
                    stores=stores, txn=_Txn({}), channels={"in": CH},  # type: ignore[arg-type]
                    ordering_topic="o", store_topics={})
    observed: list[tuple[int, float, float]] = []
    step.batches.observe = lambda n, elapsed, slowest=None: observed.append(  # type: ignore[method-assign]
        (n, elapsed, slowest or 0.0))
    while True:
        step.drain()
        if not step.more:
            break
    assert step.delivered == 5
    assert max(s for _, _, s in observed) >= 0.05, observed
