"""Declarations: channels, stores, processes, and the effects a handler returns.

A *process* receives one or more channels (a declared topic with its serdes),
runs a handler per received channel, and may send to declared channels and
read and write declared stores::

    orders = Channel("orders", STRING, JSON)
    audit = Channel("audit", STRING, JSON)
    counts = Store("counts", STRING, JSON)

    def on_order(delivery, state):
        seen = state.get(counts, delivery.key) or 0
        return (Effects.builder()
                .put(counts, delivery.key, seen + 1)
                .send(audit, delivery.key, {"seen": seen + 1})
                .build())

    process = Process("tally").receives(orders, on_order).sends(audit).stores(counts)

Every declaration is an immutable value (a frozen dataclass); each builder
step returns a new ``Process``. Declarations pickle with ``dill`` (the
``multiprocess`` package's pickler), closures included, so the coordinator can
hand them to a spawned worker.

Names on the cluster are composed here (``JAVA-PARSLEY-FACTS.md`` §5, "Names
on the cluster"; DESIGN.md), and :func:`validate_declarations` is the check the
coordinator runs at start (facts §5, bootstrap step 1).

Source: ``JAVA-PARSLEY-FACTS.md`` §11 (``Process``, ``Topic``, ``Store``,
``Handler``, ``Delivery``, ``State``, ``Effects``), issue 4 item 0.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, Protocol, TypeVar

from parsley.engine.channel import Header
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import Serde, check_serde, equivalent_serdes
from parsley.wire import RESERVED_PREFIX as _HEADER_PREFIX

__all__ = [
    "EARLIEST",
    "LATEST",
    "RESERVED_NAME_PREFIX",
    "TASK_ID_MIN_DIGITS",
    "Channel",
    "Delivery",
    "Effects",
    "EffectsBuilder",
    "Handler",
    "InitialPosition",
    "Input",
    "Process",
    "RefusalLatch",
    "Send",
    "State",
    "Store",
    "Write",
    "application_id",
    "group_instance_id",
    "ordering_changelog",
    "same_store",
    "store_changelog",
    "task_width",
    "transactional_id",
    "validate_declarations",
]

K = TypeVar("K")
V = TypeVar("V")

RESERVED_NAME_PREFIX: Final = "__parsley."
"""Parsley's namespace in cluster names (Java ``Parsley.RESERVED_PREFIX``). No
declared prefix, process, store or channel name may contain it. Not the header
prefix: that is :data:`parsley.wire.RESERVED_PREFIX` (``parsley.``)."""

TASK_ID_MIN_DIGITS: Final = 3
"""Task numbers in transactional and group instance ids are zero-padded to at
least this many digits (``task-007``), so the ids sort in task order."""

_MAX_TOPIC_NAME = 249  # Kafka's limit on a topic name, in characters
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def _check_name(kind: str, name: object) -> str:
    """Refuse a name that cannot be part of a Kafka topic name, or is reserved."""
    if not isinstance(name, str):
        raise TypeError(f"{kind} name must be a str, got {type(name).__name__}")
    if not name.strip():
        raise ValueError(f"{kind} name must not be blank")
    if RESERVED_NAME_PREFIX in name:
        raise ValueError(f"{kind} name '{name}' uses the reserved prefix {RESERVED_NAME_PREFIX}")
    if not _LEGAL_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"{kind} name '{name}' is not a legal Kafka topic name part "
            "(ASCII letters, digits, '.', '_' and '-' only)"
        )
    if len(name) > _MAX_TOPIC_NAME:
        raise ValueError(f"{kind} name '{name[:40]}...' is over {_MAX_TOPIC_NAME} characters")
    return name


class InitialPosition(enum.Enum):
    """Where a channel is first read when a process has never run (facts §11).

    Applies on a process's first ever start only; with prior state the
    bootstrap forces EARLIEST for a newly named topic (facts §5 step 3.6).
    """

    EARLIEST = "EARLIEST"
    """The log start: read everything the topic retains."""
    LATEST = "LATEST"
    """The log end: read only what is written after the first start."""


EARLIEST: Final = InitialPosition.EARLIEST
LATEST: Final = InitialPosition.LATEST


@dataclass(frozen=True, slots=True)
class Channel(Generic[K, V]):
    """A declared topic and the serdes of its keys and values (Java ``Topic``).

    Attributes:
        name: the Kafka topic name; must already exist when the process starts.
        key_serde: encodes and decodes record keys (:class:`parsley.serdes.Serde`).
        value_serde: encodes and decodes record values.
        initial_position: where a process's first ever start reads it; EARLIEST
            by default.

    Raises:
        ValueError: a blank or reserved name, or one Kafka does not allow.
        TypeError: a serde without ``serialize``/``deserialize``, or a bad position.
    """

    name: str
    key_serde: Serde[K]
    value_serde: Serde[V]
    initial_position: InitialPosition = InitialPosition.EARLIEST

    def __post_init__(self) -> None:
        _check_name("channel", self.name)
        check_serde(self.key_serde, f"channel '{self.name}' key serde")
        check_serde(self.value_serde, f"channel '{self.name}' value serde")
        if not isinstance(self.initial_position, InitialPosition):
            raise TypeError(f"channel '{self.name}': initial position must be EARLIEST or LATEST")

    def starting_at(self, position: InitialPosition) -> Channel[K, V]:
        """Return a copy that starts at ``position`` (EARLIEST or LATEST) on a first start."""
        return replace(self, initial_position=position)


@dataclass(frozen=True, slots=True)
class Store(Generic[K, V]):
    """A declared key-value store, changelogged to ``<prefix>-<process>-<name>-changelog``.

    Java matches stores by instance; an instance does not survive pickling
    into a worker, so here a store is matched by :func:`same_store`: the same
    name and equivalent serdes. A look-alike with other serdes is refused as
    "a Store instance other than the declared one" (seed 001,
    STATE_ACCESS_TO_UNDECLARED_STORE).

    Attributes:
        name: the store name, unique within its process.
        key_serde: encodes keys (the bytes the store is keyed by).
        value_serde: encodes and decodes values.

    Raises:
        ValueError: a blank or reserved name, or one Kafka does not allow.
        TypeError: a serde without ``serialize``/``deserialize``.
    """

    name: str
    key_serde: Serde[K]
    value_serde: Serde[V]

    def __post_init__(self) -> None:
        _check_name("store", self.name)
        check_serde(self.key_serde, f"store '{self.name}' key serde")
        check_serde(self.value_serde, f"store '{self.name}' value serde")


def same_store(a: Store[Any, Any], b: Store[Any, Any]) -> bool:
    """Whether ``a`` and ``b`` are the same declared store: same name, equivalent serdes.

    See :func:`parsley.serdes.equivalent_serdes`.
    """
    return a is b or (
        a.name == b.name
        and equivalent_serdes(a.key_serde, b.key_serde)
        and equivalent_serdes(a.value_serde, b.value_serde)
    )


@dataclass(frozen=True, slots=True)
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

    Inside ``with RefusalLatch(frame.latch):`` a refusal raised by
    :class:`Send` / :meth:`EffectsBuilder.send` (RESERVED_HEADER_USED) is
    handed to ``latch`` before it is raised, so the frame rethrows it at its
    next boundary even when the application catches it. Outside any frame the
    refusal is simply raised.

    Args:
        latch: remembers a refusal (the first one wins) and returns it.

    Source: seed 001, "Every refusal raised inside the handler frame is
    latched and rethrown at the frame's boundary"; Java ``ParsleyProcessor``.
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
    if headers is None:
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
                f"{topic}: application header '{key}' uses the reserved prefix "
                f"'{_HEADER_PREFIX}'; application headers may not use it",
            ))
        out.append((key, None if value is None else bytes(value)))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Send:
    """One emission (Java ``Effects.Send``).

    Attributes:
        channel: carries the topic name only; the bytes are made by the serdes
            of the channel of that name the process declared (seed 000,
            EMISSION_TO_UNDECLARED_CHANNEL).
        key: the key, or ``None`` for a null key.
        value: the value, or ``None`` for a tombstone.
        headers: application headers, ``(key, bytes | None)`` pairs in order.
        timestamp_ms: the record timestamp, ms since the epoch, or ``None`` for
            the delivered message's timestamp.

    Raises:
        ParsleyFailClosedError: RESERVED_HEADER_USED for a ``parsley.*`` header
            key, latched into the handler frame (see :class:`RefusalLatch`).
        ValueError: a negative timestamp.
        TypeError: ``channel`` is not a Channel, or a malformed header.
    """

    channel: Channel[Any, Any]
    key: Any
    value: Any
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.channel, Channel):
            raise TypeError(f"send needs a Channel, got {type(self.channel).__name__}")
        object.__setattr__(self, "headers", _headers(self.channel.name, self.headers))
        ts = self.timestamp_ms
        if ts is not None:
            if not isinstance(ts, int) or isinstance(ts, bool):
                raise TypeError(f"{self.channel.name}: timestamp must be an int of ms")
            if ts < 0:
                raise ValueError(f"{self.channel.name}: timestamp must be >= 0 ms, got {ts}")


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


@dataclass(frozen=True, slots=True)
class Effects:
    """What one delivery does: emissions and store writes, each in the order given.

    Build with :meth:`none` or :meth:`builder`. A handler must return one;
    ``None`` is refused (seed 000, HANDLER_RETURNED_NULL_EFFECTS).
    """

    sends: tuple[Send, ...] = ()
    writes: tuple[Write, ...] = ()

    @staticmethod
    def none() -> Effects:
        """Effects of a step that changes nothing."""
        return _NONE

    @staticmethod
    def builder() -> EffectsBuilder:
        """A fresh, mutable :class:`EffectsBuilder`."""
        return EffectsBuilder()


_NONE: Final = Effects()


class EffectsBuilder:
    """Collects sends and writes; :meth:`build` returns the immutable :class:`Effects`.

    Each method returns the builder, so calls chain.
    """

    __slots__ = ("_sends", "_writes")

    def __init__(self) -> None:
        self._sends: list[Send] = []
        self._writes: list[Write] = []

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
            ValueError: negative timestamp.
        """
        self._sends.append(Send(channel, key, value, _headers(channel.name, headers), timestamp))
        return self

    def put(self, store: Store[K, V], key: K, value: V) -> EffectsBuilder:
        """Store ``value`` under ``key``.

        Raises:
            ValueError: ``value`` is ``None`` (use :meth:`delete`).
        """
        if value is None:
            raise ValueError(f"{store.name}: put needs a value; use delete(store, key) to remove")
        self._writes.append(Write(store, key, value))
        return self

    def delete(self, store: Store[K, V], key: K) -> EffectsBuilder:
        """Remove ``key`` from ``store`` (a changelog tombstone)."""
        self._writes.append(Write(store, key, None))
        return self

    def build(self) -> Effects:
        """The effects collected so far; the builder stays usable."""
        return Effects(tuple(self._sends), tuple(self._writes))


Handler = Callable[[Delivery[Any, Any], State], Effects]
"""``(delivery, state) -> Effects``: the application code for one received channel."""


@dataclass(frozen=True, slots=True)
class Input:
    """A received channel and its handler (Java ``Process.Input``)."""

    channel: Channel[Any, Any]
    handler: Handler


@dataclass(frozen=True, slots=True)
class Process:
    """A declared process: what it receives, sends and stores (Java ``Process``).

    ``Process("tally").receives(ch, handler).sends(out).stores(counts)``: each
    step returns a new Process, and may be repeated to add more. A process
    must receive at least one channel; that, and checks across processes,
    are made by :func:`validate_declarations`.

    Attributes:
        name: the process name; the application id is ``<prefix>-<name>``.
        inputs: received channels with their handlers, in declaration order.
        outputs: channels it may send to.
        declared_stores: stores it may read and write.

    Raises:
        ValueError: a blank or reserved name; a channel received twice, a
            channel name sent twice, or a store name declared twice.
        TypeError: a handler that is not callable, or a non-Channel/Store argument.
    """

    name: str
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Channel[Any, Any], ...] = ()
    declared_stores: tuple[Store[Any, Any], ...] = field(default=())

    def __post_init__(self) -> None:
        _check_name("process", self.name)

    def receives(self, channel: Channel[K, V], handler: Handler) -> Process:
        """Add a received channel and the handler for its messages."""
        if not isinstance(channel, Channel):
            raise TypeError(f"process '{self.name}': receives() needs a Channel")
        if not callable(handler):
            raise TypeError(f"process '{self.name}': handler for '{channel.name}' is not callable")
        if self.input(channel.name) is not None:
            raise ValueError(f"process '{self.name}' receives channel '{channel.name}' twice")
        return replace(self, inputs=(*self.inputs, Input(channel, handler)))

    def sends(self, *channels: Channel[Any, Any]) -> Process:
        """Add channels this process may emit to (membership is by topic name)."""
        names = [c.name for c in self.outputs]
        for channel in channels:
            if not isinstance(channel, Channel):
                raise TypeError(f"process '{self.name}': sends() takes Channels")
            if channel.name in names:
                raise ValueError(
                    f"process '{self.name}' declares send channel '{channel.name}' twice"
                )
            names.append(channel.name)
        return replace(self, outputs=(*self.outputs, *channels))

    def stores(self, *stores: Store[Any, Any]) -> Process:
        """Add stores this process may read and write."""
        names = [s.name for s in self.declared_stores]
        for store in stores:
            if not isinstance(store, Store):
                raise TypeError(f"process '{self.name}': stores() takes Stores")
            if store.name in names:
                raise ValueError(f"process '{self.name}' declares store '{store.name}' twice")
            names.append(store.name)
        return replace(self, declared_stores=(*self.declared_stores, *stores))

    def input(self, topic: str) -> Input | None:
        """The input receiving ``topic``, or ``None``."""
        return next((i for i in self.inputs if i.channel.name == topic), None)

    def output(self, topic: str) -> Channel[Any, Any] | None:
        """The declared send channel named ``topic``, or ``None``."""
        return next((c for c in self.outputs if c.name == topic), None)

    def store(self, name: str) -> Store[Any, Any] | None:
        """The declared store named ``name``, or ``None``."""
        return next((s for s in self.declared_stores if s.name == name), None)

    @property
    def received_topics(self) -> tuple[str, ...]:
        """Names of the received topics, in declaration order."""
        return tuple(i.channel.name for i in self.inputs)


# --- names on the cluster (facts §5 "Names on the cluster"; DESIGN.md) ---


def application_id(prefix: str, process: str) -> str:
    """``<prefix>-<process>``: the application id and consumer group of a process."""
    return f"{prefix}-{process}"


def ordering_changelog(prefix: str, process: str) -> str:
    """``<prefix>-<process>-__parsley.ordering-changelog``: the ordering state's topic."""
    return f"{application_id(prefix, process)}-{RESERVED_NAME_PREFIX}ordering-changelog"


def store_changelog(prefix: str, process: str, store: str) -> str:
    """``<prefix>-<process>-<store>-changelog``: a declared store's changelog topic."""
    return f"{application_id(prefix, process)}-{store}-changelog"


def _task_suffix(task: int, task_count: int | None) -> str:
    if not isinstance(task, int) or task < 0:
        raise ValueError(f"a task number is an int >= 0, got {task!r}")
    digits = TASK_ID_MIN_DIGITS
    if task_count is not None:
        if task >= task_count:
            raise ValueError(f"task {task} is outside 0..{task_count - 1}")
        digits = max(digits, len(str(task_count - 1)))
    return f"task-{task:0{digits}d}"


def transactional_id(prefix: str, process: str, task: int, task_count: int | None = None) -> str:
    """``<prefix>-<process>-task-<i>``, ``<i>`` zero-padded (``task-007``).

    The producer's ``transactional.id`` for task ``i``; ``init_transactions``
    with it fences any zombie of the same task (DESIGN.md, issue 4 item 1).

    Args:
        prefix: the application id prefix.
        process: the process name.
        task: the task number, 0-based.
        task_count: the process's task width W. Padding is
            :data:`TASK_ID_MIN_DIGITS` digits, or as many as W - 1 needs when
            W > 1000; pass it so ids sort in task order at any width.

    Raises:
        ValueError: a negative task, or one not below ``task_count``.
    """
    return f"{application_id(prefix, process)}-{_task_suffix(task, task_count)}"


def group_instance_id(prefix: str, process: str, task: int, task_count: int | None = None) -> str:
    """The consumer's static ``group.instance.id`` for task ``i``: same form as the
    transactional id, ``<prefix>-<process>-task-<i>`` zero-padded, so that the
    range assignor, which orders static members by instance id, hands
    partition ``i`` to task ``i`` (issue 4 item 1). Arguments and errors as
    :func:`transactional_id`.
    """
    return f"{application_id(prefix, process)}-{_task_suffix(task, task_count)}"


def task_width(partition_counts: Mapping[str, int] | Iterable[int]) -> int:
    """W, a process's task count: the widest received topic's partition count.

    Task ``i`` receives partition ``i`` of every received topic with more than
    ``i`` partitions (DESIGN.md; seed 000, TASK_WIDTH_CHANGED).

    Args:
        partition_counts: partition count per received topic (a mapping by
            name, or the counts alone).

    Raises:
        ValueError: no topics, or a count below 1.
    """
    counts = list(partition_counts.values() if isinstance(partition_counts, Mapping)
                  else partition_counts)
    if not counts:
        raise ValueError("a process's task width needs at least one received topic")
    if any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"partition counts must be ints >= 1, got {counts}")
    return int(max(counts))


def validate_declarations(prefix: str, processes: Iterable[Process]) -> None:
    """The start-time check of a set of declarations (facts §5, bootstrap step 1).

    Checks: a legal, unreserved prefix; at least one process; unique process
    names; every process receives something; every composed cluster name is a
    legal topic name; composed changelog names distinct across all processes;
    no declared topic (received or sent) equal to a composed changelog name.

    Args:
        prefix: the application id prefix.
        processes: the processes to start together.

    Raises:
        ValueError: naming the first problem found.
        TypeError: something other than a Process.
    """
    _check_name("application id prefix", prefix)
    procs = list(processes)
    if not procs:
        raise ValueError("at least one process must be declared")
    seen: set[str] = set()
    for p in procs:
        if not isinstance(p, Process):
            raise TypeError(f"expected a Process, got {type(p).__name__}")
        if p.name in seen:
            raise ValueError(f"process name '{p.name}' is declared twice")
        seen.add(p.name)
        if not p.inputs:
            raise ValueError(
                f"process '{p.name}' receives nothing; declare receives(channel, handler)"
            )
    owners: dict[str, str] = {}
    for p in procs:
        composed = [(ordering_changelog(prefix, p.name), f"the ordering changelog of '{p.name}'")]
        composed += [
            (store_changelog(prefix, p.name, s.name),
             f"the changelog of store '{s.name}' of '{p.name}'")
            for s in p.declared_stores
        ]
        for name, what in composed:
            if len(name) > _MAX_TOPIC_NAME:
                raise ValueError(f"{what}, '{name[:60]}...', is longer than {_MAX_TOPIC_NAME} "
                                 "characters; shorten the prefix, process or store name")
            if name in owners:
                raise ValueError(f"{what} and {owners[name]} both compose the name '{name}'")
            owners[name] = what
    for p in procs:
        topics = [c.name for c in (*(i.channel for i in p.inputs), *p.outputs)]
        for topic in topics:
            if topic in owners:
                raise ValueError(f"process '{p.name}' declares topic '{topic}', which is "
                                 f"{owners[topic]}")
