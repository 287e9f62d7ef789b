"""Declared channels and stores, and the rules for their names.

A :class:`Channel` is a declared topic with the serdes of its keys and values;
a :class:`Store` a declared key-value store. Both are immutable values (frozen
dataclasses) that pickle with ``dill``. Names must be legal Kafka topic name
parts and may not contain Parsley's reserved namespace
:data:`RESERVED_NAME_PREFIX`.

Source: README.md, "Write your own process" (``Topic``, ``Store``);
docs/operations.md, "Names on the cluster". Re-exported by :mod:`parsley.declarations`.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, replace
from typing import Any, Final, Generic, TypeVar

from parsley.serdes import Serde, check_serde, equivalent_serdes

__all__ = [
    "EARLIEST",
    "LATEST",
    "MAX_TOPIC_NAME",
    "RESERVED_NAME_PREFIX",
    "Channel",
    "InitialPosition",
    "Store",
    "check_name",
    "same_store",
]

K = TypeVar("K")
V = TypeVar("V")

RESERVED_NAME_PREFIX: Final = "__parsley."
"""Parsley's namespace in cluster names (Java ``Parsley.RESERVED_PREFIX``). No
declared prefix, process, store or channel name may contain it. Not the header
prefix: that is :data:`parsley.wire.RESERVED_PREFIX` (``parsley.``)."""

MAX_TOPIC_NAME: Final = 249
"""Kafka's limit on a topic name, in characters."""
_LEGAL_NAME = re.compile(r"[A-Za-z0-9._-]+")


def check_name(kind: str, name: object) -> str:
    """Refuse a name that cannot be part of a Kafka topic name, or is reserved.

    Args:
        kind: what the name names, for the message (``"channel"``, ``"store"``...).
        name: the name to check.

    Returns:
        ``name``, unchanged.

    Raises:
        TypeError: ``name`` is not a str.
        ValueError: blank; containing :data:`RESERVED_NAME_PREFIX`; not only
            ASCII letters, digits, ``.``, ``_`` and ``-`` (or ``.``/``..``);
            longer than :data:`MAX_TOPIC_NAME` characters.
    """
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
    if len(name) > MAX_TOPIC_NAME:
        raise ValueError(f"{kind} name '{name[:40]}...' is over {MAX_TOPIC_NAME} characters")
    return name


class InitialPosition(enum.Enum):
    """Where a channel is first read when a process has never run (README.md, "Write your own
    process").

    Applies on a process's first ever start only; with prior state the
    bootstrap forces EARLIEST for a newly named topic (docs/architecture.md, "The bootstrap",
    step 6).
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
        check_name("channel", self.name)
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
    "a Store instance other than the declared one" (docs/runbooks.md, "The application must change",
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
        check_name("store", self.name)
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

