"""The handler frame: one delivery through the declared serdes, the handler and its effects.

For each message the engine releases, the worker calls
:meth:`HandlerFrame.deliver` with plain values (no Kafka types). The frame

1. decodes key and value with the received channel's declared serdes
   (APPLICATION_PAYLOAD_UNDECODABLE ``<process>: <topic>@<offset> <key|value>
   could not be decoded by the declared serde (partition <p>; <error>)``: the
   ``<topic>@<position>`` of docs/failing-closed.md's detail shapes kept whole, the partition the
   runbook's
   ``--partition`` needs added inside the parenthesis);
2. calls the handler with a :class:`parsley.Delivery` (``parsley.*`` headers
   removed) and a :class:`parsley.State` reading the task's stores through a
   :class:`StoreView`;
3. refuses ``None`` (HANDLER_RETURNED_NULL_EFFECTS), wraps any other exception
   of the handler as :class:`HandlerFailure` (an application failure, no reason);
4. plans the effects: first resolves every target (EMISSION_TO_UNDECLARED_CHANNEL,
   STATE_ACCESS_TO_UNDECLARED_STORE), then serializes every payload with the
   *declared* serdes (APPLICATION_PAYLOAD_UNSERIALIZABLE) and checks the
   headers the serializers leave (RESERVED_HEADER_USED);
5. returns a :class:`FrameResult` of bytes, which the worker writes. The frame
   itself writes nothing, so a refused step leaves nothing partial behind.

A refusal the state view, or an effect under construction (RESERVED_HEADER_USED
from ``Send`` / ``EffectsBuilder.send``), raises inside application code is
*latched*: it is re-raised at the frame's next boundary (entry, after the payload's
deserializers, after the handler, after planning) even if the application
caught it, as Java's ``ParsleyProcessor.rethrowSeamViolation`` does.

Details follow the shapes of docs/failing-closed.md, "Detail shapes that differ from the
seed", and docs/runbooks.md, prefixed ``<process>: `` as the Java
implementation prints them (EMISSION_TO_UNDECLARED_CHANNEL is
``<process> emitted to undeclared channel <topic>``).

Source: docs/failing-closed.md ("Where each refusal is raised"),
docs/runbooks.md ("The application must change", "A handler that throws"), README.md,
"Write your own process".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from parsley.declarations import (
    Channel,
    Delivery,
    Effects,
    Process,
    RefusalLatch,
    Store,
    same_store,
)
from parsley.engine.channel import Header
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import RESERVED_PREFIX as RESERVED_HEADER_PREFIX
from parsley.wire import strip_reserved

__all__ = [
    "APPLICATION_REMEDY",
    "FrameResult",
    "HandlerFailure",
    "HandlerFrame",
    "SerializedSend",
    "SerializedWrite",
    "StoreView",
]

APPLICATION_REMEDY = (". Fix the handler, its serdes or the declaration, then restart "
                      "(docs/runbooks.md, The application must change)")
"""Every frame refusal's remedy: none touches ordering state, so a fix and a restart
resume into the same message."""


class StoreView(Protocol):
    """The task's stores as the frame reads them; the worker implements it.

    ``get`` must see the writes of earlier deliveries of the same task that
    are not yet committed (the open transaction's), latest first, and a
    delete as absence.
    """

    def get(self, store_name: str, key: bytes) -> bytes | None:
        """The value bytes under ``key`` in store ``store_name``, or ``None``."""
        ...


@dataclass(frozen=True, slots=True)
class SerializedSend:
    """An emission ready to produce (the worker adds ``parsley.causes``).

    Attributes:
        topic: the declared topic name.
        key: key bytes, or ``None``.
        value: value bytes, or ``None`` (a tombstone).
        headers: application headers, as the handler and serializers left them.
        timestamp_ms: record timestamp, ms since the epoch: the emission's own,
            else the delivered message's (as Java's ``orElse(message.timestamp())``).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class SerializedWrite:
    """A store write ready to apply and changelog.

    Attributes:
        store: the declared store name.
        key: key bytes (never ``None``).
        value: value bytes, or ``None`` for a delete (tombstone).
    """

    store: str
    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class FrameResult:
    """What one delivery writes: store writes and emissions, each in the handler's order."""

    sends: tuple[SerializedSend, ...] = ()
    writes: tuple[SerializedWrite, ...] = ()


class HandlerFailure(Exception):
    """A handler raised: an application failure, not a refusal (docs/runbooks.md, "The application
    must change").

    The message is ``handler for <topic> failed at task <i>, <topic>-<p>@<offset>:
    <ExceptionType>: <message>``; the original exception is ``__cause__``
    (lost when pickled; the message keeps its text). A restart feeds the
    same message again.

    Attributes:
        task: the task number.
        topic: the received topic.
        partition: its partition.
        offset: the delivered message's offset.
        detail: ``<ExceptionType>: <message>`` of the original.
    """

    def __init__(self, task: int, topic: str, partition: int, offset: int, detail: str) -> None:
        super().__init__(
            f"handler for {topic} failed at task {task}, {topic}-{partition}@{offset}: {detail}"
        )
        self.task = task
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.detail = detail

    def __reduce__(self) -> tuple[type[HandlerFailure], tuple[int, str, int, int, str]]:
        return (type(self), (self.task, self.topic, self.partition, self.offset, self.detail))


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _as_bytes(data: object) -> bytes:
    """Serializer output as bytes; anything else is a serializer failure."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"serializer returned {type(data).__name__}, not bytes")


class _FrameState:
    """The :class:`parsley.State` handed to handlers; latches its refusals on the frame."""

    __slots__ = ("_frame",)

    def __init__(self, frame: HandlerFrame) -> None:
        self._frame = frame

    def get(self, store: Store[Any, Any], key: Any) -> Any:
        """See :meth:`parsley.State.get`."""
        frame = self._frame
        name = frame.process.name
        try:
            declared = frame.resolve_store(store, "state read")
        except ParsleyFailClosedError as refusal:
            raise frame.latch(refusal) from None
        if key is None:
            raise ValueError(f"{name}: {declared.name} state read key must not be None")
        try:
            raw = declared.key_serde.serialize(key)
            key_bytes = None if raw is None else _as_bytes(raw)
        except Exception as exc:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                f"{name}: {declared.name} state read key could not be serialized by the "
                f"declared serde ({_describe(exc)})"
                + APPLICATION_REMEDY,
            )) from exc
        if key_bytes is None:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                f"{name}: {declared.name} state read key serialized to null; "
                "the declared key serde could not encode it"
                + APPLICATION_REMEDY,
            ))
        value_bytes = frame.stores.get(declared.name, key_bytes)
        if value_bytes is None:
            return None
        try:
            return declared.value_serde.deserialize(value_bytes)
        except Exception as exc:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNDECODABLE,
                f"{name}: {declared.name} stored value could not be decoded by the declared "
                f"serde ({_describe(exc)})"
                + APPLICATION_REMEDY,
            )) from exc


class HandlerFrame:
    """Runs deliveries of one task of one process through its handlers.

    One frame per task, for the task's life: the latch and the state view
    handed to handlers belong to it.

    Args:
        process: the process declaration.
        task: the task number (the partition index it owns).
        stores: the task's stores, read through :class:`StoreView`.
    """

    def __init__(self, process: Process, task: int, stores: StoreView) -> None:
        self.process = process
        self.task = task
        self.stores = stores
        self._latched: ParsleyFailClosedError | None = None
        self._state = _FrameState(self)
        # Name lookups on the hot path; the declaration is immutable.
        self._inputs = {i.channel.name: i for i in process.inputs}
        self._outputs = {c.name: c for c in process.outputs}
        self._stores = {s.name: s for s in process.declared_stores}

    # -- the latch ---------------------------------------------------------------

    def latch(self, refusal: ParsleyFailClosedError) -> ParsleyFailClosedError:
        """Remember ``refusal`` (the first one wins) and return it for raising."""
        if self._latched is None:
            self._latched = refusal
        return refusal

    def _rethrow(self) -> None:
        """Raise a latched refusal, once."""
        refusal, self._latched = self._latched, None
        if refusal is not None:
            raise refusal

    # -- target resolution ----------------------------------------------------------

    def resolve_store(self, store: Store[Any, Any], access: str) -> Store[Any, Any]:
        """The declared store ``store`` stands for.

        Args:
            store: the Store the application passed.
            access: ``"state read"`` or ``"state write"``, for the detail.

        Raises:
            ParsleyFailClosedError: STATE_ACCESS_TO_UNDECLARED_STORE, with
                ``(a Store instance other than the declared one)`` when a store
                of that name is declared with other serdes (docs/runbooks.md, "The application must
                change").
            TypeError: ``store`` is not a Store.
        """
        if not isinstance(store, Store):
            raise TypeError(f"{self.process.name}: {access} needs a Store, "
                            f"got {type(store).__name__}")
        declared = self._stores.get(store.name)
        if declared is None or not same_store(declared, store):
            other = "" if declared is None else " (a Store instance other than the declared one)"
            raise ParsleyFailClosedError(
                Reason.STATE_ACCESS_TO_UNDECLARED_STORE,
                f"{self.process.name}: {access} targets a store not declared by stores(...): "
                f"{store.name}{other}"
                + APPLICATION_REMEDY,
            )
        return declared

    def _resolve_channel(self, channel: Channel[Any, Any]) -> Channel[Any, Any]:
        declared = self._outputs.get(channel.name)
        if declared is None:
            raise ParsleyFailClosedError(
                Reason.EMISSION_TO_UNDECLARED_CHANNEL,
                f"{self.process.name} emitted to undeclared channel {channel.name}"
                + APPLICATION_REMEDY,
            )
        return declared

    # -- serialization ------------------------------------------------------------

    def _serialize(self, serde: Any, value: Any, headers: list[Header] | None,
                   site: str, part: str) -> bytes | None:
        """Serialize through a declared serde; any failure is APPLICATION_PAYLOAD_UNSERIALIZABLE."""
        try:
            hook = getattr(serde, "serialize_with_headers", None)
            if headers is not None and callable(hook):
                raw = hook(value, headers)
            else:
                raw = serde.serialize(value)
            return None if raw is None else _as_bytes(raw)
        except Exception as exc:
            self._rethrow()  # a latched state refusal keeps its own reason
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                f"{self.process.name}: {site} payload could not be serialized by the declared "
                f"serde ({part}; {_describe(exc)})"
                + APPLICATION_REMEDY,
            ) from exc

    def _plan_write(self, declared: Store[Any, Any], key: Any, value: Any) -> SerializedWrite:
        name = declared.name
        key_bytes = self._serialize(declared.key_serde, key, None, name, "state write key")
        if key_bytes is None:
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                f"{self.process.name}: {name} state write key serialized to null; "
                "the declared key serde could not encode it"
                + APPLICATION_REMEDY,
            )
        value_bytes = None if value is None else self._serialize(
            declared.value_serde, value, None, name, "state write value")
        return SerializedWrite(name, key_bytes, value_bytes)

    def _plan_send(self, declared: Channel[Any, Any], key: Any, value: Any,
                   built: tuple[Header, ...], timestamp_ms: int) -> SerializedSend:
        topic = declared.name
        for header_key, _ in built:
            if header_key.startswith(RESERVED_HEADER_PREFIX):
                raise ParsleyFailClosedError(
                    Reason.RESERVED_HEADER_USED,
                    f"{self.process.name}: serializer for {topic} wrote reserved header "
                    f"'{header_key}'"
                    + APPLICATION_REMEDY,
                )
        headers = list(built)
        key_bytes = None if key is None else self._serialize(
            declared.key_serde, key, headers, topic, "key")
        value_bytes = None if value is None else self._serialize(
            declared.value_serde, value, headers, topic, "value")
        for header in headers:
            if (not isinstance(header, tuple) or len(header) != 2 or not isinstance(header[0], str)
                    or not isinstance(header[1], bytes | None)):
                raise ParsleyFailClosedError(
                    Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                    f"{self.process.name}: {topic} payload could not be serialized by the declared "
                    f"serde (a serializer added a header that is not (str, bytes | None): "
                    f"{header!r})"
                    + APPLICATION_REMEDY,
                )
            if header[0].startswith(RESERVED_HEADER_PREFIX):
                raise ParsleyFailClosedError(
                    Reason.RESERVED_HEADER_USED,
                    f"{self.process.name}: serializer for {topic} wrote reserved header "
                    f"'{header[0]}'"
                    + APPLICATION_REMEDY,
                )
        return SerializedSend(topic, key_bytes, value_bytes, tuple(headers), timestamp_ms)

    def _plan(self, effects: Effects, timestamp_ms: int) -> FrameResult:
        # Every target first, then every payload: nothing is serialized for a step
        # with an undeclared target, and nothing is returned unless all of it is.
        stores = [self.resolve_store(w.store, "state write") for w in effects.writes]
        channels = [self._resolve_channel(s.channel) for s in effects.sends]
        writes = tuple(self._plan_write(d, w.key, w.value)
                       for d, w in zip(stores, effects.writes, strict=True))
        sends = tuple(
            self._plan_send(d, s.key, s.value, s.headers,
                            timestamp_ms if s.timestamp_ms is None else s.timestamp_ms)
            for d, s in zip(channels, effects.sends, strict=True))
        return FrameResult(sends, writes)

    # -- the frame ----------------------------------------------------------------

    def deliver(self, topic: str, partition: int, offset: int, timestamp_ms: int,
                key: bytes | None, value: bytes | None,
                headers: Sequence[Header] = ()) -> FrameResult:
        """Run one delivered message through its handler and plan its effects.

        Args:
            topic: the received topic's name.
            partition: its partition.
            offset: the message's offset (its position).
            timestamp_ms: record timestamp, ms since the epoch.
            key: raw key bytes, or ``None``.
            value: raw value bytes, or ``None``.
            headers: the record's headers; ``parsley.*`` ones are dropped here.

        Returns:
            The serialized effects, for the worker to write in its transaction.

        Raises:
            ParsleyFailClosedError: APPLICATION_PAYLOAD_UNDECODABLE,
                HANDLER_RETURNED_NULL_EFFECTS, EMISSION_TO_UNDECLARED_CHANNEL,
                STATE_ACCESS_TO_UNDECLARED_STORE, RESERVED_HEADER_USED,
                APPLICATION_PAYLOAD_UNSERIALIZABLE (details in the module
                docstring), or a refusal latched by the state view.
            HandlerFailure: the handler raised anything else, or returned
                something that is not Effects.
            ValueError: ``topic`` is not received by this process (a worker bug).
        """
        self._rethrow()
        source = self._inputs.get(topic)
        if source is None:
            raise ValueError(f"{self.process.name} was fed {topic}, which it does not receive")
        channel = source.channel
        app_headers = strip_reserved(headers)
        part = "key"
        try:
            key_value = None if key is None else channel.key_serde.deserialize(key)
            part = "value"
            value_value = None if value is None else channel.value_serde.deserialize(value)
        except Exception as exc:
            self._rethrow()
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNDECODABLE,
                f"{self.process.name}: {topic}@{offset} {part} could not be decoded by the "
                f"declared serde (partition {partition}; {_describe(exc)})"
                + APPLICATION_REMEDY,
            ) from exc
        self._rethrow()
        delivery: Delivery[Any, Any] = Delivery(
            topic, partition, offset, timestamp_ms, key_value, value_value, app_headers)
        try:
            with RefusalLatch(self.latch):
                effects = source.handler(delivery, self._state)
        except ParsleyFailClosedError:
            self._rethrow()
            raise
        except Exception as exc:
            self._rethrow()
            raise HandlerFailure(self.task, topic, partition, offset, _describe(exc)) from exc
        self._rethrow()
        if effects is None:
            raise ParsleyFailClosedError(
                Reason.HANDLER_RETURNED_NULL_EFFECTS,
                f"{self.process.name}: handler for {topic} returned null effects; "
                "return Effects.none() for a step that changes nothing"
                + APPLICATION_REMEDY,
            )
        if not isinstance(effects, Effects):
            wrong = TypeError(f"handler returned {type(effects).__name__}, not Effects")
            raise HandlerFailure(self.task, topic, partition, offset, _describe(wrong)) from wrong
        result = self._plan(effects, timestamp_ms)
        self._rethrow()
        return result
