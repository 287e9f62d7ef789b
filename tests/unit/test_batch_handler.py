"""Batch handlers (``Process.receives_batch``) against the per-record path as the reference.

The same records, with causes across two received channels (so some are held and released
later), are drained by the worker's :class:`workers.step.TaskStep` once with per-record
handlers and once with a batch handler on one channel that does per delivery what the
per-record handler does. The batch path must send the same records in the same order, write
the same store values, and stamp each send with a frontier that covers at least the
reference's (never fewer causes), taken at most one batch later. The test driver
(``parsley.testing``) is held to the same. Refusals and bad input get their own tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley import Channel, Effects, Process, Store
from parsley.declarations import Delivery, State
from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.store import InMemoryOrderingStore
from parsley.frame import HandlerFailure, HandlerFrame
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import BYTES, JSON, STRING
from parsley.testing import ParsleyTestDriver
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes
from tests.engines import engine_cls
from tests.unit.test_worker_fastpath import _drain_all, _Stores, _Txn
from workers.step import TaskStep

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 0)
OUT = Channel("out", BYTES, BYTES)
COUNTS = Store("counts", STRING, JSON)


def _relay(d: Delivery[Any, Any], s: State) -> Effects:
    return Effects.builder().send(OUT, d.key, d.value, timestamp=d.timestamp).build()


def _batch_relay(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
    b = Effects.builder()
    for d in ds:
        b.send(OUT, d.key, d.value, timestamp=d.timestamp)
    return b.build()


def _count(d: Delivery[Any, Any], s: State) -> Effects:
    n = (s.get(COUNTS, "n") or 0) + 1
    return (Effects.builder().put(COUNTS, "n", n)
            .send(OUT, d.key, b"%d" % n, timestamp=d.timestamp).build())


def _batch_count(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
    # The batch's own writes are seen only through this code: read once, count locally.
    n = s.get(COUNTS, "n") or 0
    b = Effects.builder()
    for d in ds:
        n += 1
        b.put(COUNTS, "n", n).send(OUT, d.key, b"%d" % n, timestamp=d.timestamp)
    return b.build()


def _naive_batch_count(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
    # Reads the store per delivery: it sees the state before the batch every time.
    b = Effects.builder()
    for d in ds:
        n = (s.get(COUNTS, "n") or 0) + 1
        b.put(COUNTS, "n", n).send(OUT, d.key, b"%d" % n, timestamp=d.timestamp)
    return b.build()


Record = tuple[ChannelId, int, int | None]  # channel, position, cause position on the other


def _messages(records: Sequence[Record]) -> list[ReceivedMessage]:
    out = []
    for ch, pos, cause in records:
        other = B if ch is A else A
        headers = () if cause is None else (
            (CAUSES_HEADER, encode_causes({other: cause})),)
        out.append(ReceivedMessage(ch, pos, 1000 + pos, b"%s%d" % (b"a" if ch is A else b"b",
                                                                   pos),
                                   b"v%d" % pos, headers))
    return out


@st.composite
def _streams(draw: st.DrawFn) -> list[Record]:
    """Records on A and B in a random interleaving, each channel's in offset order; some
    name a cause on the other channel (possibly not yet fed: held until it is)."""
    n_a = draw(st.integers(0, 40))
    n_b = draw(st.integers(0, 40))
    cursors = {A: 0, B: 0}
    total = {A: n_a, B: n_b}
    out: list[Record] = []
    while cursors[A] < n_a or cursors[B] < n_b:
        choices = [ch for ch in (A, B) if cursors[ch] < total[ch]]
        ch = draw(st.sampled_from(choices))
        other = B if ch is A else A
        cause = None
        if total[other] and draw(st.booleans()):
            cause = draw(st.integers(0, total[other] - 1))
        out.append((ch, cursors[ch], cause))
        cursors[ch] += 1
    return out


def _drain(engine_name: str, process: Process, records: Sequence[Record],
           feeds: int) -> tuple[_Txn, _Stores, TaskStep]:
    """Feed ``records`` in ``feeds`` slices, draining after each, through a TaskStep."""
    engine = engine_cls(engine_name)(InMemoryOrderingStore(), received=[A, B])
    engine.start({})
    stores = _Stores()
    txn = _Txn({})
    step = TaskStep(task=0, engine=engine, frame=HandlerFrame(process, 0, stores),
                    stores=stores, txn=txn, channels={"a": A, "b": B},  # type: ignore[arg-type]
                    ordering_topic="o", store_topics={})
    msgs = _messages(records)
    size = max(1, -(-len(msgs) // feeds))
    for i in range(0, max(1, len(msgs)), size):
        for m in msgs[i:i + size]:
            engine.receive(m)
        _drain_all(step)
    return txn, stores, step  # type: ignore[return-value]


def _process(batched: bool, per_record: Any, batch: Any, max_records: int) -> Process:
    a = Channel("a", BYTES, BYTES)
    b = Channel("b", BYTES, BYTES)
    p = Process("p")
    p = p.receives_batch(a, batch, max_records) if batched else p.receives(a, per_record)
    return p.receives(b, per_record).sends(OUT).stores(COUNTS)


def _covers(wider: bytes, narrower: bytes) -> bool:
    w, n = decode_causes(wider), decode_causes(narrower)
    return all(ch in w and w[ch] >= pos for ch, pos in n.items())


@pytest.mark.parametrize("engine_name", ["native", "python"])
@pytest.mark.parametrize("handlers", ["relay", "counter"])
@settings(max_examples=60, deadline=None)
@given(records=_streams(), max_records=st.integers(1, 9), feeds=st.integers(1, 4))
def test_a_batch_handler_sends_what_the_per_record_path_sends_with_no_fewer_causes(
        engine_name: str, handlers: str, records: list[Record], max_records: int,
        feeds: int) -> None:
    per_record, batch = (_relay, _batch_relay) if handlers == "relay" else (_count, _batch_count)
    ref_txn, ref_stores, ref_step = _drain(
        engine_name, _process(False, per_record, batch, max_records), records, feeds)
    got_txn, got_stores, got_step = _drain(
        engine_name, _process(True, per_record, batch, max_records), records, feeds)
    strip = [(t, k, v, [h for h in hs if h[0] != CAUSES_HEADER], ts)
             for t, k, v, hs, ts in got_txn.sent]
    ref_strip = [(t, k, v, [h for h in hs if h[0] != CAUSES_HEADER], ts)
                 for t, k, v, hs, ts in ref_txn.sent]
    assert strip == ref_strip, "the same sends in the same (causal) order"
    assert got_stores.data == ref_stores.data
    assert got_step.delivered == ref_step.delivered == len(ref_txn.sent)
    ref_causes = [dict(hs)[CAUSES_HEADER] for *_, hs, _ts in ref_txn.sent]
    got_causes = [dict(hs)[CAUSES_HEADER] for *_, hs, _ts in got_txn.sent]
    for k, (got, ref) in enumerate(zip(got_causes, ref_causes, strict=True)):
        assert _covers(got, ref), f"send {k}: fewer causes than the per-record path"
        # ...and it is the frontier after a delivery at most one batch later.
        assert got in ref_causes[k:k + max_records], f"send {k}: more than one batch later"
    delivered_a = sum(1 for _t, k, *_ in ref_txn.sent if k.startswith(b"a"))
    assert -(-delivered_a // max_records) <= got_step.handler_batches <= delivered_a


def test_store_reads_in_a_batch_see_the_state_before_it() -> None:
    # A handler that reads the store per delivery sees none of the batch's own writes,
    # as the docstring of receives_batch says: its counts repeat within a batch.
    records: list[Record] = [(A, q, None) for q in range(6)]
    txn, _, step = _drain("native", _process(True, _relay, _naive_batch_count, 3),
                               records, 1)
    values = [v for _t, _k, v, _h, _ts in txn.sent]
    assert step.handler_batches >= 2
    assert values[0] == b"1" and values[-1] != b"6", values
    # ...where the handler that counts in its own code matches the per-record count.
    txn2, _, _ = _drain("native", _process(True, _count, _batch_count, 3), records, 1)
    assert [v for _t, _k, v, _h, _ts in txn2.sent] == [b"%d" % n for n in range(1, 7)]


def _frame(handler: Any, max_records: int = 3) -> HandlerFrame:
    proc = (Process("p").receives_batch(Channel("a", STRING, JSON), handler, max_records)
            .receives(Channel("b", BYTES, BYTES), _relay).sends(OUT))
    return HandlerFrame(proc, 0, _Stores())


def _entries(*values: bytes) -> list[tuple[int, int, bytes | None, bytes | None, tuple[()]]]:
    return [(10 + i, 500 + i, b"k", v, ()) for i, v in enumerate(values)]


def test_a_send_without_timestamp_gets_the_last_deliverys() -> None:
    frame = _frame(lambda ds, s: Effects.builder().send(OUT, b"k", b"x").build())
    sends, writes = frame.run_batch("a", 0, _entries(b"1", b"2", b"3"))
    assert [ts for *_, ts in sends] == [502] and writes == ()


def test_the_handler_gets_every_delivery_decoded_in_order() -> None:
    seen: list[Any] = []

    def handler(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
        seen.extend((d.topic, d.partition, d.offset, d.timestamp, d.key, d.value) for d in ds)
        return Effects.none()

    _frame(handler).run_batch("a", 0, _entries(b"1", b'{"x": 2}'))
    assert seen == [("a", 0, 10, 500, "k", 1), ("a", 0, 11, 501, "k", {"x": 2})]


def test_an_undecodable_record_in_a_batch_is_refused_naming_its_offset() -> None:
    frame = _frame(lambda ds, s: Effects.none())
    with pytest.raises(ParsleyFailClosedError) as err:
        frame.run_batch("a", 0, _entries(b"1", b"not json"))
    assert err.value.reason is Reason.APPLICATION_PAYLOAD_UNDECODABLE
    assert "a@11 value" in str(err.value)


def test_a_batch_handler_that_raises_names_the_first_delivery() -> None:
    def handler(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
        raise RuntimeError("boom")

    with pytest.raises(HandlerFailure) as err:
        _frame(handler).run_batch("a", 0, _entries(b"1", b"2"))
    assert err.value.offset == 10 and "RuntimeError: boom" in str(err.value)


def test_a_batch_handler_returning_none_is_refused() -> None:
    with pytest.raises(ParsleyFailClosedError) as err:
        _frame(lambda ds, s: None).run_batch("a", 0, _entries(b"1"))
    assert err.value.reason is Reason.HANDLER_RETURNED_NULL_EFFECTS


def test_a_batch_is_never_empty_nor_over_its_max_nor_handed_to_the_other_form() -> None:
    frame = _frame(lambda ds, s: Effects.none(), max_records=2)
    with pytest.raises(ValueError, match="a batch of 0"):
        frame.run_batch("a", 0, [])
    with pytest.raises(ValueError, match="a batch of 3"):
        frame.run_batch("a", 0, _entries(b"1", b"2", b"3"))
    with pytest.raises(ValueError, match="in batches"):
        frame.run("a", 0, 1, 1, None, b"1")
    with pytest.raises(ValueError, match="per record"):
        frame.run_batch("b", 0, _entries(b"1"))
    plans = frame.fast_plans()[0]
    assert (plans["a"][3], plans["b"][3]) == (2, None), "the fast path knows which is batched"


def test_receives_batch_checks_its_arguments() -> None:
    ch = Channel("a", BYTES, BYTES)
    with pytest.raises(ValueError, match=">= 1"):
        Process("p").receives_batch(ch, _batch_relay, 0)
    with pytest.raises(TypeError, match="must be an int"):
        Process("p").receives_batch(ch, _batch_relay, 2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not callable"):
        Process("p").receives_batch(ch, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="twice"):
        Process("p").receives(ch, _relay).receives_batch(ch, _batch_relay)
    p = Process("p").receives_batch(ch, _batch_relay)
    assert p.inputs[0].max_records == 500 and p.inputs[0].batched
    assert not Process("p").receives(ch, _relay).inputs[0].batched


@settings(max_examples=40, deadline=None)
@given(values=st.lists(st.integers(0, 99), max_size=30), max_records=st.integers(1, 7))
def test_the_test_driver_runs_a_batch_handler_as_the_per_record_one(
        values: list[int], max_records: int) -> None:
    src = Channel("src", STRING, JSON)
    dst = Channel("dst", STRING, JSON)

    def one(d: Delivery[Any, Any], s: State) -> Effects:
        return Effects.builder().send(dst, d.key, d.value * 2).build()

    def many(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
        b = Effects.builder()
        for d in ds:
            b.send(dst, d.key, d.value * 2)
        return b.build()

    outs = []
    for p in (Process("x").receives(src, one).sends(dst),
              Process("x").receives_batch(src, many, max_records).sends(dst)):
        driver = ParsleyTestDriver(p)
        driver.pause("src")  # piped while paused: fed in one step, so batches form
        for v in values:
            driver.pipe("src", v, "k")
        driver.resume("src")
        outs.append([(r.key, r.value) for r in driver.read("dst")])
        if p.inputs[0].batched:
            task = driver._process("x").tasks[0]
            assert task.batch_calls == -(-len(values) // max_records)
    assert outs[0] == outs[1] == [("k", v * 2) for v in values]


def test_the_test_driver_counts_a_batch_call_that_raised_as_the_worker_does() -> None:
    src = Channel("src", STRING, JSON)
    dst = Channel("dst", STRING, JSON)

    def boom(ds: Sequence[Delivery[Any, Any]], s: State) -> Effects:
        raise RuntimeError("boom")

    driver = ParsleyTestDriver(Process("x").receives_batch(src, boom, 5).sends(dst))
    with pytest.raises(HandlerFailure):
        driver.pipe("src", 1, "k")
    # Counted once the handler is called (HandlerFrame.batch_calls), raised or not.
    assert driver._process("x").tasks[0].batch_calls == 1
