"""A declared process: the channels it receives (with handlers), sends and stores.

``Process("tally").receives(ch, handler).sends(out).stores(counts)``; each
step returns a new, immutable Process.

Source: README.md, "Write your own process" (``Process``). Re-exported by
:mod:`parsley.declarations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeVar

from parsley.channels import Channel, Store, check_name
from parsley.effects import BatchHandler, Handler

__all__ = ["DEFAULT_MAX_BATCH", "Input", "Process"]

K = TypeVar("K")
V = TypeVar("V")


DEFAULT_MAX_BATCH = 500
"""``receives_batch``'s default ``max_records``: the worker's records per ``consume`` call."""


@dataclass(frozen=True, slots=True)
class Input:
    """A received channel and its handler (Java ``Process.Input``).

    Attributes:
        channel: the received channel.
        handler: a :data:`parsley.Handler` (one delivery per call), or with
            ``max_records`` set a :data:`parsley.BatchHandler` (a batch per call).
        max_records: ``None`` for a per-record handler; else the most deliveries one
            batch-handler call gets (>= 1): see :meth:`Process.receives_batch`.
    """

    channel: Channel[Any, Any]
    handler: Handler | BatchHandler
    max_records: int | None = None

    @property
    def batched(self) -> bool:
        """Whether the handler takes batches (:meth:`Process.receives_batch`)."""
        return self.max_records is not None


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
        kafka_properties: librdkafka properties for this process's workers'
            clients only, over the coordinator's (``consumer.``, ``producer.``,
            ``admin.`` prefixes select one kind, as in the coordinator's
            ``kafka_properties``); read-only. The properties Parsley owns are
            refused at the start, naming the property and the process
            (docs/operations.md, "Configuration").

    Raises:
        ValueError: a blank or reserved name; a channel received twice, a
            channel name sent twice, or a store name declared twice; a
            kafka property with no value.
        TypeError: a handler that is not callable, a non-Channel/Store
            argument, or a kafka property name that is not a string.
    """

    name: str
    inputs: tuple[Input, ...] = ()
    outputs: tuple[Channel[Any, Any], ...] = ()
    declared_stores: tuple[Store[Any, Any], ...] = field(default=())
    kafka_properties: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), hash=False)

    def __post_init__(self) -> None:
        check_name("process", self.name)
        props: dict[str, Any] = {}
        for key, value in dict(self.kafka_properties or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"process '{self.name}': kafka property names must be str, "
                                f"got {key!r}")
            if value is None:
                raise ValueError(f"process '{self.name}': kafka property '{key}' has no value")
            props[key] = value
        object.__setattr__(self, "kafka_properties", MappingProxyType(props))

    def with_kafka_properties(self, properties: Mapping[str, Any]) -> Process:
        """Add (or replace) client properties for this process's workers only."""
        return replace(self, kafka_properties={**self.kafka_properties, **properties})

    def receives(self, channel: Channel[K, V], handler: Handler) -> Process:
        """Add a received channel and the handler for its messages."""
        if not isinstance(channel, Channel):
            raise TypeError(f"process '{self.name}': receives() needs a Channel")
        if not callable(handler):
            raise TypeError(f"process '{self.name}': handler for '{channel.name}' is not callable")
        if self.input(channel.name) is not None:
            raise ValueError(f"process '{self.name}' receives channel '{channel.name}' twice")
        return replace(self, inputs=(*self.inputs, Input(channel, handler)))

    def receives_batch(self, channel: Channel[K, V], handler: BatchHandler,
                       max_records: int = DEFAULT_MAX_BATCH) -> Process:
        """Add a received channel whose handler takes its deliveries in batches.

        ``handler(deliveries, state)`` gets a non-empty sequence of at most
        ``max_records`` :class:`parsley.Delivery` of this channel, consecutive in the
        task's causal delivery order (a delivery of another channel ends a batch), and
        returns one :class:`parsley.Effects` for all of them. Additive and opt-in: the
        per-record :meth:`receives` is unchanged, and one process may mix both.

        What differs from calling a per-record handler once per delivery (docs/model.md,
        "Batch handlers"):

        * every send of the batch carries the frontier as of the batch's end (after its
          last delivery): an over-approximation of each message's causes by at most the
          batch, never fewer causes;
        * ``state.get`` reads the stores as they were before the batch: the batch's own
          writes are seen only through the handler's own code (they are applied when it
          returns, in the order given);
        * a send without a timestamp gets the timestamp of the batch's last delivery;
        * a handler failure names the batch's first delivery, and the whole batch is
          delivered again after a restart (nothing of it is committed).

        Raises:
            ValueError: ``channel`` received twice, or ``max_records`` < 1.
            TypeError: a handler that is not callable, a non-Channel, or a
                ``max_records`` that is not an int.
        """
        if not isinstance(max_records, int) or isinstance(max_records, bool):
            raise TypeError(f"process '{self.name}': max_records for '{channel.name}' must be "
                            f"an int, got {type(max_records).__name__}")
        if max_records < 1:
            raise ValueError(f"process '{self.name}': max_records for '{channel.name}' must "
                             f"be >= 1, got {max_records}")
        single = self.receives(channel, handler)  # type: ignore[arg-type]  # same checks
        return replace(single, inputs=(*self.inputs, Input(channel, handler, max_records)))

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

