"""The native fast path of a delivery batch (``workers.fastpath``) against the Python frame.

The same records, fed to two native engines, are drained by a :class:`TaskStep` with the
fast path and by one without it (every delivery through :meth:`HandlerFrame.run`, or a
batch handler's runs through :meth:`HandlerFrame.run_batch`): every send (topic, key,
value, headers, timestamp), every store write, the counts and any refusal or handler
failure must be the same, and a batch handler must be called with the same deliveries.
The handlers, per record and in batches, cover the plain case and every way out of it
(``workers.fastpath``'s stop kinds).
"""

from __future__ import annotations

import contextlib
import gc
import sys
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import pytest

from parsley import Channel, Effects, Process, Store
from parsley.declarations import Delivery, Send, State
from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.store import InMemoryOrderingStore
from parsley.frame import HandlerFailure, HandlerFrame
from parsley.refusals import ParsleyFailClosedError, Reason
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


_UNSET: Any = object()


class _Producer:
    """``Producer.produce``'s shape; refuses the calls listed in ``refuse`` (by call number)."""

    def __init__(self, txn: _Txn, refuse: dict[int, BaseException]) -> None:
        self._txn = txn
        self.calls = 0
        self.refuse = refuse

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                callback: Any = _UNSET, on_delivery: Any = None, timestamp: int = 0,
                headers: list[tuple[str, bytes]] | None = None) -> None:
        """confluent-kafka's ``Producer.produce`` signature (``Producer_produce`` in its
        ``Producer.c``): the step passes keywords, the fast path positions. The delivery
        callback resolves as there: ``callback`` when given at all (``None`` included, which
        means none), else ``on_delivery``; each resolved one is kept for the comparison."""
        resolved = on_delivery if callback is _UNSET else callback
        self._txn.callbacks.append((partition, resolved == self._txn.ledger.on_delivery,
                                    headers is not None))
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
        # (partition, the ledger's callback, headers given) of every produce call
        self.callbacks: list[tuple[int, bool, bool]] = []

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
    and its stops by kind; for each ``STOP_PRODUCE``, the refused send's value and how
    many sends were left after it."""

    def __init__(self, fast: Any) -> None:
        self.fast = fast
        self.handled = 0
        self.calls = 0
        self.stops: set[int] = set()
        self.refused: list[tuple[Any, int]] = []

    def run(self, batch: Any, start: int) -> Any:
        result = self.fast.run(batch, start)
        self.handled += result[0]
        self.calls += result[2]
        if result[4] is not None:
            self.stops.add(result[4][1])
            if result[4][1] == STOP_PRODUCE:
                refused, rest = result[4][2]
                self.refused.append((refused[2], len(rest)))
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
    "a new channel object per send, both outputs": (_every(2, lambda d, s: Effects.send(
        Channel("text-out", STRING, JSON), str(d.offset), [d.offset]), lambda d, s: Effects.send(
        Channel("out", BYTES, BYTES), d.key, d.value)), BYTES, BYTES),
    "the one-send constructor": (lambda d, s: Effects.send(OUT, d.key, d.value),
                                 BYTES, BYTES),
    "the one-send constructor, refused": (_every(3, lambda d, s: Effects.send(
        OUT, d.key, d.value, headers=[("parsley.x", b"1")])), BYTES, BYTES),
    "the one-send constructor, its refusal caught": (_every(5, _latched_one), BYTES, BYTES),
    "JSON that does not serialize": (_every(5, lambda d, s: Effects.builder().send(
        TEXT_OUT, d.key, {1j}).build(), _text_relay), STRING, JSON),
}


def _records(value_serde: Any, n: int, bad_at: int = 11,
             app_headers: bool = True) -> list[ReceivedMessage]:
    """``n`` records from offset 0: application headers at every offset 6 mod 7 (unless
    ``app_headers`` is false), no key at every 5 mod 6; with JSON values, the value at
    ``bad_at`` does not decode."""
    out = []
    for q in range(n):
        value = b'{"n": %d}' % q if value_serde is JSON else b"v%d" % q
        if value_serde is JSON and q == bad_at:
            value = b"not json"  # a decode failure, for the STRING/JSON cases
        headers = (("app", b"h"),) if app_headers and q % 7 == 6 else ()
        out.append(ReceivedMessage(CH, q, 1000 + q, None if q % 6 == 5 else b"k%d" % q,
                                   value, headers))
    return out


class _FixedBatches:
    """A delivery-batch sizer that always asks for ``size`` heads: the runs of a batch
    handler end at delivery-batch ends, which the real sizer moves with measured time."""

    def __init__(self, size: int) -> None:
        self._size = size

    def size(self) -> int:
        return self._size

    def limit(self, time_left_s: float) -> int:
        return self._size

    def observe(self, n: int, elapsed_s: float, slowest_s: float | None = None) -> None:
        pass


def _drain(handler: Any, key_serde: Any, value_serde: Any, fast: bool,
           refuse: dict[int, BaseException], *, max_records: int | None = None,
           size: int = 10, bad_at: int = 11, app_headers: bool = True) -> tuple[Any, ...]:
    """Drain 24 records (:func:`_records`) through a :class:`TaskStep`, with the native
    fast path or without; a batch handler (``max_records`` set) in delivery batches of
    ``size``. Returns ``(sent, store writes applied, delivered, produce calls counted,
    failure (a refusal, a handler failure or a KeyboardInterrupt), batch-handler calls,
    what each batch-handler call was handed)`` and the
    fast path's :class:`_Counting`."""
    engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
    engine.start({})
    for m in _records(value_serde, 24, bad_at, app_headers):
        engine.receive(m)
    received = Channel("in", key_serde, value_serde)
    handed: list[tuple[Any, ...]] = []
    if max_records is None:
        process = Process("p").receives(received, handler)
    else:
        def logged(ds: Any, s: State) -> Any:
            handed.append((type(ds).__name__, *[
                (d.topic, d.partition, d.offset, d.timestamp, d.key, d.value, d.headers)
                for d in ds]))
            return handler(ds, s)
        process = Process("p").receives_batch(received, logged, max_records)
    process = process.sends(OUT, TEXT_OUT).stores(COUNTS)
    return _step_through(process, engine, {"in": CH}, refuse, fast,
                         None if max_records is None else size, handed)


def _drain_all(step: TaskStep) -> None:
    """Drain ``step`` until it has nothing more to deliver."""
    while True:
        step.drain()
        if not step.more:
            return


def _step_through(process: Process, engine: Any, channels: dict[str, Any],
                  refuse: dict[int, BaseException], fast: bool, size: int | None,
                  handed: list[tuple[Any, ...]]) -> tuple[tuple[Any, ...], _Counting]:
    """Drain ``engine``'s deliveries through a :class:`TaskStep` of ``process`` (delivery
    batches of ``size`` when given), with the native fast path or without, ``produce``
    refusing the calls in ``refuse``. Returns ``(sent, store writes applied, delivered,
    produce calls counted, failure (a refusal, a handler failure or a KeyboardInterrupt),
    batch-handler calls, handed)`` and the fast path's :class:`_Counting`."""
    stores = _Stores()
    txn = _Txn(dict(refuse))
    step = TaskStep(task=0, engine=engine, frame=HandlerFrame(process, 0, stores),
                    stores=stores, txn=txn, channels=channels,  # type: ignore[arg-type]
                    ordering_topic="o", store_topics={}, fast=fast)
    if size is not None:
        step.batches = _FixedBatches(size)  # type: ignore[assignment]
    assert (step._fast is not None) == fast
    counting = _Counting(step._fast)
    if fast:
        step._fast = counting
    failure: tuple[Any, ...] | None = None
    try:
        _drain_all(step)
    except (ParsleyFailClosedError, HandlerFailure, KeyboardInterrupt) as exc:
        failure = (type(exc).__name__, getattr(exc, "reason", None), str(exc),
                   type(exc.__cause__).__name__)
    assert all(c == (-1, True, True) for c in txn.callbacks), txn.callbacks
    return (txn.sent, stores.applied, step.delivered, txn.ledger.counted, failure,
            step.handler_batches, handed), counting


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



def test_the_fields_the_fast_path_reads_and_sets_keep_their_reference_counts() -> None:
    # The fast path reads a Send's and an Effects' fields, and sets a Delivery's, at their
    # slot offsets (native/src/py_effects.rs, Slots): a read without its own reference, or
    # a set that leaked one, shows in the count of an object only this test holds.
    key, value = bytes(bytearray(b"sentinel-key")), bytes(bytearray(b"sentinel-value"))
    kept: list[Any] = []

    def handler(d: Delivery[Any, Any], s: State) -> Any:
        kept.append(d.value)  # each delivery's value object, set by the fast path
        return Effects.send(OUT, key, value)

    before = sys.getrefcount(key), sys.getrefcount(value)
    result, counting = _drain(handler, BYTES, BYTES, True, {}, app_headers=False)
    assert counting.handled == 24 and len(result[0]) == 24
    assert all(sent[1] is key and sent[2] is value for sent in result[0])
    assert [bytes(v) for v in kept] == [b"v%d" % q for q in range(24)]
    del result, counting
    gc.collect()
    assert (sys.getrefcount(key), sys.getrefcount(value)) == before

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
            _drain_all(step)
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
    _drain_all(step)
    assert step.delivered == 5
    assert max(s for _, _, s in observed) >= 0.05, observed


# -- batch handlers (Process.receives_batch) ----------------------------------------------
#
# 24 records in delivery batches of 10 and runs of at most 5: runs 0-4, 5-9, 10-14, 15-19
# and 20-23. The runs holding a record with application headers (6, 13, 20) are handed back
# whole (STOP_RECORD); runs 0-4 and 15-19 are plain. Each odd behaviour below is placed in
# the run 15-19 (offset 17), after a plain run the fast path handled itself.

BatchHandler = Callable[[Sequence[Delivery[Any, Any]], State], Any]


def _batch_relay(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    b = Effects.builder()
    for d in ds:
        b.send(OUT, d.key, d.value, timestamp=d.timestamp)
    return b.build()


def _batch_relay_untimed(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    b = Effects.builder()
    for d in ds:
        b.send(OUT, d.key, d.value)  # the timestamp defaults to the run's last delivery's
    return b.build()


def _batch_text_relay(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    b = Effects.builder()
    for d in ds:
        b.send(TEXT_OUT, d.key, {"v": d.value})
    return b.build()


def _batch_count(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    n = s.get(COUNTS, "k") or 0
    b = Effects.builder()
    for d in ds:
        n += 1
        b.put(COUNTS, "k", n).send(OUT, d.key, d.value)
    return b.build()


def _batch_latched(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    with contextlib.suppress(ParsleyFailClosedError):
        Send(OUT, ds[0].key, ds[0].value, (("parsley.x", b"1"),))
    return _batch_relay(ds, s)


def _batch_swallowed_state_refusal(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    with contextlib.suppress(ParsleyFailClosedError):
        s.get(Store("undeclared", STRING, JSON), "k")
    return _batch_relay(ds, s)


def _batch_raise(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    raise ValueError(f"no {ds[0].offset}..{ds[-1].offset}")


def _with_last(send: Callable[[Delivery[Any, Any]], Send]) -> BatchHandler:
    """The relay's sends, the last delivery's replaced by ``send(delivery)``."""
    def handle(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
        b = Effects.builder()
        for d in ds[:-1]:
            b.send(OUT, d.key, d.value, timestamp=d.timestamp)
        built = send(ds[-1])
        b.send(built.channel, built.key, built.value, timestamp=built.timestamp_ms,
               headers=built.headers)
        return b.build()
    return handle


def _at17(odd: BatchHandler, plain: BatchHandler = _batch_relay) -> BatchHandler:
    """``odd`` for the run holding offset 17, ``plain`` otherwise."""
    def handle(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
        return odd(ds, s) if any(d.offset == 17 for d in ds) else plain(ds, s)
    return handle


def _batch_both_outputs(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
    """Each delivery to both outputs, through the declared channel objects on even offsets
    and a new channel object per send on odd ones: more objects than the fast path
    remembers (``OUT_CACHE``), each matched by its name."""
    b = Effects.builder()
    for d in ds:
        fresh = d.offset % 2
        b.send(Channel("out", BYTES, BYTES) if fresh else OUT, d.key, d.value,
               timestamp=d.timestamp)
        b.send(Channel("text-out", STRING, JSON) if fresh else TEXT_OUT, str(d.offset),
               {"o": d.offset}, timestamp=d.timestamp)
    return b.build()


BATCH_CASES: dict[str, tuple[BatchHandler, Any, Any, int]] = {
    # name: (handler, key serde, value serde, where the JSON value does not decode)
    "batch relay": (_batch_relay, BYTES, BYTES, -1),
    "timestamps defaulted to the run's last": (_batch_relay_untimed, BYTES, BYTES, -1),
    "STRING and JSON": (_batch_text_relay, STRING, JSON, -1),
    "nothing to send": (_at17(lambda ds, s: Effects.none()), BYTES, BYTES, -1),
    "an empty run of sends then a relay": (
        _at17(lambda ds, s: Effects.builder().build()), BYTES, BYTES, -1),
    "None returned": (_at17(lambda ds, s: None), BYTES, BYTES, -1),
    "not Effects": (_at17(lambda ds, s: [Effects.none()]), BYTES, BYTES, -1),
    "a handler that raises": (_at17(_batch_raise), BYTES, BYTES, -1),
    "a reserved header, raised": (_at17(_with_last(lambda d: Send(
        OUT, d.key, d.value, (("parsley.x", b"1"),)))), BYTES, BYTES, -1),
    "a reserved header, caught": (_at17(_batch_latched), BYTES, BYTES, -1),
    "a swallowed state refusal": (_at17(_batch_swallowed_state_refusal), BYTES, BYTES, -1),
    "a send with headers": (_at17(_with_last(lambda d: Send(
        OUT, d.key, d.value, (("h", b"1"),)))), BYTES, BYTES, -1),
    "its own timestamp": (_at17(_with_last(lambda d: Send(OUT, d.key, d.value, (), 7))),
                          BYTES, BYTES, -1),
    "a value BYTES cannot serialize, last": (_at17(_with_last(lambda d: Send(
        OUT, d.key, "text"))), BYTES, BYTES, -1),
    "a bytearray value": (_at17(_with_last(lambda d: Send(OUT, d.key, bytearray(b"ba")))),
                          BYTES, BYTES, -1),
    "an undeclared output, last": (_at17(_with_last(lambda d: Send(
        Channel("elsewhere", BYTES, BYTES), d.key, d.value))), BYTES, BYTES, -1),
    "JSON that does not serialize": (_at17(lambda ds, s: Effects.builder().send(
        TEXT_OUT, ds[0].key, {1j}).build(), _batch_text_relay), STRING, JSON, -1),
    "a store write": (_at17(_batch_count), BYTES, BYTES, -1),
    "an undecodable value": (_batch_text_relay, STRING, JSON, 17),
    "both outputs, declared and new channel objects": (_batch_both_outputs, BYTES, BYTES, -1),
}

_BATCH_STOPS = {
    "None returned": STOP_EFFECTS, "not Effects": STOP_EFFECTS,
    "a handler that raises": STOP_RAISED, "a reserved header, raised": STOP_RAISED,
    "a reserved header, caught": STOP_EFFECTS, "a swallowed state refusal": STOP_EFFECTS,
    "a send with headers": STOP_EFFECTS, "a value BYTES cannot serialize, last": STOP_EFFECTS,
    "a bytearray value": STOP_EFFECTS, "an undeclared output, last": STOP_EFFECTS,
    "JSON that does not serialize": STOP_EFFECTS, "a store write": STOP_EFFECTS,
    "an undecodable value": STOP_RECORD,
}
"""The stop each case's run 15-19 must hand back with."""

_BATCH_FAILURES = {
    "None returned": Reason.HANDLER_RETURNED_NULL_EFFECTS,
    "not Effects": "HandlerFailure", "a handler that raises": "HandlerFailure",
    "a reserved header, raised": Reason.RESERVED_HEADER_USED,
    "a reserved header, caught": Reason.RESERVED_HEADER_USED,
    "a swallowed state refusal": Reason.STATE_ACCESS_TO_UNDECLARED_STORE,
    "a value BYTES cannot serialize, last": Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
    "an undeclared output, last": Reason.EMISSION_TO_UNDECLARED_CHANNEL,
    "JSON that does not serialize": Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
    "an undecodable value": Reason.APPLICATION_PAYLOAD_UNDECODABLE,
}
"""How each refused case stops (the reason, or the failure's type)."""


@pytest.mark.parametrize("case", sorted(BATCH_CASES))
def test_the_fast_path_runs_a_batch_handler_as_the_python_frame_does(case: str) -> None:
    handler, key_serde, value_serde, bad_at = BATCH_CASES[case]
    python, _ = _drain(handler, key_serde, value_serde, False, {}, max_records=5,
                       bad_at=bad_at)
    native, counting = _drain(handler, key_serde, value_serde, True, {}, max_records=5,
                              bad_at=bad_at)
    assert native == python
    failure = python[4]
    expected = _BATCH_FAILURES.get(case)
    if expected is None:
        assert failure is None
        assert python[2] == 24 and python[5] == 5, "every record, in five calls"
    else:
        assert failure is not None and expected in (failure[0], failure[1]), failure
    assert counting.calls >= 1 and counting.handled >= 5, "run 0-4 was handled in Rust"
    assert STOP_RECORD in counting.stops, "runs with application headers are handed back"
    assert _BATCH_STOPS.get(case, STOP_RECORD) in counting.stops
    if case not in _BATCH_STOPS:
        # Runs 0-4 and 15-19 in Rust, the three holding application headers in Python.
        assert (counting.calls, counting.handled) == (2, 10)
    if case == "timestamps defaulted to the run's last":
        assert [ts for *_, ts in python[0]] == [1004] * 5 + [1009] * 5 + [1014] * 5 \
            + [1019] * 5 + [1023] * 4
    if case == "a handler that raises":
        assert "@15" in failure[2] and "ValueError: no 15..19" in failure[2], \
            "a handler failure names the run's first delivery"
    if case == "an undecodable value":
        assert "in@17 value could not be decoded" in failure[2]


def test_a_batch_handlers_sends_carry_the_causes_of_the_runs_last_delivery() -> None:
    per_record, _ = _drain(_relay, BYTES, BYTES, False, {}, app_headers=False)
    python, _ = _drain(_batch_relay, BYTES, BYTES, False, {}, max_records=5, app_headers=False)
    native, counting = _drain(_batch_relay, BYTES, BYTES, True, {}, max_records=5,
                              app_headers=False)
    assert native == python and counting.calls == 5
    ref = [dict(h)["parsley.causes"] for *_, h, _ts in per_record[0]]
    causes = [dict(h)["parsley.causes"] for *_, h, _ts in native[0]]
    # Send k's run ends at offset min(k // 5 * 5 + 4, 23): its stamp is the frontier the
    # per-record path stamps on that delivery's send.
    assert causes == [ref[min(k // 5 * 5 + 4, 23)] for k in range(24)]
    assert len(set(causes)) == 5


@pytest.mark.parametrize(("max_records", "size", "calls"),
                         [(1, 10, 24), (3, 10, 10), (5, 4, 6), (500, 10, 3), (500, 64, 1)])
def test_a_batch_handlers_runs_end_at_max_records_and_delivery_batch_ends(
        max_records: int, size: int, calls: int) -> None:
    python, _ = _drain(_batch_relay, BYTES, BYTES, False, {}, max_records=max_records,
                       size=size, app_headers=False)
    native, counting = _drain(_batch_relay, BYTES, BYTES, True, {}, max_records=max_records,
                              size=size, app_headers=False)
    assert native == python
    assert python[5] == len(python[6]) == calls, "handler calls"
    assert max(len(h) - 1 for h in python[6]) <= max_records
    assert (counting.calls, counting.handled) == (calls, 24), "every run in Rust"


@pytest.mark.parametrize(("calls", "refused"), [
    ((2, 18), [(b"v1", 3), (b"v17", 2)]),  # inside run 0-4, inside run 15-19
    ((1,), [(b"v0", 4)]),  # the first send of run 0-4
    ((16,), [(b"v15", 4)]),  # the first send of run 15-19
    ((20,), [(b"v19", 0)]),  # the last send of run 15-19: nothing after it
    ((5, 16), [(b"v4", 0), (b"v15", 4)]),  # the last of one run, the first of the next
])
def test_a_refused_produce_in_a_batch_sends_the_rest_of_it_through_the_step(
        calls: tuple[int, ...], refused: list[tuple[bytes, int]]) -> None:
    from confluent_kafka import KafkaError, KafkaException

    # Every send is one produce call (a refused one too, then sent through send_counted),
    # in order: calls 1-5 are run 0-4's sends and 16-20 run 15-19's, the two runs the fast
    # path produces; calls 6-15 and 21-24 are the step's (runs 5-9, 10-14 and 20-23).
    errors: list[BaseException] = [
        BufferError("queue full"), KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))]
    refuse = {call: errors[k % 2] for k, call in enumerate(calls)}
    python, _ = _drain(_batch_relay, BYTES, BYTES, False, refuse, max_records=5)
    native, counting = _drain(_batch_relay, BYTES, BYTES, True, refuse, max_records=5)
    assert native[0] == python[0], "every send, in order, once"
    assert native[1:] == python[1:]
    assert counting.refused == refused, "each refusal lands on a run of the fast path's"
    assert native[2] == native[3] == len(native[0]) == 24 and native[5] == 5
    # Both runs called in Rust; a run with a refused send is finished (handled) by the step.
    assert (counting.calls, counting.handled) == (2, 10 - 5 * len(calls))


@pytest.mark.parametrize("call", [8, 18, 20])
def test_a_batch_handlers_call_counts_when_producing_its_sends_then_raises(call: int) -> None:
    # Produce calls 1-5 and 16-20 are the fast path's runs 0-4 and 15-19, the others the
    # step's (runs 5-9, 10-14, 20-23). A KeyboardInterrupt from produce() at ``call`` (in a
    # run of the step's, or in the middle or at the end of one of the fast path's) ends the
    # drain after that run's handler was called: the call counts on both paths alike, the
    # run's deliveries do not.
    refuse: dict[int, BaseException] = {call: KeyboardInterrupt()}
    python, _ = _drain(_batch_relay, BYTES, BYTES, False, refuse, max_records=5)
    native, _ = _drain(_batch_relay, BYTES, BYTES, True, refuse, max_records=5)
    assert native == python
    assert python[4] is not None and python[4][0] == "KeyboardInterrupt"
    runs = (call - 1) // 5
    assert python[2] == 5 * runs and python[5] == runs + 1, "delivered, handler calls"


def test_what_a_raising_batch_call_had_handled_is_counted() -> None:
    # A BaseException from a batch handler leaves the fast path at once; the runs handled
    # before it (0-4 and 10-14 in Rust, 5-9 in Python) still count, and so does the call
    # of the raising run 15-19 (a call counts once made), but none of its deliveries.
    def handler(ds: Sequence[Delivery[Any, Any]], s: State) -> Any:
        if ds[0].offset == 15:
            raise KeyboardInterrupt
        return _batch_relay(ds, s)

    counts = []
    for fast in (False, True):
        engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
        engine.start({})
        # No application headers but at 6: runs 0-4 (Rust), 5-9 (Python), 10-14 (Rust).
        for m in _records(BYTES, 24):
            engine.receive(m if m.position == 6 else ReceivedMessage(
                m.channel, m.position, m.timestamp_ms, m.key, m.value, ()))
        stores = _Stores()
        txn = _Txn({})
        process = Process("p").receives_batch(Channel("in", BYTES, BYTES), handler, 5)
        step = TaskStep(task=0, engine=engine, frame=HandlerFrame(process.sends(OUT), 0, stores),
                        stores=stores, txn=txn, channels={"in": CH},  # type: ignore[arg-type]
                        ordering_topic="o", store_topics={}, fast=fast)
        step.batches = _FixedBatches(20)  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            _drain_all(step)
        counts.append((step.delivered, txn.ledger.counted, len(txn.sent), step.handler_batches))
    assert counts[0] == counts[1] == (15, 15, 15, 4)


@pytest.mark.parametrize("batched", [False, True], ids=["per record", "batch"])
@pytest.mark.parametrize("where", ["decoding", "serializing"])
def test_an_interrupt_inside_a_serde_is_raised_as_the_python_frame_raises_it(
        monkeypatch: pytest.MonkeyPatch, where: str, batched: bool) -> None:
    # A KeyboardInterrupt arrives once (a signal is delivered once), inside a Python-level
    # serde the fast path calls (the STRING decoder, JsonSerde.serialize) at offset 3. The
    # Python frame raises it; the fast path must too, not take it for the serde's failure
    # and hand the entry back to be decoded or serialized again (the interrupt lost).
    import parsley.serdes
    from parsley.serdes import JsonSerde

    utf8, serialize = parsley.serdes._utf8, JsonSerde.serialize
    interrupted: list[bool] = []

    def once(hit: bool) -> None:
        if hit and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt

    def decode(data: bytes) -> str:
        once(data == b"v3")
        return utf8(data)

    def encode(self: JsonSerde, value: Any) -> bytes | None:
        once(value == {"v": "v3"})
        return serialize(self, value)

    if where == "decoding":
        monkeypatch.setattr(parsley.serdes, "_utf8", decode)
    else:
        monkeypatch.setattr(JsonSerde, "serialize", encode)
    received = Channel("in", STRING, STRING)
    counts = []
    for fast in (False, True):
        interrupted.clear()
        engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH])
        engine.start({})
        for m in _records(STRING, 8, app_headers=False):
            engine.receive(m)
        stores = _Stores()
        txn = _Txn({})
        if batched:
            process = Process("p").receives_batch(received, _batch_text_relay, 5)
        else:
            process = Process("p").receives(received, _text_relay)
        # (the frame takes its serdes' callables when it is built: after the patch)
        step = TaskStep(task=0, engine=engine,
                        frame=HandlerFrame(process.sends(TEXT_OUT), 0, stores),
                        stores=stores, txn=txn, channels={"in": CH},  # type: ignore[arg-type]
                        ordering_topic="o", store_topics={}, fast=fast)
        assert (step._fast is not None) == fast
        step.batches = _FixedBatches(8)  # type: ignore[assignment]
        with pytest.raises(KeyboardInterrupt):
            _drain_all(step)
        counts.append((step.delivered, txn.ledger.counted, txn.sent, step.handler_batches))
    assert counts[0] == counts[1]
    assert counts[0][0] == (0 if batched else 3)
    # A batch handler's call counts once made: not when its run's decode is interrupted.
    assert counts[0][3] == (1 if batched and where == "serializing" else 0)


# -- two received channels ----------------------------------------------------------------
#
# Records of channels "a" and "b" whose first record in each segment names the other
# channel's last one as its cause, so the engine delivers them segment by segment: a run of
# a batch handler ends where its channel's segment does (the channel boundary), at its
# max_records, or at the end of a delivery batch (10), whichever comes first.

CH_B = ChannelId(UUID(int=0xBEEF), 0)
_SEGMENTS = [("a", 3), ("b", 2), ("a", 4), ("b", 3), ("a", 1), ("b", 1), ("a", 6), ("b", 5),
             ("a", 2), ("b", 1)]


class _Reversed:
    """A serde that is not built in (the fast path takes no channel of it): bytes reversed."""

    def serialize(self, value: bytes | None) -> bytes | None:
        return None if value is None else bytes(value)[::-1]

    def deserialize(self, data: bytes | None) -> bytes | None:
        return None if data is None else data[::-1]


# (handler, key serde, value serde, max_records or None for a per-record handler)
Spec = tuple[Any, Any, Any, int | None]


def _drain_channels(a: Spec, b: Spec, fast: bool,
                    refuse: dict[int, BaseException]) -> tuple[tuple[Any, ...], _Counting]:
    """Drain :data:`_SEGMENTS` of channels "a" (``CH``) and "b" (``CH_B``), each received as
    its spec says, in delivery batches of 10. Returns ``(sent, store writes applied,
    delivered, produce calls counted, failure, batch-handler calls, every handler call:
    its channel and what it was handed)`` and the fast path's :class:`_Counting`."""
    from parsley.wire import CAUSES_HEADER, encode_causes

    ids = {"a": CH, "b": CH_B}
    serdes = {"a": a[2], "b": b[2]}
    engine = engine_cls("native")(InMemoryOrderingStore(), received=[CH, CH_B])
    engine.start({})
    positions = {"a": 0, "b": 0}
    for name, n in _SEGMENTS:
        other = "b" if name == "a" else "a"
        for j in range(n):
            q = positions[name]
            headers: tuple[tuple[str, bytes], ...] = ()
            if j == 0 and positions[other]:
                headers = ((CAUSES_HEADER, encode_causes({ids[other]: positions[other] - 1})),)
            value = b'{"n": %d}' % q if serdes[name] is JSON else b"%s-v%d" % (name.encode(), q)
            engine.receive(ReceivedMessage(ids[name], q, 1000 + q,
                                           None if q % 6 == 5 else b"%s-k%d" % (name.encode(), q),
                                           value, headers))
            positions[name] += 1
    handed: list[tuple[Any, ...]] = []
    process = Process("p")
    for name, (handler, key_serde, value_serde, max_records) in (("a", a), ("b", b)):
        def logged(arg: Any, s: State, handler: Any = handler, name: str = name) -> Any:
            ds = [arg] if isinstance(arg, Delivery) else arg
            handed.append((name, type(arg).__name__, *[
                (d.topic, d.partition, d.offset, d.timestamp, d.key, d.value, d.headers)
                for d in ds]))
            return handler(arg, s)
        channel = Channel(name, key_serde, value_serde)
        process = (process.receives(channel, logged) if max_records is None
                   else process.receives_batch(channel, logged, max_records))
    process = process.sends(OUT, TEXT_OUT).stores(COUNTS)
    return _step_through(process, engine, ids, refuse, fast, 10, handed)


_TWO_CHANNELS: dict[str, tuple[Spec, Spec, tuple[int, ...]]] = {
    # name: (channel a, channel b, produce calls refused in the "refused sends" variant:
    # each one the fast path makes)
    "a batched channel beside a per-record one": (
        (_batch_relay, BYTES, BYTES, 3), (_relay, BYTES, BYTES, None), (3, 13, 20)),
    "two batched channels": (
        (_batch_relay, BYTES, BYTES, 3), (_batch_text_relay, STRING, JSON, 4), (3, 13, 20)),
    # Only b's runs are the fast path's: b 0-1 (produce calls 4-5), 2 (10), 3-4 (11-12),
    # 5 (14), 6-9 (21-24), 10 (25) and 11 (28).
    "a batched channel with a serde not built in beside one with built-in serdes": (
        (_batch_relay, BYTES, _Reversed(), 3), (_batch_relay, BYTES, BYTES, 4),
        (4, 12, 22, 28)),
    "a per-record channel with a serde not built in beside a batched one": (
        (_relay, _Reversed(), BYTES, None), (_batch_relay, BYTES, BYTES, 4), (4, 12, 22, 28)),
}


@pytest.mark.parametrize("refused", [False, True], ids=["", "refused sends"])
@pytest.mark.parametrize("case", sorted(_TWO_CHANNELS))
def test_the_fast_path_cuts_runs_at_the_channel_boundary_as_the_step_does(
        case: str, refused: bool) -> None:
    from confluent_kafka import KafkaError, KafkaException

    a, b, calls = _TWO_CHANNELS[case]
    errors: list[BaseException] = [
        BufferError("queue full"), KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))]
    refuse = {call: errors[k % 2] for k, call in enumerate(calls)} if refused else {}
    python, _ = _drain_channels(a, b, False, refuse)
    native, counting = _drain_channels(a, b, True, refuse)
    assert native == python
    assert python[4] is None and python[2] == len(python[0]) == 28
    # Runs end at a channel's segment, at its max_records and at a delivery batch's end.
    runs = [(name, [d[2] for d in ds]) for name, kind, *ds in python[6] if kind == "list"]
    assert python[5] == len(runs)
    if case == "two batched channels":
        assert runs == [("a", [0, 1, 2]), ("b", [0, 1]), ("a", [3, 4, 5]), ("a", [6]),
                        ("b", [2]), ("b", [3, 4]), ("a", [7]), ("b", [5]), ("a", [8, 9, 10]),
                        ("a", [11, 12, 13]), ("b", [6, 7, 8, 9]), ("b", [10]),
                        ("a", [14, 15]), ("b", [11])]
    custom = {name for name, spec in (("a", a), ("b", b)) if isinstance(spec[2], _Reversed)
              or isinstance(spec[1], _Reversed)}
    assert counting.handled > 0 and (counting.calls > 0) == any(
        spec[3] is not None for name, spec in (("a", a), ("b", b)) if name not in custom)
    if custom:
        assert STOP_RECORD in counting.stops, "the channel not built in is handed back"
    assert len(counting.refused) == len(refuse), "each refusal lands on the fast path"


@pytest.mark.parametrize("max_records", [0, -1, -(2**70)])
def test_a_fast_frame_refuses_a_max_records_below_1(max_records: int) -> None:
    from parsley.native import NATIVE
    from parsley.wire import CAUSES_HEADER

    assert NATIVE is not None, "the native core did not build (make venv builds it)"
    inputs = {id(CH): ("in", 0, _batch_relay, bytes, bytes, max_records)}
    with pytest.raises(ValueError, match="max_records must be at least 1"):
        NATIVE.FastFrame(inputs, {}, None, None, (Delivery, Effects, Send, Channel), print, print,
                         CAUSES_HEADER)


def test_a_run_handed_back_for_a_late_entrys_headers_decodes_nothing_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Runs 5-9, 10-14 and 20-23 hold a record with application headers (6, 13, 20), and
    # are handed back whole: the fast path must see that before it decodes their earlier
    # entries (which the Python frame then decodes again), so each path decodes as often.
    import parsley.serdes

    utf8 = parsley.serdes._utf8
    decoded: list[bytes] = []

    def decode(data: bytes) -> str:
        decoded.append(data)
        return utf8(data)

    monkeypatch.setattr(parsley.serdes, "_utf8", decode)
    results = []
    for fast in (False, True):
        decoded.clear()
        result, counting = _drain(_batch_text_relay, STRING, STRING, fast, {}, max_records=5)
        results.append((result, list(decoded)))
    assert results[1] == results[0]
    assert counting.calls == 2 and STOP_RECORD in counting.stops
