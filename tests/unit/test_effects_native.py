"""The native constructors of ``Send`` and ``Effects`` against the Python reference.

``parsley._native.Constructors`` builds a ``Send`` itself only for arguments whose checks
cannot fail and calls ``parsley.effects._python_send`` for the rest
(native/src/py_effects.rs). Generated arguments, plain and not: every outcome is the
reference's, the same field values (the very key and value objects) or the same error in
the same words. The native core is part of the product: not built is a failure here, never
a skip.
"""

from __future__ import annotations

import enum
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsley import Channel, Effects, _native, serdes
from parsley import effects as parsley_effects
from parsley.effects import Send, _native_constructors, _python_send
from parsley.refusals import ParsleyFailClosedError

OUT = Channel("out", serdes.BYTES, serdes.BYTES)


class _SubChannel(Channel[Any, Any]):
    """A channel of a subclass: checked by the reference, never built natively."""


class _Ms(enum.IntEnum):
    T = 5


SUB = _SubChannel("sub", serdes.BYTES, serdes.BYTES)

channels = st.sampled_from([OUT, SUB, "out", None, 3])
payloads = st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=4), st.integers(),
                     st.builds(dict))
headers = st.one_of(
    st.none(), st.just(()), st.just([]), st.just({}), st.just({"h": b"1", "g": None}),
    st.just([("b", None), ("a", bytearray(b"x"))]), st.just({"h": "text"}),
    st.just([(1, b"")]), st.just([("parsley.causes", b"\x01")]), st.just((("h", b"1"),)))
timestamps = st.one_of(
    st.none(), st.integers(min_value=-3, max_value=2**70), st.just(True), st.just(1.5),
    st.just("7"), st.just(_Ms.T), st.sampled_from([0, 2**63 - 1, 2**63, -(2**63)]))


def _outcome(make: Any) -> Any:
    try:
        made = make()
    except (TypeError, ValueError, ParsleyFailClosedError) as error:
        return ("raised", type(error), getattr(error, "reason", None), str(error))
    return made


def _fields(send: Send) -> tuple[Any, ...]:
    return (type(send), send.channel, send.key, send.value, send.headers, send.timestamp_ms)


CONSTRUCTORS = _native.Constructors(Send, Effects, Channel, _python_send,
                                    _native_constructors)


@given(channels, payloads, payloads, headers, timestamps)
def test_a_native_send_is_the_reference_send(channel: Any, key: Any, value: Any, h: Any,
                                             ts: Any) -> None:
    native = _outcome(lambda: CONSTRUCTORS.send(channel, key, value, h, ts))
    python = _outcome(lambda: _python_send(channel, key, value, h, ts))
    if isinstance(python, Send):
        assert isinstance(native, Send) and _fields(native) == _fields(python)
        assert native.key is key and native.value is value and native == python
        if _hashable(python):
            assert hash(native) == hash(python)
    else:
        assert native == python


def _hashable(send: Send) -> bool:
    try:
        hash(send)
    except TypeError:
        return False
    return True


@given(channels, payloads, payloads, headers, timestamps)
def test_the_native_one_send_effects_are_the_builders(channel: Any, key: Any, value: Any,
                                                      h: Any, ts: Any) -> None:
    native = _outcome(lambda: CONSTRUCTORS.effects_send(channel, key, value, h, ts))
    built = _outcome(lambda: Effects.builder().send(channel, key, value, h, ts).build())
    if isinstance(built, Effects):
        assert type(native) is Effects and native == built
        assert type(native.sends) is tuple and native.writes == () == built.writes
        assert _fields(native.sends[0]) == _fields(built.sends[0])
    else:
        assert native == built


def test_effects_send_is_the_native_constructor_on_the_class_only() -> None:
    # What handlers call: the native constructor, taking keywords as the builder does.
    assert Effects.send(OUT, b"k", b"v", timestamp=4) == Effects.builder().send(
        OUT, b"k", b"v", timestamp=4).build()
    effects = Effects.send(OUT, b"k", b"v")
    with pytest.raises(AttributeError, match=r"does not chain") as info:
        effects.send(OUT, b"j", b"w")  # type: ignore[attr-defined]
    assert info.value.name == "send" and info.value.obj is effects


def test_a_frozen_send_built_natively_stays_frozen() -> None:
    send = CONSTRUCTORS.send(OUT, b"k", b"v", None, None)
    with pytest.raises(AttributeError):
        send.key = b"other"  # type: ignore[misc]
    assert send.headers == () and send.timestamp_ms is None


def test_a_class_that_object_new_does_not_allocate_plainly_is_refused() -> None:
    class Raw(bytes):
        pass

    with pytest.raises(TypeError, match="PyType_GenericAlloc"):
        _native.Constructors(Raw, Effects, Channel, _python_send, _native_constructors)



def test_a_class_whose_fields_are_not_writable_slots_is_refused() -> None:
    # The native constructors write fields at the offsets their member descriptors give;
    # a field that is a property, or a class without that slot, must be refused at once.
    class Plain:
        __slots__ = ("channel", "headers", "key", "value")  # no timestamp_ms

    class Computed:
        __slots__ = ("channel", "headers", "key", "value")

        @property
        def timestamp_ms(self) -> None:
            return None

    class Seven:
        __slots__ = ("a", "b", "c", "channel", "headers", "key", "value")

    class Borrowed:
        # Another class's descriptor: its offset lies past this class's instances.
        __slots__ = ("channel", "headers", "key", "value")
        timestamp_ms = Seven.__dict__["value"]

    for cls in (Plain, Computed, Borrowed):
        with pytest.raises(TypeError, match=r"timestamp_ms is not a writable __slots__ field"):
            _native.Constructors(cls, Effects, Channel, _python_send, _native_constructors)


def test_slotted_fields_read_natively_equal_getattr_and_leak_nothing() -> None:
    # Built natively many times: the fields hold what was given, and the values they
    # replaced or held are released (a reference count that grew would mean a leak).
    key, value = bytearray(b"k"), bytearray(b"v")
    before = sys.getrefcount(key), sys.getrefcount(value)
    for _ in range(1000):
        send = CONSTRUCTORS.send(OUT, key, value, None, 7)
        assert (send.channel, send.key, send.value, send.headers, send.timestamp_ms) == (
            OUT, key, value, (), 7)
        assert send.key is key and send.value is value
    del send
    assert (sys.getrefcount(key), sys.getrefcount(value)) == before

def _relay_of(out: Channel[Any, Any]) -> Any:
    send = Effects.send  # a relay that holds the constructor, as perf.runs' relay does

    def handle(delivery: Any, state: Any) -> Any:
        return send(out, delivery.key, delivery.value)

    return handle


def test_a_handler_holding_effects_send_pickles_into_a_worker() -> None:
    # Handlers reach each spawned worker pickled (multiprocess, dill): one that holds
    # Effects.send, a method of the native constructors, must load as the same method of
    # the loading process's constructors, not fail to pickle.
    import pickle

    import dill

    for dumps, loads in ((pickle.dumps, pickle.loads), (dill.dumps, dill.loads)):
        send = loads(dumps(Effects.send))
        assert send(OUT, b"k", b"v") == Effects.send(OUT, b"k", b"v")
        assert loads(dumps(parsley_effects._make_send))(OUT, b"k", b"v", None, 3) == Send(
            OUT, b"k", b"v", (), 3)
    relay = dill.loads(dill.dumps(_relay_of(OUT)))
    delivered = type("D", (), {"key": b"k", "value": b"v"})()
    assert relay(delivered, None) == Effects.send(OUT, b"k", b"v")
