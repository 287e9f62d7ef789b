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
from parsley.effects import Handler

__all__ = ["Input", "Process"]

K = TypeVar("K")
V = TypeVar("V")


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

