"""What a handler sees and returns: deliveries, the state view, and effects.

A handler gets a :class:`Delivery` and a :class:`State` and returns
:class:`Effects` (``Effects.send`` for one send, else :meth:`Effects.builder`): the
sends and store writes of one step. A reserved header refused while effects are built is
latched into the handler frame (:class:`RefusalLatch`).

Source: README.md, "Write your own process" (``Delivery``, ``State``, ``Effects``,
``Handler``), docs/failing-closed.md (RESERVED_HEADER_USED, HANDLER_RETURNED_NULL_EFFECTS),
docs/runbooks.md, "The application must change". Re-exported by :mod:`parsley.declarations`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Generic, Protocol, TypeVar

from parsley import refusal_shapes as shapes
from parsley.channels import Channel, Store
from parsley.engine.channel import Header
from parsley.native import NATIVE
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import RESERVED_PREFIX as _HEADER_PREFIX

__all__ = [
    "BatchHandler",
    "Delivery",
    "Effects",
    "EffectsBuilder",
    "Handler",
    "RefusalLatch",
    "Send",
    "State",
    "Write",
]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True, slots=True, init=False)
class Delivery(Generic[K, V]):
    """One message handed to a handler (Java ``Delivery``).

    Attributes:
        topic: the received topic's name.
        partition: its partition (the task number).
        offset: the record's own offset (inclusive position).
        timestamp: the record timestamp, ms since the epoch.
        key: the key, decoded by the channel's key serde (``None`` for a null key).
        value: the value, decoded by the value serde (``None`` for a tombstone).
        headers: application headers in record order; ``parsley.*`` removed.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: K | None
    value: V | None
    headers: tuple[Header, ...] = ()

    def __init__(self, topic: str, partition: int, offset: int, timestamp: int,
                 key: K | None, value: V | None, headers: tuple[Header, ...] = ()) -> None:
        # The generated frozen __init__ goes through object.__setattr__ once per field;
        # setting the slots directly costs about half (docs/performance.md, "Handler
        # frame and batch loop").
        _d_topic(self, topic)
        _d_partition(self, partition)
        _d_offset(self, offset)
        _d_timestamp(self, timestamp)
        _d_key(self, key)
        _d_value(self, value)
        _d_headers(self, headers)


def _slot_setters(cls: type, *names: str) -> tuple[Callable[[Any, Any], None], ...]:
    """The ``__set__`` of each named slot of a slotted dataclass (bypasses frozen checks)."""
    return tuple(cls.__dict__[n].__set__ for n in names)


(_d_topic, _d_partition, _d_offset, _d_timestamp, _d_key, _d_value, _d_headers) = _slot_setters(
    Delivery, "topic", "partition", "offset", "timestamp", "key", "value", "headers")
_new = object.__new__


def new_delivery(topic: str, partition: int, offset: int, timestamp: int,
                 key: Any, value: Any, headers: tuple[Header, ...]) -> Delivery[Any, Any]:
    """``Delivery(...)`` without the class call, for the handler frame's hot path.

    The same object the constructor makes (all seven fields, positional); about 0.5 µs
    against 0.75 µs through ``Delivery(...)``.
    """
    d: Delivery[Any, Any] = _new(Delivery)
    _d_topic(d, topic)
    _d_partition(d, partition)
    _d_offset(d, offset)
    _d_timestamp(d, timestamp)
    _d_key(d, key)
    _d_value(d, value)
    _d_headers(d, headers)
    return d


class State(Protocol):
    """A handler's read view of its task's stores (Java ``State``).

    ``get`` sees every write of earlier deliveries in the same task, committed
    or not. Refusals it raises are latched by the frame: an application
    ``except`` that swallows one does not save the step.
    """

    def get(self, store: Store[K, V], key: K) -> V | None:
        """The value stored under ``key``, or ``None``.

        Raises:
            ParsleyFailClosedError: STATE_ACCESS_TO_UNDECLARED_STORE (not declared
                by ``stores(...)``), APPLICATION_PAYLOAD_UNSERIALIZABLE (the key
                will not serialize), APPLICATION_PAYLOAD_UNDECODABLE (the stored
                value will not decode).
            ValueError: ``key`` is ``None``.
        """
        ...


_REFUSAL_LATCH: ContextVar[Callable[[ParsleyFailClosedError], ParsleyFailClosedError] | None] = (
    ContextVar("parsley_refusal_latch", default=None)
)


class RefusalLatch:
    """Latch refusals raised while building effects into a handler frame.

    Inside ``with RefusalLatch(frame.latch):`` a refusal raised by :class:`Send`,
    :meth:`EffectsBuilder.send` or ``Effects.send`` (RESERVED_HEADER_USED) is handed
    to ``latch`` before it is raised, so the frame rethrows it at its next boundary
    even when the application catches it. Outside any frame the
    refusal is simply raised.

    Args:
        latch: remembers a refusal (the first one wins) and returns it.

    Source: docs/runbooks.md, "Do not": "Every refusal raised inside the handler frame is
    latched and re-raised at the frame's boundary"; Java ``ParsleyProcessor``.
    """

    __slots__ = ("_latch", "_token")

    def __init__(self, latch: Callable[[ParsleyFailClosedError], ParsleyFailClosedError]) -> None:
        self._latch = latch
        self._token: Token[Callable[[ParsleyFailClosedError], ParsleyFailClosedError] | None]

    def __enter__(self) -> None:
        self._token = _REFUSAL_LATCH.set(self._latch)

    def __exit__(self, *exc_info: object) -> None:
        _REFUSAL_LATCH.reset(self._token)


def _latched(refusal: ParsleyFailClosedError) -> ParsleyFailClosedError:
    latch = _REFUSAL_LATCH.get()
    return refusal if latch is None else latch(refusal)


def _headers(topic: str, headers: Mapping[str, Any] | Iterable[Any] | None) -> tuple[Header, ...]:
    """Copy application headers into a tuple of ``(str, bytes | None)``, refusing reserved keys."""
    if not headers:  # None, (), [] or {}: the common case, no copy, no ABC check
        return ()
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers)
    out: list[Header] = []
    for pair in pairs:
        if not isinstance(pair, tuple | list) or len(pair) != 2:
            raise TypeError(f"{topic}: a header is a (key, value) pair, got {pair!r}")
        key, value = pair
        if not isinstance(key, str):
            raise TypeError(f"{topic}: a header key must be a str, got {type(key).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray):
            raise TypeError(
                f"{topic}: header '{key}' value must be bytes or None, got {type(value).__name__}"
            )
        if key.startswith(_HEADER_PREFIX):
            raise _latched(ParsleyFailClosedError(
                Reason.RESERVED_HEADER_USED,
                shapes.reserved_header_used(topic, key),
            ))
        out.append((key, None if value is None else bytes(value)))
    return tuple(out)


@dataclass(frozen=True, slots=True, init=False)
class Send:
    """One emission (Java ``Effects.Send``).

    Attributes:
        channel: carries the topic name only; the bytes are made by the serdes
            of the channel of that name the process declared (docs/failing-closed.md,
            EMISSION_TO_UNDECLARED_CHANNEL).
        key: the key, or ``None`` for a null key.
        value: the value, or ``None`` for a tombstone.
        headers: application headers, ``(key, bytes | None)`` pairs in order.
        timestamp_ms: the record timestamp, ms since the epoch, or ``None`` for
            the delivered message's timestamp.

    Raises:
        ParsleyFailClosedError: RESERVED_HEADER_USED for a ``parsley.*`` header
            key, latched into the handler frame (see :class:`RefusalLatch`).
        ValueError: a negative timestamp, or one past Kafka's int64 (:data:`MAX_TIMESTAMP_MS`).
        TypeError: ``channel`` is not a Channel, or a malformed header.
    """

    channel: Channel[Any, Any]
    key: Any
    value: Any
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None

    def __init__(self, channel: Channel[Any, Any], key: Any, value: Any,
                 headers: Mapping[str, Any] | Iterable[Any] | None = (),
                 timestamp_ms: int | None = None) -> None:
        _fill_send(self, channel, key, value, headers, timestamp_ms)


(_s_channel, _s_key, _s_value, _s_headers, _s_timestamp_ms) = _slot_setters(
    Send, "channel", "key", "value", "headers", "timestamp_ms")


MAX_TIMESTAMP_MS: Final = 2**63 - 1
"""The largest record timestamp Kafka holds: an int64 of ms since the epoch (the record
batch format, KIP-32)."""


def _check_timestamp(channel: Channel[Any, Any], timestamp_ms: Any) -> None:
    """Raise unless ``timestamp_ms`` is an int (not a bool) of ms in
    0..:data:`MAX_TIMESTAMP_MS` (see :class:`Send`)."""
    if not isinstance(timestamp_ms, int) or isinstance(timestamp_ms, bool):
        raise TypeError(f"{channel.name}: timestamp must be an int of ms")
    if timestamp_ms < 0:
        raise ValueError(f"{channel.name}: timestamp must be >= 0 ms, got {timestamp_ms}")
    if timestamp_ms > MAX_TIMESTAMP_MS:
        raise ValueError(f"{channel.name}: timestamp must be <= {MAX_TIMESTAMP_MS} ms "
                         f"(Kafka's int64), got {timestamp_ms}")


def _fill_send(send: Send, channel: Channel[Any, Any], key: Any, value: Any,
               headers: Mapping[str, Any] | Iterable[Any] | None,
               timestamp_ms: int | None) -> None:
    """Check and set the fields of a new :class:`Send` (its constructor, and
    :meth:`EffectsBuilder.send` without the class call): the raises of :class:`Send`."""
    if channel.__class__ is not Channel and not isinstance(channel, Channel):
        raise TypeError(f"send needs a Channel, got {type(channel).__name__}")
    # A plain non-negative int passes on the first test; anything else gets the full one.
    if timestamp_ms is not None and (timestamp_ms.__class__ is not int or timestamp_ms < 0
                                     or timestamp_ms > MAX_TIMESTAMP_MS):
        _check_timestamp(channel, timestamp_ms)
    _s_channel(send, channel)
    _s_key(send, key)
    _s_value(send, value)
    _s_headers(send, _headers(channel.name, headers) if headers else ())
    _s_timestamp_ms(send, timestamp_ms)


def _python_send(channel: Channel[Any, Any], key: Any, value: Any,
                 headers: Mapping[str, Any] | Iterable[Any] | None,
                 timestamp_ms: int | None) -> Send:
    """A new :class:`Send` without the class call: the reference of the native
    constructor (``parsley._native.Constructors``, which calls this for every argument it
    does not build for). Raises as :class:`Send`."""
    send: Send = _new(Send)
    _fill_send(send, channel, key, value, headers, timestamp_ms)
    return send


_make_send: Callable[..., Send] = _python_send
"""``(channel, key, value, headers, timestamp_ms) -> Send`` for the builder and
``Effects.send``: the native constructor when the native core runs (bound at the end of
this module), else :func:`_python_send`."""


@dataclass(frozen=True, slots=True)
class Write:
    """One store write (Java ``Effects.Write``): a put, or a delete when ``value`` is None.

    Raises:
        TypeError: ``store`` is not a Store.
    """

    store: Store[Any, Any]
    key: Any
    value: Any

    def __post_init__(self) -> None:
        if not isinstance(self.store, Store):
            raise TypeError(f"a write needs a Store, got {type(self.store).__name__}")


class _ClassOnlySend:
    """``Effects.send``: on the class, the one-send constructor (:meth:`_EffectsClass.send`);
    on an instance, an ``AttributeError`` that names it and the builder (an instance's
    ``.send`` would read as chaining, which would drop the first send). A descriptor rather
    than ``__getattr__``, which would keep Python 3.11 from specialising the slot reads of
    ``Effects.sends`` and ``Effects.writes`` on the handler frame's path."""

    def __get__(self, obj: object, owner: type) -> Any:
        if obj is None:
            return _EffectsClass.send.__get__(owner, type(owner))
        raise AttributeError(_NOT_ON_AN_INSTANCE, name="send", obj=obj)


_NOT_ON_AN_INSTANCE: Final = (
    "'Effects' object has no attribute 'send': Effects.send(channel, key, value) makes the "
    "effects of one send and does not chain; for several sends or a store write use "
    "Effects.builder().send(...).send(...).build()")
"""The error of ``effects.send`` read on an instance (:class:`_ClassOnlySend`)."""


class _EffectsClass(type):
    """The class of :class:`Effects`: holds :meth:`send`, so that ``Effects.send(...)``
    works and ``Effects.send(a, ...).send(b, ...)`` is an ``AttributeError`` (a chained
    one-send constructor would silently drop ``a``; chaining is the builder's)."""

    def send(
        cls,
        channel: Channel[K, V],
        key: K | None,
        value: V | None,
        headers: Mapping[str, bytes | None] | Iterable[Header] | None = None,
        timestamp: int | None = None,
    ) -> Effects:
        """``Effects.send(channel, key, value, headers=None, timestamp=None)``: effects of
        one send and nothing else, equal to
        ``Effects.builder().send(channel, key, value, headers, timestamp).build()`` with
        one object built instead of three (the relay's case; docs/performance.md, "What
        is left between this and the plain relay"). Called on the class only: for more
        than one send or a store write, use :meth:`Effects.builder`. A Python addition:
        Java's ``Effects`` has the builder only.

        Args: as :meth:`EffectsBuilder.send`.

        Raises:
            ParsleyFailClosedError: RESERVED_HEADER_USED for a ``parsley.*`` header,
                latched into the handler frame (see :class:`RefusalLatch`).
            ValueError: a negative timestamp, or one past Kafka's int64.
            TypeError: ``channel`` is not a Channel, a malformed header or timestamp.
        """
        one = _make_send(channel, key, value, headers, timestamp)
        effects: Effects = _new(Effects)
        _e_sends(effects, (one,))
        _e_writes(effects, ())
        return effects


@dataclass(frozen=True, slots=True, init=False)
class Effects(metaclass=_EffectsClass):
    """What one delivery does: emissions and store writes, each in the order given.

    Build with :meth:`none`, ``Effects.send(channel, key, value)`` (one send and nothing
    else; see :meth:`_EffectsClass.send`) or :meth:`builder`. A handler must return one;
    ``None`` is refused (docs/failing-closed.md, HANDLER_RETURNED_NULL_EFFECTS).
    """

    sends: tuple[Send, ...] = ()
    writes: tuple[Write, ...] = ()
    send: ClassVar[_ClassOnlySend] = _ClassOnlySend()

    def __init__(self, sends: tuple[Send, ...] = (), writes: tuple[Write, ...] = ()) -> None:
        _e_sends(self, sends)
        _e_writes(self, writes)

    @staticmethod
    def none() -> Effects:
        """Effects of a step that changes nothing."""
        return _NONE

    @staticmethod
    def builder() -> EffectsBuilder:
        """A fresh, mutable :class:`EffectsBuilder`."""
        return EffectsBuilder()


_e_sends, _e_writes = _slot_setters(Effects, "sends", "writes")
_NONE: Final = Effects()


class EffectsBuilder:
    """Collects sends and writes; :meth:`build` returns the immutable :class:`Effects`.

    Each method returns the builder, so calls chain.
    """

    __slots__ = ("_sends", "_writes")

    def __init__(self) -> None:
        self._sends: list[Send] = []
        self._writes: list[Write] | None = None  # made at the first write (most make none)

    def send(
        self,
        channel: Channel[K, V],
        key: K | None,
        value: V | None,
        headers: Mapping[str, bytes | None] | Iterable[Header] | None = None,
        timestamp: int | None = None,
    ) -> EffectsBuilder:
        """Emit ``(key, value)`` to ``channel``.

        Args:
            channel: a declared channel, matched by name.
            key: the key (``None`` for a null key).
            value: the value (``None`` for a tombstone).
            headers: application headers: a mapping or ``(key, bytes | None)`` pairs.
            timestamp: record timestamp in ms since the epoch; default the
                delivered message's timestamp.

        Raises:
            ParsleyFailClosedError: RESERVED_HEADER_USED for a ``parsley.*``
                header, latched into the handler frame (see :class:`RefusalLatch`).
            ValueError: a negative timestamp, or one past Kafka's int64.
        """
        self._sends.append(_make_send(channel, key, value, headers, timestamp))
        return self

    def put(self, store: Store[K, V], key: K, value: V) -> EffectsBuilder:
        """Store ``value`` under ``key``.

        Raises:
            ValueError: ``value`` is ``None`` (use :meth:`delete`).
        """
        if value is None:
            raise ValueError(f"{store.name}: put needs a value; use delete(store, key) to remove")
        self._write(Write(store, key, value))
        return self

    def delete(self, store: Store[K, V], key: K) -> EffectsBuilder:
        """Remove ``key`` from ``store`` (a changelog tombstone)."""
        self._write(Write(store, key, None))
        return self

    def _write(self, write: Write) -> None:
        if self._writes is None:
            self._writes = []
        self._writes.append(write)

    def build(self) -> Effects:
        """The effects collected so far; the builder stays usable."""
        effects: Effects = _new(Effects)
        _e_sends(effects, tuple(self._sends))
        writes = self._writes
        _e_writes(effects, tuple(writes) if writes else ())
        return effects


_constructors: Any = None
"""The native constructors (``parsley._native.Constructors``) when the native core runs."""


def _native_constructors() -> Any:
    """This process's native constructors: what a pickled ``Effects.send`` (a method of
    them) is rebuilt from, in a spawned worker that imported this module.

    Raises:
        RuntimeError: this process runs without the native core (``PARSLEY_ENGINE``
            differs from the process that pickled it).
    """
    if _constructors is None:
        raise RuntimeError("Effects.send was pickled by a process running the native core "
                           "and loaded by one running without it (PARSLEY_ENGINE)")
    return _constructors


if NATIVE is not None:
    # The native core builds the common Send and Effects itself and calls the Python
    # constructors above for everything else (parsley._native.Constructors; the same
    # values, checks and refusals: tests/unit/test_effects_native.py). Effects.send reads
    # as that native constructor on the class, with the same error on an instance.
    _constructors = NATIVE.Constructors(Send, Effects, Channel, _python_send,
                                        _native_constructors)
    _make_send = _constructors.send
    type.__setattr__(Effects, "send",
                     NATIVE.ClassOnly(_constructors.effects_send, "send", _NOT_ON_AN_INSTANCE))


Handler = Callable[[Delivery[Any, Any], State], Effects]
"""``(delivery, state) -> Effects``: the application code for one received channel."""

BatchHandler = Callable[[Sequence[Delivery[Any, Any]], State], Effects]
"""``(deliveries, state) -> Effects``: the application code for a channel received in
batches (``Process.receives_batch``): consecutive deliveries of that channel in causal
order, one ``Effects`` for all of them."""
