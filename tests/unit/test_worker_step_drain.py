"""The drain loop of :class:`workers.step.TaskStep` with a real engine and a recording
transaction (no Kafka): the stamp it appends, and the batch bound by the time left."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import ProcessEngine
from parsley.engine.store import InMemoryOrderingStore
from parsley.wire import CAUSES_HEADER
from workers import step as step_module
from workers.step import TaskStep

CH = ChannelId(UUID(int=0xA), 0)


class _Ledger:
    def sent(self, n: int) -> None:
        pass

    def on_delivery(self, err: Any, msg: Any) -> None:
        pass


class _Producer:
    """``Producer.produce``'s shape, recording into its transaction's ``sent``."""

    def __init__(self, txn: _Txn) -> None:
        self._txn = txn
        self.refuse: list[BaseException] = []  # raised by the next calls, in order

    def produce(self, topic: str, value: Any, key: Any, *, on_delivery: Any, timestamp: int,
                headers: list[tuple[str, bytes]]) -> None:
        if self.refuse:
            raise self.refuse.pop(0)
        self._txn.sent.append((topic, key, value, headers, timestamp))


class _Txn:
    """Records what is sent; opens on ``begin``."""

    def __init__(self, clock: Any) -> None:
        self.open = False
        self.opened_at = 0.0
        self.ledger = _Ledger()
        self.producer = _Producer(self)
        self.full_path: list[Any] = []  # keys sent through send_counted
        self.sent: list[tuple[str, Any, Any, list[tuple[str, bytes]], int]] = []
        self._clock = clock

    def begin(self) -> None:
        if not self.open:
            self.open = True
            self.opened_at = self._clock()

    def send_counted(self, topic: str, key: Any, value: Any,
                     headers: list[tuple[str, bytes]], ts: int) -> None:
        self.full_path.append(key)
        self.sent.append((topic, key, value, headers, ts))


class _Stores:
    def apply(self, writes: Any) -> None:
        pass


class _Frame:
    """A handler whose sends' header lists a headers-aware serializer kept."""

    batch_limits: dict[str, int] = {}  # noqa: RUF012 - no batch handler (receives_batch)

    def __init__(self, cost_s: Sequence[float] = (), clock: Any = None) -> None:
        self.kept: list[list[tuple[str, bytes]]] = []
        self._costs = iter(cost_s)
        self._clock = clock

    def latching(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def plan(self, *args: Any) -> Any:
        raise AssertionError("only the native fast path hands effects back")

    def handler_raised(self, *args: Any) -> Any:
        raise AssertionError("only the native fast path hands an exception back")

    def run(self, topic: str, partition: int, position: int, ts: int, key: Any,
            value: Any, headers: Any) -> tuple[list[Any], None]:
        if self._clock is not None:
            self._clock.advance(next(self._costs))
        h = [("app", b"1")]
        self.kept.append(h)
        return [("out", key, value, h, ts)], None


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, s: float) -> None:
        self.now += s


def _engine(n: int) -> ProcessEngine:
    engine = ProcessEngine(InMemoryOrderingStore(), received=(CH,))
    engine.start({})
    for q in range(n):
        engine.receive(ReceivedMessage(CH, q, 1, b"k", b"v", ()))
    return engine


def _step(engine: ProcessEngine, frame: _Frame, txn: _Txn, **kw: Any) -> TaskStep:
    return TaskStep(task=0, engine=engine, frame=frame, stores=_Stores(),  # type: ignore[arg-type]
                    txn=txn, channels={"in": CH}, ordering_topic="o",  # type: ignore[arg-type]
                    store_topics={}, fast=False, **kw)


def test_a_headers_aware_serializer_never_sees_the_causes_stamp_in_its_list() -> None:
    frame = _Frame()
    txn = _Txn(_Clock())
    assert _step(_engine(3), frame, txn).drain() == 3
    assert all(h == [("app", b"1")] for h in frame.kept), frame.kept
    for _, _, _, headers, _ in txn.sent:
        assert headers[0] == ("app", b"1") and headers[-1][0] == CAUSES_HEADER


def test_a_full_queue_or_a_produce_failure_takes_the_full_path_once_per_record() -> None:
    # Nothing was queued by the refused call: send_counted (which waits out a full queue
    # and classifies a failure) sends that record, and nothing is sent twice.
    from confluent_kafka import KafkaError, KafkaException

    frame = _Frame()
    txn = _Txn(_Clock())
    txn.producer.refuse = [BufferError("queue full"),
                           KafkaException(KafkaError(KafkaError._MSG_TIMED_OUT))]
    assert _step(_engine(3), frame, txn).drain() == 3
    assert [k for _, k, _, _, _ in txn.sent] == [b"k", b"k", b"k"]
    assert len(txn.full_path) == 2
    for _, _, _, headers, _ in txn.sent:
        assert [h[0] for h in headers] == ["app", CAUSES_HEADER]


def test_a_slowing_handler_never_carries_the_transaction_past_its_close_time(
        monkeypatch: Any) -> None:
    # 1 ms per message, then the downstream slows to 150 ms: close after 5 s.
    clock = _Clock()
    monkeypatch.setattr(step_module.time, "monotonic", clock)
    costs = list(itertools.chain(itertools.repeat(0.001, 400), itertools.repeat(0.150, 400)))
    frame = _Frame(costs, clock)
    txn = _Txn(clock)
    closes: list[float] = []

    def close() -> None:
        closes.append(clock() - txn.opened_at)
        txn.open = False

    step = _step(_engine(800), frame, txn, close_after_s=5.0, close=close)
    while True:
        step.drain()
        if not step.more:
            break
    assert step.delivered == 800
    # Each transaction closes between batches; a batch taken within the time left at the
    # slowest recent cost ends before the close time, except the one batch in which the
    # handler slowed (at most MAX_DELIVERY_BATCH heads at the new cost) -- and that one
    # still ends within transaction.timeout.ms (10 s).
    assert closes and max(closes) < 10.0, closes
    late = [c for c in closes if c > 5.0 + 0.150]
    assert len(late) <= 1, closes
