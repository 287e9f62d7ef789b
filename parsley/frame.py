"""The handler frame: one delivery through the declared serdes, the handler and its effects.

For each message the engine releases, the host (the worker, or ``parsley.testing``)
calls :meth:`HandlerFrame.deliver` with plain values (no Kafka types). The frame
decodes key and value with the declared serdes (APPLICATION_PAYLOAD_UNDECODABLE),
calls the handler with a :class:`parsley.Delivery` and a :class:`parsley.State`
reading the task's stores through a :class:`StoreView`, refuses ``None``
(HANDLER_RETURNED_NULL_EFFECTS) and wraps any other handler exception as
:class:`HandlerFailure`, then plans the effects (EMISSION_TO_UNDECLARED_CHANNEL,
STATE_ACCESS_TO_UNDECLARED_STORE, APPLICATION_PAYLOAD_UNSERIALIZABLE,
RESERVED_HEADER_USED) and returns a :class:`FrameResult` of bytes. The frame itself
writes nothing, so a refused step leaves nothing partial behind. A refusal raised
inside application code is latched and re-raised at the frame's next boundary, as
Java's ``ParsleyProcessor.rethrowSeamViolation`` does.

The steps, the latch's boundaries and the detail shapes: docs/architecture.md,
"parsley/frame.py". Source: docs/failing-closed.md ("Where each refusal is raised"),
docs/runbooks.md ("The application must change", "A handler that throws").
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol

from parsley import refusal_shapes as shapes
from parsley.declarations import (
    Channel,
    Effects,
    Process,
    Send,
    State,
    Store,
    same_store,
)
from parsley.effects import _REFUSAL_LATCH, EffectsBuilder, new_delivery
from parsley.engine.channel import Header
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import BytesSerde, JsonSerde, StringSerde, decoder, encoder
from parsley.wire import RESERVED_PREFIX as RESERVED_HEADER_PREFIX
from parsley.wire import strip_reserved

__all__ = [
    "APPLICATION_REMEDY",
    "FrameResult",
    "HandlerFailure",
    "HandlerFrame",
    "PlannedSend",
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


PlannedSend = tuple[str, bytes | None, bytes | None, list[Header], int]
"""An emission ready to produce, as :meth:`HandlerFrame.run` returns it: ``(topic, key,
value, headers, timestamp_ms)``, the fields of :class:`SerializedSend` with the headers as a
new list the worker may extend."""

_InputPlan = tuple[Callable[[Any, State], Any], Callable[[bytes], Any], Callable[[bytes], Any]]
"""A received channel's plan: ``(handler, decode key, decode value)``."""
_OutputPlan = tuple[str, Callable[..., Any], bool, bool, Callable[..., Any], bool, bool]
"""A declared channel's send plan: ``(topic, *parsley.serdes.encoder(key serde),
*parsley.serdes.encoder(value serde))``."""


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


_w_store, _w_key, _w_value = (SerializedWrite.__dict__[n].__set__
                               for n in ("store", "key", "value"))


def _new_write(store: str, key: bytes, value: bytes | None) -> SerializedWrite:
    """``SerializedWrite(store, key, value)`` setting the slots directly (the frozen
    dataclass's ``__init__`` goes through ``object.__setattr__`` per field)."""
    write: SerializedWrite = object.__new__(SerializedWrite)
    _w_store(write, store)
    _w_key(write, key)
    _w_value(write, value)
    return write


def _exact(serde: object) -> bool:
    """Whether ``serde``'s plain ``serialize`` is a built-in one (output always bytes or None)."""
    return type(serde) in (BytesSerde, StringSerde, JsonSerde)


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


def _context(process: str, *parts: str) -> str:
    """What a frame refusal adds after its reason's shape: `` (process '<name>'; ...)``."""
    return " (" + "; ".join((f"process '{process}'", *parts)) + ")"


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
        encode_key, exact, decode_value = frame._store_plans[declared.name]
        try:
            key_bytes = encode_key(key)
            if not exact and key_bytes is not None:
                key_bytes = _as_bytes(key_bytes)
        except Exception as exc:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                shapes.state_read_key_unserializable(declared.name)
                + _context(name, _describe(exc)) + APPLICATION_REMEDY,
            )) from exc
        if key_bytes is None:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                shapes.state_read_key_unserializable(declared.name)
                + _context(name, "it serialized to null") + APPLICATION_REMEDY,
            ))
        value_bytes = frame.stores.get(declared.name, key_bytes)
        if value_bytes is None:
            return None
        try:
            return decode_value(value_bytes)
        except Exception as exc:
            raise frame.latch(ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNDECODABLE,
                shapes.stored_value_undecodable(declared.name)
                + _context(name, _describe(exc)) + APPLICATION_REMEDY,
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
        self._latch_fn = self.latch
        self._latching = False  # inside latching(): the refusal latch is already set
        # Per-channel plans, built once; the declaration is immutable.
        # Per-record and batch handlers apart: run() never calls a batch handler.
        self._in_plans: dict[str, _InputPlan] = {
            i.channel.name: (i.handler, decoder(i.channel.key_serde),
                             decoder(i.channel.value_serde))
            for i in process.inputs if not i.batched}
        self._batch_plans: dict[str, _InputPlan] = {
            i.channel.name: (i.handler, decoder(i.channel.key_serde),
                             decoder(i.channel.value_serde))
            for i in process.inputs if i.batched}
        self.batch_limits: dict[str, int] = {
            i.channel.name: i.max_records for i in process.inputs
            if i.max_records is not None}
        """Received topic -> ``max_records`` of its batch handler (batched topics only)."""
        self.batch_calls = 0
        """Calls of batch handlers :meth:`run_batch` made, each counted once the handler is
        called (whether it returns or raises, and whatever its effects then come to); a
        refusal before the call (a latched refusal, an undecodable entry) is not one."""
        self._out_plans: dict[str, _OutputPlan] = {
            c.name: (c.name, *encoder(c.key_serde), *encoder(c.value_serde))
            for c in process.outputs}
        self._stores = {s.name: s for s in process.declared_stores}
        # Store plans: (encode key, its output is exact bytes, decode value); writes
        # serialize without the headers hook (a store record has no headers).
        self._store_plans: dict[str, tuple[Callable[[Any], Any], bool, Callable[[bytes], Any]]] = {
            s.name: (s.key_serde.serialize, _exact(s.key_serde),
                     decoder(s.value_serde))
            for s in process.declared_stores}

    @property
    def state(self) -> State:
        """The :class:`parsley.State` this frame hands its handlers."""
        return self._state

    def fast_plans(self) -> tuple[dict[str, tuple[Any, Any, Any, int | None]],
                                  dict[str, tuple[str, Any, Any]]]:
        """The plans the native fast path (``workers.fastpath``) may run without this frame.

        Returns:
            ``(inputs, outputs)``. ``inputs``: received topic -> ``(handler, decode key,
            decode value, max_records)`` for channels whose serdes are built in
            (:data:`parsley.serdes.BYTES`, ``STRING``, ``JSON``); ``max_records`` is the
            batch handler's (``Process.receives_batch``), ``None`` for a per-record
            handler. Their decoders are pure, so a failed decode is simply decoded again
            here. ``outputs``: declared output -> ``(topic, encode key, encode value)`` for
            outputs whose serdes are built in; ``None`` stands for BYTES, the identity on
            ``bytes``.
        """
        inputs = {i.channel.name: (*(self._batch_plans if i.batched
                                     else self._in_plans)[i.channel.name], i.max_records)
                  for i in self.process.inputs
                  if _exact(i.channel.key_serde) and _exact(i.channel.value_serde)}
        outputs = {}
        for c in self.process.outputs:
            topic, kenc, _, kexact, venc, _, vexact = self._out_plans[c.name]
            if kexact and vexact:
                outputs[c.name] = (topic,
                                   None if type(c.key_serde) is BytesSerde else kenc,
                                   None if type(c.value_serde) is BytesSerde else venc)
        return inputs, outputs

    # -- the latch ---------------------------------------------------------------

    def latch(self, refusal: ParsleyFailClosedError) -> ParsleyFailClosedError:
        """Remember ``refusal`` (the first one wins) and return it for raising."""
        if self._latched is None:
            self._latched = refusal
        return refusal

    @contextlib.contextmanager
    def latching(self) -> Iterator[None]:
        """Set the refusal latch once for a block of :meth:`run` calls (a delivery batch).

        Inside it :meth:`run` does not set and reset the latch's context variable per
        message; what a handler sees is the same (a refusal raised while it builds
        effects is latched into this frame). The block must run nothing but this
        frame's deliveries and the writing of their results. The latch is then set while
        effects are planned too: a serializer that builds a ``Send`` with a reserved
        header (RESERVED_HEADER_USED, latched) stops the step with that refusal rather
        than with APPLICATION_PAYLOAD_UNSERIALIZABLE.
        """
        token = _REFUSAL_LATCH.set(self._latch_fn)
        self._latching = True
        try:
            yield
        finally:
            self._latching = False
            _REFUSAL_LATCH.reset(token)

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
            raise ParsleyFailClosedError(
                Reason.STATE_ACCESS_TO_UNDECLARED_STORE,
                shapes.state_access_to_undeclared_store(
                    access.removeprefix("state "), store.name, other_instance=declared is not None)
                + _context(self.process.name) + APPLICATION_REMEDY,
            )
        return declared

    def _output(self, channel: Channel[Any, Any]) -> _OutputPlan:
        """The send plan of the declared channel ``channel`` names.

        Raises:
            ParsleyFailClosedError: EMISSION_TO_UNDECLARED_CHANNEL.
        """
        plan = self._out_plans.get(channel.name)
        if plan is None:
            raise ParsleyFailClosedError(
                Reason.EMISSION_TO_UNDECLARED_CHANNEL,
                shapes.emission_to_undeclared_channel(self.process.name, channel.name)
                + APPLICATION_REMEDY,
            )
        return plan

    # -- serialization ------------------------------------------------------------

    def _serialize(self, serde: Any, value: Any, site: str, part: str) -> bytes | None:
        """Serialize a store write's key or value through its declared serde (no headers
        hook: a store record has none); any failure is APPLICATION_PAYLOAD_UNSERIALIZABLE."""
        try:
            raw = serde.serialize(value)
            return raw if raw is None or raw.__class__ is bytes else _as_bytes(raw)
        except Exception as exc:
            self._rethrow()  # a latched state refusal keeps its own reason
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                shapes.application_payload_unserializable(site)
                + _context(self.process.name, part, _describe(exc)) + APPLICATION_REMEDY,
            ) from exc

    def _plan_write(self, declared: Store[Any, Any], key: Any, value: Any) -> SerializedWrite:
        name = declared.name
        key_bytes = self._serialize(declared.key_serde, key, name, "state write key")
        if key_bytes is None:
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                shapes.state_write_key_null(name)
                + _context(self.process.name) + APPLICATION_REMEDY,
            )
        value_bytes = None if value is None else self._serialize(
            declared.value_serde, value, name, "state write value")
        return _new_write(name, key_bytes, value_bytes)

    def _unserializable(self, exc: Exception, topic: str, part: str) -> ParsleyFailClosedError:
        self._rethrow()  # a latched state refusal keeps its own reason
        return ParsleyFailClosedError(
            Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
            shapes.application_payload_unserializable(topic)
            + _context(self.process.name, part, _describe(exc)) + APPLICATION_REMEDY,
        )

    def _reserved(self, topic: str, key: str) -> ParsleyFailClosedError:
        return ParsleyFailClosedError(
            Reason.RESERVED_HEADER_USED,
            shapes.reserved_header_used(topic, key) + _context(self.process.name)
            + APPLICATION_REMEDY,
        )

    def _plan_plain(self, send: Send, plan: _OutputPlan,
                    timestamp_ms: int) -> list[PlannedSend]:
        """:meth:`_plan_sends` of one send without headers to a channel whose serdes are
        built-in (output always bytes or ``None``, no headers hook): nothing to check but
        that each payload serializes; the same results and refusals."""
        topic, encode_key, _, _, encode_value, _, _ = plan
        key, value = send.key, send.value
        try:
            key_bytes = None if key is None else encode_key(key)
        except Exception as exc:
            raise self._unserializable(exc, topic, "key") from exc
        try:
            value_bytes = None if value is None else encode_value(value)
        except Exception as exc:
            raise self._unserializable(exc, topic, "value") from exc
        if self._latched is not None:
            self._rethrow()
        ts = send.timestamp_ms
        return [(topic, key_bytes, value_bytes, [], timestamp_ms if ts is None else ts)]

    def _plan_sends(self, sends: tuple[Send, ...], plans: list[_OutputPlan],
                    timestamp_ms: int) -> list[PlannedSend]:
        out: list[PlannedSend] = []
        for (topic, kenc, khdr, kexact, venc, vhdr, vexact), s in zip(plans, sends, strict=True):
            built = s.headers
            if built:
                # A Send refuses reserved keys when it is built; this guards a Send
                # assembled around its constructor.
                for header_key, _ in built:
                    if header_key.startswith(RESERVED_HEADER_PREFIX):
                        raise self._reserved(topic, header_key)
            headers = list(built)
            key, value = s.key, s.value
            part = "key"
            try:
                if key is None:
                    key_bytes = None
                else:
                    key_bytes = kenc(key, headers) if khdr else kenc(key)
                    if not kexact and key_bytes is not None:
                        key_bytes = _as_bytes(key_bytes)
                part = "value"
                if value is None:
                    value_bytes = None
                else:
                    value_bytes = venc(value, headers) if vhdr else venc(value)
                    if not vexact and value_bytes is not None:
                        value_bytes = _as_bytes(value_bytes)
            except Exception as exc:
                raise self._unserializable(exc, topic, part) from exc
            if khdr or vhdr:
                # Only a headers-aware serializer can have changed them.
                for header in headers:
                    if (not isinstance(header, tuple) or len(header) != 2
                            or not isinstance(header[0], str)
                            or not isinstance(header[1], bytes | None)):
                        raise ParsleyFailClosedError(
                            Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE,
                            shapes.application_payload_unserializable(topic)
                            + _context(self.process.name, "a serializer added a header that "
                                       f"is not a str and bytes-or-None pair: {header!r}")
                            + APPLICATION_REMEDY,
                        )
                    if header[0].startswith(RESERVED_HEADER_PREFIX):
                        raise self._reserved(topic, header[0])
            ts = s.timestamp_ms
            out.append((topic, key_bytes, value_bytes, headers,
                        timestamp_ms if ts is None else ts))
        return out

    # -- the frame ----------------------------------------------------------------

    def run(self, topic: str, partition: int, offset: int, timestamp_ms: int,
            key: bytes | None, value: bytes | None,
            headers: Sequence[Header] = ()) -> tuple[Sequence[PlannedSend],
                                                     tuple[SerializedWrite, ...]]:
        """:meth:`deliver` in the worker's form: the sends as :data:`PlannedSend` tuples.

        The same steps, checks, refusals and order as :meth:`deliver` (which wraps this);
        nothing is built per message beyond the :class:`parsley.Delivery` the handler
        receives and what the handler itself builds: each planned send's header list is
        new and the caller's to extend (the worker appends ``parsley.causes`` and hands
        the list to ``Producer.produce`` as it is).

        Returns:
            ``(sends, writes)``: the serialized emissions and store writes, each in the
            handler's order; empty sequences for ``Effects.none()``.

        Raises:
            As :meth:`deliver`.
        """
        if self._latched is not None:
            self._rethrow()
        source = self._in_plans.get(topic)
        if source is None:
            raise self._not_received(topic, batch=False)
        handler, decode_key, decode_value = source
        key_value, value_value = self._decode(topic, partition, offset, key, value,
                                              decode_key, decode_value)
        if self._latched is not None:
            self._rethrow()
        delivery = new_delivery(topic, partition, offset, timestamp_ms, key_value, value_value,
                                strip_reserved(headers) if headers else ())
        effects = self._call(handler, delivery, topic, partition, offset)
        return self.plan(effects, topic, partition, offset, timestamp_ms)

    def _call(self, handler: Callable[[Any, Any], Any], argument: Any, topic: str,
              partition: int, offset: int) -> Any:
        """``handler(argument, state)``'s effects; a refusal it raises (or latched meanwhile)
        is rethrown, any other exception is :meth:`handler_raised`'s at ``offset``."""
        try:
            if self._latching:
                return handler(argument, self._state)
            # RefusalLatch(self.latch), without the object: refusals raised while the
            # handler builds effects are latched into this frame.
            token = _REFUSAL_LATCH.set(self._latch_fn)
            try:
                return handler(argument, self._state)
            finally:
                _REFUSAL_LATCH.reset(token)
        except ParsleyFailClosedError:
            self._rethrow()
            raise
        except Exception as exc:
            self.handler_raised(exc, topic, partition, offset)

    def _not_received(self, topic: str, *, batch: bool) -> ValueError:
        """The worker bug of feeding ``topic`` to the wrong one of :meth:`run` and
        :meth:`run_batch` (or a topic not received at all)."""
        if topic in (self._in_plans if batch else self._batch_plans):
            how = "per record" if batch else "in batches (receives_batch)"
            return ValueError(f"{self.process.name} receives {topic} {how}; it was handed "
                              f"to the other form")
        return ValueError(f"{self.process.name} was fed {topic}, which it does not receive")

    def _decode(self, topic: str, partition: int, offset: int, key: bytes | None,
                value: bytes | None, decode_key: Callable[[bytes], Any],
                decode_value: Callable[[bytes], Any]) -> tuple[Any, Any]:
        """Key and value through the channel's serdes (APPLICATION_PAYLOAD_UNDECODABLE)."""
        part = "key"
        try:
            key_value = None if key is None else decode_key(key)
            part = "value"
            value_value = None if value is None else decode_value(value)
        except Exception as exc:
            self._rethrow()
            raise ParsleyFailClosedError(
                Reason.APPLICATION_PAYLOAD_UNDECODABLE,
                f"{shapes.application_payload_undecodable(topic, offset)} "
                f"{part} could not be decoded by the declared serde"
                + _context(self.process.name, f"partition {partition}", _describe(exc))
                + APPLICATION_REMEDY,
            ) from exc
        return key_value, value_value

    def run_batch(self, topic: str, partition: int,
                  entries: Sequence[tuple[int, int, bytes | None, bytes | None,
                                          Sequence[Header]]],
                  ) -> tuple[Sequence[PlannedSend], tuple[SerializedWrite, ...]]:
        """Deliveries of a batch-handled channel (``Process.receives_batch``) through its
        handler in one call, and the effects it returns planned.

        Args:
            topic: the received topic; partition: its partition.
            entries: ``(offset, timestamp_ms, key, value, headers)`` of each delivery, in
                delivery order, at least one and at most the input's ``max_records``.

        Each entry is decoded as :meth:`run` decodes one (APPLICATION_PAYLOAD_UNDECODABLE
        names the entry's offset); the handler gets the list of :class:`parsley.Delivery`
        and the frame's state, whose reads see the stores as they were before the batch.
        The effects are checked and planned as :meth:`plan` does for one delivery, a send
        without a timestamp taking the last entry's; a handler failure names the first
        entry's offset.

        Returns:
            As :meth:`run`: ``(sends, writes)`` of the whole batch, in the handler's order.

        Raises:
            As :meth:`run`; ValueError also for an empty batch or one over ``max_records``.
        """
        if self._latched is not None:
            self._rethrow()
        source = self._batch_plans.get(topic)
        if source is None:
            raise self._not_received(topic, batch=True)
        if not entries or len(entries) > self.batch_limits[topic]:
            raise ValueError(f"{self.process.name}: a batch of {len(entries)} deliveries of "
                             f"{topic} (1 to {self.batch_limits[topic]} allowed)")
        handler, decode_key, decode_value = source
        deliveries = []
        for offset, timestamp_ms, key, value, headers in entries:
            key_value, value_value = self._decode(topic, partition, offset, key, value,
                                                  decode_key, decode_value)
            deliveries.append(new_delivery(topic, partition, offset, timestamp_ms, key_value,
                                           value_value,
                                           strip_reserved(headers) if headers else ()))
        if self._latched is not None:
            self._rethrow()
        first = entries[0][0]
        self.batch_calls += 1
        effects = self._call(handler, deliveries, topic, partition, first)
        return self.plan(effects, topic, partition, first, entries[-1][1])

    def deliver_batch(self, topic: str, partition: int,
                      entries: Sequence[tuple[int, int, bytes | None, bytes | None,
                                              Sequence[Header]]]) -> FrameResult:
        """:meth:`run_batch` in the public form of :meth:`deliver` (a :class:`FrameResult`)."""
        sends, writes = self.run_batch(topic, partition, entries)
        return FrameResult(
            tuple(SerializedSend(t, k, v, tuple(h), ts) for t, k, v, h, ts in sends), writes)

    def handler_raised(self, exc: Exception, topic: str, partition: int,
                       offset: int) -> NoReturn:
        """Raise what a handler that raised ``exc`` stops the step with (as :meth:`run`).

        A latched refusal first; a refusal raised by the handler as it is; anything else as
        :class:`HandlerFailure` with ``exc`` as its cause.

        Args:
            exc: what the handler raised.
            topic: the received topic of the delivery.
            partition: its partition.
            offset: the delivered message's offset.

        Raises:
            ParsleyFailClosedError: the latched refusal, or ``exc`` when it is one.
            HandlerFailure: otherwise.
        """
        self._rethrow()
        if isinstance(exc, ParsleyFailClosedError):
            raise exc
        raise HandlerFailure(self.task, topic, partition, offset, _describe(exc)) from exc

    def plan(self, effects: Any, topic: str, partition: int, offset: int,
             timestamp_ms: int) -> tuple[Sequence[PlannedSend], tuple[SerializedWrite, ...]]:
        """What the handler returned, checked and planned (the second half of :meth:`run`).

        Args:
            effects: the handler's return value for the delivery of ``topic``-``partition``
                at ``offset``.
            timestamp_ms: the delivered message's timestamp, ms (a send's default).

        Returns:
            As :meth:`run`.

        Raises:
            As :meth:`run` after its handler call.
        """
        if self._latched is not None:
            self._rethrow()
        if effects.__class__ is not Effects:
            if effects is None:
                raise ParsleyFailClosedError(
                    Reason.HANDLER_RETURNED_NULL_EFFECTS,
                    shapes.handler_returned_null_effects(topic) + _context(self.process.name)
                    + APPLICATION_REMEDY,
                )
            if not isinstance(effects, Effects):
                hint = (": call .build() on it" if isinstance(effects, EffectsBuilder)
                        else "")
                wrong = TypeError(
                    f"handler returned {type(effects).__name__}, not Effects{hint}")
                raise HandlerFailure(self.task, topic, partition, offset,
                                     _describe(wrong)) from wrong
        sends, writes = effects.sends, effects.writes
        if not writes:
            if not sends:
                return (), ()
            if len(sends) == 1:
                plan = self._out_plans.get(sends[0].channel.name)
                if plan is not None and plan[3] and plan[6] and not sends[0].headers:
                    return self._plan_plain(sends[0], plan, timestamp_ms), ()
        # Every target first, then every payload: nothing is serialized for a step
        # with an undeclared target, and nothing is returned unless all of it is.
        stores = [self.resolve_store(w.store, "state write") for w in writes] if writes else ()
        if len(sends) == 1:  # the common case, without the comprehension
            plan = self._out_plans.get(sends[0].channel.name)
            plans = [plan if plan is not None else self._output(sends[0].channel)]
        else:
            output = self._output
            plans = [output(s.channel) for s in sends]
        planned_writes = tuple(self._plan_write(d, w.key, w.value)
                               for d, w in zip(stores, writes, strict=True)) if writes else ()
        planned_sends = self._plan_sends(sends, plans, timestamp_ms) if sends else ()
        if self._latched is not None:
            self._rethrow()
        return planned_sends, planned_writes

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
        sends, writes = self.run(topic, partition, offset, timestamp_ms, key, value, headers)
        return FrameResult(
            tuple(SerializedSend(t, k, v, tuple(h), ts) for t, k, v, h, ts in sends), writes)
