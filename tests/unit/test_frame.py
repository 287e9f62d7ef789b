"""The handler frame (parsley/frame.py): decode, call, latch, plan, serialize.

Every refusal is asserted by reason and by its whole detail, which opens with its
reason's runbook shape (``tests/seed_shapes.py``) and names the process after it.
"""

from __future__ import annotations

import contextlib
import os
import pickle
from collections.abc import Callable
from typing import Any

import multiprocess
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multiprocess.reduction import ForkingPickler

from parsley.declarations import Channel, Delivery, Effects, Process, Send, State, Store
from parsley.engine.channel import Header
from parsley.frame import (
    APPLICATION_REMEDY,
    FrameResult,
    HandlerFailure,
    HandlerFrame,
    SerializedSend,
    SerializedWrite,
)
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import BYTES, JSON, STRING
from tests.seed_shapes import assert_seed_shape

ORDERS: Channel[str, Any] = Channel("orders", STRING, JSON)
AUDIT: Channel[str, Any] = Channel("audit", STRING, JSON)
COUNTS: Store[str, Any] = Store("counts", STRING, JSON)

HandlerFn = Callable[[Delivery[Any, Any], State], Any]


class DictStores:
    """A StoreView over a dict, with the worker's apply step, for tests."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, bytes], bytes] = {}
        self.reads: list[tuple[str, bytes]] = []

    def get(self, store_name: str, key: bytes) -> bytes | None:
        self.reads.append((store_name, key))
        return self.data.get((store_name, key))

    def apply(self, result: FrameResult) -> None:
        for write in result.writes:
            if write.value is None:
                self.data.pop((write.store, write.key), None)
            else:
                self.data[(write.store, write.key)] = write.value


def bare(refusal: ParsleyFailClosedError) -> str:
    """The detail without the frame's common remedy, which it must end with; the detail
    opens with its reason's runbook shape."""
    assert refusal.detail.endswith(APPLICATION_REMEDY), refusal.detail
    assert_seed_shape(refusal.reason, refusal.detail)
    return refusal.detail.removesuffix(APPLICATION_REMEDY)


def _frame(handler: HandlerFn, stores: DictStores | None = None, *,
           sends: tuple[Channel[Any, Any], ...] = (AUDIT,),
           declared: tuple[Store[Any, Any], ...] = (COUNTS,)) -> HandlerFrame:
    process = Process("tally").receives(ORDERS, handler).sends(*sends).stores(*declared)
    return HandlerFrame(process, 3, stores if stores is not None else DictStores())


def _deliver(frame: HandlerFrame, *, key: bytes | None = b"k", value: bytes | None = b'{"n":1}',
             offset: int = 41, headers: tuple[Header, ...] = ()) -> FrameResult:
    return frame.deliver("orders", 3, offset, 1_700_000_000_000, key, value, headers)


def _refusal(frame: HandlerFrame, **kwargs: Any) -> ParsleyFailClosedError:
    with pytest.raises(ParsleyFailClosedError) as info:
        _deliver(frame, **kwargs)
    return info.value


# --- the happy path -------------------------------------------------------------------------


def test_delivery_state_and_serialized_effects() -> None:
    seen: list[Delivery[Any, Any]] = []

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        seen.append(delivery)
        count = (state.get(COUNTS, delivery.key) or 0) + delivery.value["n"]
        return (Effects.builder()
                .put(COUNTS, delivery.key, count)
                .send(AUDIT, delivery.key, {"count": count}, headers=[("trace", b"t1")])
                .send(AUDIT, None, None, timestamp=7)
                .delete(COUNTS, "gone")
                .build())

    stores = DictStores()
    frame = _frame(handler, stores)
    first = _deliver(frame, headers=(("parsley.causes", b"\x01\x00"), ("app", b"a"), ("n", None)))
    assert seen[0] == Delivery("orders", 3, 41, 1_700_000_000_000, "k", {"n": 1},
                               (("app", b"a"), ("n", None))), "parsley.* headers must be removed"
    assert first == FrameResult(
        sends=(SerializedSend("audit", b"k", b'{"count":1}', (("trace", b"t1"),),
                              1_700_000_000_000),
               SerializedSend("audit", None, None, (), 7)),
        writes=(SerializedWrite("counts", b"k", b"1"), SerializedWrite("counts", b"gone", None)),
    )
    stores.apply(first)
    second = _deliver(frame, value=b'{"n":5}', offset=42)
    assert second.writes[0] == SerializedWrite("counts", b"k", b"6"), (
        "a read must see the previous delivery's write")
    assert stores.reads == [("counts", b"k"), ("counts", b"k")]


def test_run_plans_what_deliver_returns_with_a_new_header_list_per_send() -> None:
    # The worker's form: the sends as tuples whose header lists it extends with
    # parsley.causes and hands to Producer.produce as they are.
    trace = (("trace", b"t1"),)

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        return (Effects.builder().send(AUDIT, delivery.key, delivery.value, headers=trace)
                .send(AUDIT, "k2", None).build())

    frame = _frame(handler)
    sends, writes = frame.run("orders", 3, 41, 1_700_000_000_000, b"k", b'{"n":1}')
    assert writes == ()
    assert sends == [("audit", b"k", b'{"n":1}', [("trace", b"t1")], 1_700_000_000_000),
                     ("audit", b"k2", None, [], 1_700_000_000_000)]
    sends[0][3].append(("parsley.causes", b"\x01"))
    sends[1][3].append(("parsley.causes", b"\x01"))
    again = _deliver(frame)
    assert [s.headers for s in again.sends] == [trace, ()], "each plan has its own list"
    assert frame.run("orders", 3, 41, 0, b"k", b'{"n":1}') != sends
    assert _frame(lambda d, s: Effects.none()).run("orders", 3, 1, 0, b"k", b"1") == ((), ())


def test_null_key_and_value_skip_the_serdes() -> None:
    seen: list[Delivery[Any, Any]] = []

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        seen.append(delivery)
        return Effects.none()

    assert _deliver(_frame(handler), key=None, value=None) == FrameResult()
    assert (seen[0].key, seen[0].value) == (None, None)


def test_an_emission_is_serialized_with_the_declared_channels_serdes() -> None:
    look_alike = Channel("audit", BYTES, BYTES)  # carries the name only

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        return Effects.builder().send(look_alike, "text-key", {"a": 1}).build()

    result = _deliver(_frame(handler))
    assert (result.sends[0].key, result.sends[0].value) == (b"text-key", b'{"a":1}')


# --- refusals the handler frame raises ------------------------------------------------------


def test_undecodable_value_and_key() -> None:
    frame = _frame(lambda d, s: Effects.none())
    refusal = _refusal(frame, value=b"{not json")
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNDECODABLE
    assert refusal.detail.startswith(
        "orders@41 value could not be decoded by the declared serde (process 'tally'; "
        "partition 3; JSONDecodeError: ")
    bare(refusal)  # ends with the remedy, opens with the shape
    assert isinstance(refusal.__cause__, ValueError)
    refusal = _refusal(frame, key=b"\xff", offset=9)
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNDECODABLE
    assert refusal.detail.startswith(
        "orders@9 key could not be decoded by the declared serde (process 'tally'; "
        "partition 3; UnicodeDecodeError: ")


def test_none_effects_are_refused() -> None:
    refusal = _refusal(_frame(lambda d, s: None))
    assert refusal.reason is Reason.HANDLER_RETURNED_NULL_EFFECTS
    assert bare(refusal) == ("handler for orders returned null effects; return "
                             "Effects.none() for a step that changes nothing (process 'tally')")


def test_emission_to_an_undeclared_channel() -> None:
    other = Channel("elsewhere", STRING, JSON)
    refusal = _refusal(_frame(lambda d, s: Effects.builder().send(other, "k", 1).build()))
    assert refusal.reason is Reason.EMISSION_TO_UNDECLARED_CHANNEL
    assert bare(refusal) == "tally emitted to undeclared channel elsewhere"


def test_write_to_an_undeclared_store_and_to_a_look_alike() -> None:
    other = Store("other", STRING, JSON)
    refusal = _refusal(_frame(lambda d, s: Effects.builder().put(other, "k", 1).build()))
    assert refusal.reason is Reason.STATE_ACCESS_TO_UNDECLARED_STORE
    assert bare(refusal) == ("write targets a store not declared by stores(...): other "
                             "(process 'tally')")
    look_alike = Store("counts", STRING, BYTES)
    refusal = _refusal(_frame(lambda d, s: Effects.builder().delete(look_alike, "k").build()))
    assert refusal.reason is Reason.STATE_ACCESS_TO_UNDECLARED_STORE
    assert bare(refusal) == ("write targets a store not declared by stores(...): counts (a "
                             "Store instance other than the declared one) (process 'tally')")


def test_equal_store_instance_is_the_declared_store() -> None:
    twin = Store("counts", STRING, JSON)  # equal serdes: as after pickling into a worker
    result = _deliver(_frame(lambda d, s: Effects.builder().put(twin, "k", s.get(twin, "k")
                                                                or 2).build()))
    assert result.writes == (SerializedWrite("counts", b"k", b"2"),)


def test_unserializable_payloads() -> None:
    refusal = _refusal(_frame(lambda d, s: Effects.builder().send(AUDIT, "k", object()).build()))
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    assert bare(refusal) == ("audit payload could not be serialized by the declared serde "
                             "(process 'tally'; value; TypeError: Type is not JSON "
                             "serializable: object)")
    refusal = _refusal(_frame(lambda d, s: Effects.builder().send(AUDIT, 5, 1).build()))
    assert bare(refusal) == ("audit payload could not be serialized by the declared serde "
                             "(process 'tally'; key; TypeError: STRING serializes str, got "
                             "int)")
    refusal = _refusal(_frame(lambda d, s: Effects.builder().put(COUNTS, "k", {1j}).build()))
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    assert refusal.detail.startswith("counts payload could not be serialized by the declared "
                                     "serde (process 'tally'; state write value; ")
    bare(refusal)
    refusal = _refusal(_frame(lambda d, s: Effects.builder().put(COUNTS, None, 1).build()))
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    assert bare(refusal) == ("counts state write key serialized to null; the declared key "
                             "serde could not encode it (process 'tally')")


class _StrSerializer:
    """Returns str, not bytes: a broken user serde."""

    def serialize(self, value: Any) -> Any:
        return str(value)

    def deserialize(self, data: bytes | None) -> Any:
        return data


def test_a_serializer_that_returns_non_bytes_is_unserializable() -> None:
    bad = Channel("audit", _StrSerializer(), _StrSerializer())
    frame = HandlerFrame(Process("tally").receives(ORDERS, lambda d, s: Effects.builder()
                                                   .send(bad, "k", 1).build()).sends(bad),
                         0, DictStores())
    refusal = _refusal(frame)
    assert bare(refusal) == ("audit payload could not be serialized by the declared serde "
                             "(process 'tally'; key; TypeError: serializer returned str, not "
                             "bytes)")


def test_reserved_header_from_the_builder_is_a_refusal_not_a_handler_failure() -> None:
    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        return Effects.builder().send(AUDIT, "k", 1, headers={"parsley.causes": b""}).build()

    refusal = _refusal(_frame(handler))
    assert refusal.reason is Reason.RESERVED_HEADER_USED
    assert refusal.detail == "serializer for audit wrote reserved header 'parsley.causes'"
    assert_seed_shape(Reason.RESERVED_HEADER_USED, refusal.detail)


def test_reserved_header_refusal_caught_by_the_application_is_latched() -> None:
    # Seed 001: every refusal raised inside the handler frame is latched and rethrown
    # at the frame's boundary, so a catch changes nothing but the stack trace.
    caught: list[Reason] = []

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        try:
            Effects.builder().send(AUDIT, "k", 1, headers=[("parsley.x", b"1")])
        except ParsleyFailClosedError as exc:
            caught.append(exc.reason)
        try:
            Send(AUDIT, "k", 2, (("parsley.y", None),))
        except ParsleyFailClosedError as exc:
            caught.append(exc.reason)
        return Effects.none()

    frame = _frame(handler)
    refusal = _refusal(frame)
    assert caught == [Reason.RESERVED_HEADER_USED, Reason.RESERVED_HEADER_USED]
    assert refusal.reason is Reason.RESERVED_HEADER_USED
    assert refusal.detail == ("serializer for audit wrote reserved header 'parsley.x'"), \
        "first wins"


def test_a_caught_refusal_is_latched_inside_a_latching_batch_too() -> None:
    # The worker sets the latch once per delivery batch (HandlerFrame.latching): a
    # refusal caught by the application is still rethrown, and the latch is gone after.
    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        with contextlib.suppress(ParsleyFailClosedError):
            Send(AUDIT, "k", 2, (("parsley.y", None),))
        return Effects.builder().send(AUDIT, "k", 1).build()

    frame = _frame(handler)
    with frame.latching():
        refusal = _refusal(frame)
        assert _deliver(_frame(lambda d, s: Effects.none())) == FrameResult((), ())
    assert refusal.reason is Reason.RESERVED_HEADER_USED
    from parsley.effects import _REFUSAL_LATCH

    assert _REFUSAL_LATCH.get() is None, "the latch is unset once the batch's block is left"


def test_reserved_header_outside_a_frame_still_raises_and_latches_nothing() -> None:
    with pytest.raises(ParsleyFailClosedError):
        Effects.builder().send(AUDIT, "k", 1, headers={"parsley.causes": b""})
    assert _deliver(_frame(lambda d, s: Effects.none())) == FrameResult((), ())


class _HeaderWriting:
    """A serde whose serializer adds a header, as Kafka serializers may."""

    def __init__(self, header: str) -> None:
        self.header = header

    def serialize(self, value: Any) -> bytes:
        raise AssertionError("the frame must use serialize_with_headers when it exists")

    def serialize_with_headers(self, value: Any, headers: list[Header]) -> bytes:
        headers.append((self.header, b"schema-7"))
        return STRING.serialize(value) or b""

    def deserialize(self, data: bytes | None) -> Any:
        return data


@pytest.mark.parametrize(("header", "refused"), [("schema", False), ("parsley.schema", True)])
def test_headers_written_by_a_serializer_are_checked(header: str, refused: bool) -> None:
    channel = Channel("audit", STRING, _HeaderWriting(header))
    process = Process("tally").receives(
        ORDERS, lambda d, s: Effects.builder().send(channel, "k", "v", {"app": b"1"}).build()
    ).sends(channel)
    frame = HandlerFrame(process, 0, DictStores())
    if not refused:
        sent = _deliver(frame).sends[0]
        assert sent.headers == (("app", b"1"), ("schema", b"schema-7")), "added header, in order"
        assert sent.value == b"v"
        return
    refusal = _refusal(frame)
    assert refusal.reason is Reason.RESERVED_HEADER_USED
    assert bare(refusal) == ("serializer for audit wrote reserved header 'parsley.schema' "
                             "(process 'tally')")


# --- state reads and the latch -------------------------------------------------------------


def _swallowing(read: Callable[[State], Any]) -> HandlerFn:
    """A handler that catches every refusal its read raises and carries on."""

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        with contextlib.suppress(ParsleyFailClosedError):  # the application's own catch
            read(state)
        return Effects.none()

    return handler


@pytest.mark.parametrize(
    ("read", "stored", "reason", "detail"),
    [
        (lambda s: s.get(Store("other", STRING, JSON), "k"), None,
         Reason.STATE_ACCESS_TO_UNDECLARED_STORE,
         "read targets a store not declared by stores(...): other (process 'tally')"),
        (lambda s: s.get(Store("counts", BYTES, JSON), b"k"), None,
         Reason.STATE_ACCESS_TO_UNDECLARED_STORE,
         "read targets a store not declared by stores(...): counts (a Store instance other "
         "than the declared one) (process 'tally')"),
        (lambda s: s.get(COUNTS, "k"), b"{oops", Reason.APPLICATION_PAYLOAD_UNDECODABLE,
         "counts stored value could not be decoded by the declared serde (process 'tally'; "
         "JSONDecodeError: "),
        (lambda s: s.get(COUNTS, 12), None, Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
         "counts state read key could not be serialized by the declared serde (process "
         "'tally'; TypeError: STRING serializes str, got int)"),
    ],
)
def test_a_swallowed_state_refusal_is_latched(read: Callable[[State], Any], stored: bytes | None,
                                             reason: Reason, detail: str) -> None:
    stores = DictStores()
    if stored is not None:
        stores.data[("counts", b"k")] = stored
    refusal = _refusal(_frame(_swallowing(read), stores))
    assert refusal.reason is reason, "the caught refusal must still stop the step"
    assert refusal.detail.startswith(detail), refusal.detail
    assert_seed_shape(reason, refusal.detail)
    if detail.endswith(": "):
        return  # a prefix: the decoder's own message follows
    assert bare(refusal) == detail


class _NullKey:
    def serialize(self, value: Any) -> None:
        return None

    def deserialize(self, data: bytes | None) -> Any:
        return data


def test_a_read_key_serialized_to_null_is_latched() -> None:
    store = Store("counts", _NullKey(), JSON)
    refusal = _refusal(_frame(_swallowing(lambda s: s.get(store, "k")), declared=(store,)))
    assert refusal.reason is Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    assert bare(refusal) == ("counts state read key could not be serialized by the declared "
                             "serde (process 'tally'; it serialized to null)")


def test_a_latched_refusal_beats_the_handlers_own_exception() -> None:
    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        try:
            state.get(Store("other", STRING, JSON), "k")
        except ParsleyFailClosedError as exc:
            raise RuntimeError("wrapped by the application") from exc
        return Effects.none()

    refusal = _refusal(_frame(handler))
    assert refusal.reason is Reason.STATE_ACCESS_TO_UNDECLARED_STORE


def test_the_latch_is_raised_once() -> None:
    calls: list[int] = []

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        calls.append(delivery.offset)
        if delivery.offset == 1:
            _swallowing(lambda s: s.get(Store("other", STRING, JSON), "k"))(delivery, state)
        return Effects.none()

    frame = _frame(handler)
    _refusal(frame, offset=1)
    assert _deliver(frame, offset=2) == FrameResult(), "a raised latch must not fire again"
    assert calls == [1, 2]


def test_a_null_read_key_is_a_programming_error() -> None:
    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        state.get(COUNTS, None)
        return Effects.none()

    with pytest.raises(HandlerFailure, match="ValueError: tally: counts state read key must not"):
        _deliver(_frame(handler))


# --- validation before any write -------------------------------------------------------------


class _Counting:
    """STRING that counts its serialize calls."""

    def __init__(self) -> None:
        self.calls = 0

    def serialize(self, value: Any) -> bytes | None:
        self.calls += 1
        return STRING.serialize(value)

    def deserialize(self, data: bytes | None) -> Any:
        return STRING.deserialize(data)


def test_every_target_is_validated_before_anything_is_serialized() -> None:
    counting = _Counting()
    store = Store("counts", counting, counting)
    other = Channel("elsewhere", STRING, STRING)
    stores = DictStores()
    frame = _frame(lambda d, s: Effects.builder().put(store, "a", "1").send(AUDIT, "k", 1)
                   .send(other, "k", "v").build(), stores, declared=(store,))
    refusal = _refusal(frame)
    assert refusal.reason is Reason.EMISSION_TO_UNDECLARED_CHANNEL
    assert counting.calls == 0, "no payload may be serialized before every target is resolved"
    assert stores.data == {}


def test_a_bad_second_effect_leaves_no_first_write() -> None:
    stores = DictStores()
    frame = _frame(lambda d, s: Effects.builder().put(COUNTS, "a", 1).put(COUNTS, "b", object())
                   .build(), stores)
    with pytest.raises(ParsleyFailClosedError) as info:
        stores.apply(_deliver(frame))
    assert info.value.reason is Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    assert stores.data == {}, "the first write must not be applied when the second is refused"


# --- application failures ---------------------------------------------------------------------


def test_a_handler_exception_is_an_application_failure() -> None:
    boom = KeyError("missing")

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        raise boom

    with pytest.raises(HandlerFailure) as info:
        _deliver(_frame(handler), offset=17)
    failure = info.value
    assert str(failure) == "handler for orders failed at task 3, orders-3@17: KeyError: 'missing'"
    assert failure.__cause__ is boom
    assert (failure.task, failure.topic, failure.partition, failure.offset) == (3, "orders", 3, 17)
    copy = pickle.loads(pickle.dumps(failure))
    assert str(copy) == str(failure) and copy.offset == 17, "failures cross to the coordinator"
    assert ParsleyFailClosedError.find_in(failure) is None, "an application failure has no reason"


def test_a_negative_emission_timestamp_fails_the_handler() -> None:
    handler: HandlerFn = lambda d, s: Effects.builder().send(AUDIT, "k", 1, timestamp=-5).build()  # noqa: E731
    with pytest.raises(HandlerFailure) as info:
        _deliver(_frame(handler))
    assert str(info.value) == ("handler for orders failed at task 3, orders-3@41: ValueError: "
                               "audit: timestamp must be >= 0 ms, got -5")


def test_returning_something_other_than_effects_fails_the_handler() -> None:
    with pytest.raises(HandlerFailure) as info:
        _deliver(_frame(lambda d, s: [1, 2]))
    assert str(info.value).endswith("TypeError: handler returned list, not Effects")


def test_a_builder_returned_without_build_is_named() -> None:
    with pytest.raises(HandlerFailure) as info:
        _deliver(_frame(lambda d, s: Effects.builder().send(AUDIT, "k", 1)))
    assert str(info.value).endswith(
        "TypeError: handler returned EffectsBuilder, not Effects: call .build() on it")


def test_a_topic_the_process_does_not_receive_is_a_worker_bug() -> None:
    with pytest.raises(ValueError, match="tally was fed audit, which it does not receive"):
        _frame(lambda d, s: Effects.none()).deliver("audit", 0, 0, 0, None, None)


# --- pickling into a spawned worker ------------------------------------------------------------


def _run_in_child(blob: bytes) -> Any:
    """Child side: unpickle the declaration, run one delivery through a frame."""
    from multiprocess.reduction import ForkingPickler as Pickler

    from parsley.frame import HandlerFrame as Frame

    class View:
        def get(self, store_name: str, key: bytes) -> bytes | None:
            return b"10" if (store_name, key) == ("seen", b"a") else None

    process = Pickler.loads(blob)
    result = Frame(process, 0, View()).deliver("orders", 0, 5, 1000, b"a", b"{}", ())
    return os.getpid(), [(w.store, w.key, w.value) for w in result.writes]


def _closure_process() -> Process:
    seen = Store("seen", STRING, JSON)
    step = 2

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        count = state.get(seen, delivery.key) + step
        return Effects.builder().put(seen, delivery.key, count).build()

    return Process("tally").receives(ORDERS, handler).stores(seen)


def test_a_closure_declaration_runs_in_a_spawned_process() -> None:
    blob = bytes(ForkingPickler.dumps(_closure_process()))
    with multiprocess.get_context("spawn").Pool(1) as pool:
        pid, writes = pool.apply(_run_in_child, (blob,))
    assert pid != os.getpid(), "the frame must have run in another process"
    assert writes == [("seen", b"a", b"12")], "the closure and its Store must work in the child"


# --- property: a step is planned whole or not at all -----------------------------------------

_OPS = st.lists(st.tuples(st.sampled_from(["send", "put", "delete"]),
                          st.booleans(),  # declared target?
                          st.booleans(),  # serializable payload?
                          st.text(max_size=5)), max_size=8)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_planning_is_all_or_nothing(ops: list[tuple[str, bool, bool, str]]) -> None:
    stray_channel = Channel("stray", STRING, JSON)
    stray_store = Store("stray", STRING, JSON)

    def handler(delivery: Delivery[Any, Any], state: State) -> Effects:
        builder = Effects.builder()
        for op, declared, good, key in ops:
            payload: Any = {"k": key} if good else {key: object()}
            if op == "send":
                builder.send(AUDIT if declared else stray_channel, key, payload)
            elif op == "put":
                builder.put(COUNTS if declared else stray_store, key, payload)
            else:
                builder.delete(COUNTS if declared else stray_store, key)
        return builder.build()

    writes = [o for o in ops if o[0] != "send"]
    sends = [o for o in ops if o[0] == "send"]
    if any(not d for _, d, _, _ in writes):
        expected: Reason | None = Reason.STATE_ACCESS_TO_UNDECLARED_STORE
    elif any(not d for _, d, _, _ in sends):
        expected = Reason.EMISSION_TO_UNDECLARED_CHANNEL
    elif any(not g for op, _, g, _ in ops if op != "delete"):
        expected = Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE
    else:
        expected = None
    stores = DictStores()
    frame = _frame(handler, stores)
    if expected is not None:
        refusal = _refusal(frame)
        assert refusal.reason is expected, f"{ops}: the first planning refusal by the two-pass rule"
        return
    result = _deliver(frame)
    assert [(w.key, w.value) for w in result.writes] == [
        (k.encode(), None if op == "delete" else orjson.dumps({"k": k})) for op, _, _, k in writes]
    assert [(s.key, s.value) for s in result.sends] == [
        (k.encode(), orjson.dumps({"k": k})) for _, _, _, k in sends]
