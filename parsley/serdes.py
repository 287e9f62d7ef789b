"""Serdes: how application keys and values become record bytes and back.

A serde is any object with ``serialize(value) -> bytes | None`` and
``deserialize(data: bytes | None) -> value`` (the :class:`Serde` protocol); nothing needs to
subclass anything. Three are built in:

* :data:`BYTES`: ``bytes`` as is (``bytearray``/``memoryview`` accepted on the way in).
* :data:`STRING`: ``str`` as UTF-8, strictly: an invalid byte sequence fails to decode.
* :data:`JSON`: any value ``orjson`` encodes, as compact UTF-8 JSON.

``None`` maps to ``None`` both ways in every built-in serde (Kafka's null key or tombstone).
As in Java's frame, a delivery's or an emission's ``None`` payload never reaches a serde; a
state key does, so a key that serializes to ``None`` is refused there. A
:class:`HeadersAwareSerde` defines ``serialize_with_headers(value, headers)``, as Kafka's
``Serializer.serialize(topic, headers, data)`` sees headers. Emissions call it with their
headers as a mutable ``list`` of ``(key, value)`` pairs; the frame then refuses a reserved
one. Both refusals: docs/runbooks.md, "The application must change".

Source: README.md, "Write your own process" (``Topic.of(name, keySerde, valueSerde)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import orjson

from parsley.engine.channel import Header

__all__ = [
    "BYTES",
    "JSON",
    "STRING",
    "BytesSerde",
    "HeadersAwareSerde",
    "JsonSerde",
    "Serde",
    "StringSerde",
    "check_serde",
    "decoder",
    "encoder",
    "equivalent_serdes",
]

T = TypeVar("T")
T_contra = TypeVar("T_contra", contravariant=True)


@runtime_checkable
class Serde(Protocol[T]):
    """Encodes values of one type to record bytes and decodes them back.

    Implementations raise any exception to signal failure; the handler frame
    turns it into the refusal docs/failing-closed.md names for the site
    (APPLICATION_PAYLOAD_UNDECODABLE or APPLICATION_PAYLOAD_UNSERIALIZABLE).
    Returning ``None`` from ``serialize`` means a null key or value.
    """

    def serialize(self, value: T) -> bytes | None:
        """Encode ``value``; ``None`` means a null key or value."""
        ...

    def deserialize(self, data: bytes | None) -> T:
        """Decode ``data``; raise if the bytes are not a valid encoding."""
        ...


@runtime_checkable
class HeadersAwareSerde(Protocol[T_contra]):
    """Optional hook: a serializer that sees, and may add to, an emission's headers.

    ``headers`` is the emission's header list, mutable, as Kafka's
    ``Serializer.serialize(topic, headers, data)`` receives it. Whatever the
    hook leaves in it is sent; a key starting with ``parsley.`` is refused
    after the call (docs/runbooks.md, "The application must change":
    ``serializer for <topic> wrote reserved header '<name>'``).
    """

    def serialize_with_headers(self, value: T_contra, headers: list[Header]) -> bytes | None:
        """Encode ``value``, possibly appending ``(key, value)`` pairs to ``headers``."""
        ...


def check_serde(serde: object, what: str) -> None:
    """Refuse an object that is not usable as a serde.

    Args:
        serde: the candidate.
        what: how to name it in the error, e.g. ``"channel 'orders' key serde"``.

    Raises:
        TypeError: ``serde`` has no callable ``serialize`` or ``deserialize``.
    """
    for method in ("serialize", "deserialize"):
        if not callable(getattr(serde, method, None)):
            raise TypeError(
                f"{what} must have callable serialize() and deserialize(); "
                f"{type(serde).__name__} has no {method}()"
            )


def _state(obj: object) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]]:
    """An object's attribute state (slot values, then ``__dict__`` items) for equivalence."""
    names: list[str] = []
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.extend([slots] if isinstance(slots, str) else slots)
    skip = ("__dict__", "__weakref__")
    slot_values = tuple(getattr(obj, n, None) for n in names if n not in skip)
    attrs = getattr(obj, "__dict__", None)
    items = tuple(sorted(attrs.items())) if isinstance(attrs, dict) else ()
    return (slot_values, items)


def equivalent_serdes(a: object, b: object) -> bool:
    """Whether two serde objects encode identically, as far as can be told.

    True when they are the same object, compare equal, or are of the same
    type with equal attribute state. This is how a Store declared in one
    process is recognised after pickling into a worker, where object identity
    (Java's rule, "stores are matched by instance") does not survive.

    Args:
        a: one serde.
        b: the other.

    Returns:
        Whether ``a`` and ``b`` are interchangeable.
    """
    if a is b:
        return True
    try:
        if a == b:
            return True
    except Exception:  # an __eq__ that raises means "not known equal"
        return False
    if type(a) is not type(b):
        return False
    try:
        return bool(_state(a) == _state(b))
    except Exception:
        return False


@dataclass(frozen=True, slots=True)
class BytesSerde:
    """Raw bytes, unchanged. Serializes ``bytes``, ``bytearray`` or ``memoryview``.

    Raises (from ``serialize``):
        TypeError: the value is not a bytes-like object.
    """

    def serialize(self, value: bytes | bytearray | memoryview | None) -> bytes | None:
        """Return ``value`` as ``bytes`` (``None`` stays ``None``)."""
        if value.__class__ is bytes:
            return value
        if value is None:
            return None
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError(f"BYTES serializes bytes, got {type(value).__name__}")
        return bytes(value)

    def deserialize(self, data: bytes | None) -> bytes | None:
        """Return ``data`` unchanged (``None`` stays ``None``)."""
        if data.__class__ is bytes:
            return data
        return None if data is None else bytes(data)


@dataclass(frozen=True, slots=True)
class StringSerde:
    """``str`` as UTF-8.

    Raises:
        TypeError: ``serialize`` of a value that is not a ``str``.
        UnicodeDecodeError: ``deserialize`` of bytes that are not valid UTF-8.
        UnicodeEncodeError: ``serialize`` of a string with lone surrogates.
    """

    def serialize(self, value: str | None) -> bytes | None:
        """Encode ``value`` as UTF-8 (``None`` stays ``None``)."""
        if value.__class__ is str:
            return value.encode()
        if value is None:
            return None
        if not isinstance(value, str):
            raise TypeError(f"STRING serializes str, got {type(value).__name__}")
        return value.encode("utf-8")

    def deserialize(self, data: bytes | None) -> str | None:
        """Decode UTF-8 strictly (``None`` stays ``None``)."""
        return None if data is None else bytes(data).decode("utf-8")


@dataclass(frozen=True, slots=True)
class JsonSerde:
    """Any value ``orjson`` can encode, as compact UTF-8 JSON.

    ``orjson`` encodes ``dict`` (``str`` keys), ``list``, ``tuple`` (as a list),
    ``str``, ``int`` (64-bit), ``float``, ``bool``, dataclasses, ``datetime``
    and ``uuid.UUID``; decoding gives plain JSON types back.

    Raises:
        orjson.JSONEncodeError: ``serialize`` of a value orjson cannot encode
            (a ``TypeError``).
        orjson.JSONDecodeError: ``deserialize`` of bytes that are not JSON
            (a ``ValueError``).
    """

    def serialize(self, value: Any) -> bytes | None:
        """Encode ``value`` as JSON (``None`` stays ``None``, not ``b"null"``)."""
        if value is None:
            return None
        return orjson.dumps(value)

    def deserialize(self, data: bytes | None) -> Any:
        """Decode JSON (``None`` stays ``None``)."""
        return None if data is None else orjson.loads(data)


BYTES: Final = BytesSerde()
"""Raw bytes serde."""
STRING: Final = StringSerde()
"""UTF-8 string serde."""
JSON: Final = JsonSerde()
"""orjson JSON serde."""


_utf8: Final = partial(str, encoding="utf-8")
"""``StringSerde.deserialize`` for non-``None`` data in one C call (``bytes``, ``bytearray``
and ``memoryview`` alike; the same ``UnicodeDecodeError`` on invalid UTF-8)."""


def decoder(serde: Serde[Any]) -> Callable[[bytes], Any]:
    """The handler frame's decoder for ``serde``: called with non-``None`` data only.

    For the built-in serdes (matched by exact type, as a pickled copy of :data:`BYTES`
    is another instance of :class:`BytesSerde`) a C-level callable that returns what
    ``deserialize`` returns and raises what it raises: ``bytes`` for :class:`BytesSerde`,
    ``str(data, encoding="utf-8")`` for :class:`StringSerde`, ``orjson.loads`` for
    :class:`JsonSerde`; any other serde's own ``deserialize``.

    Args:
        serde: a declared serde (see :func:`check_serde`).

    Returns:
        ``data -> value``; failures are the serde's own exceptions.
    """
    kind = type(serde)
    if kind is BytesSerde:
        return bytes
    if kind is StringSerde:
        return _utf8
    if kind is JsonSerde:
        return orjson.loads
    return serde.deserialize


def encoder(serde: Serde[Any]) -> tuple[Callable[..., Any], bool, bool]:
    """How the handler frame serializes through ``serde``, decided once per declared channel.

    Args:
        serde: a declared serde.

    Returns:
        ``(encode, with_headers, exact)``: ``encode(value)``, or ``encode(value, headers)``
        when ``with_headers`` (the serde's ``serialize_with_headers`` hook, see
        :class:`HeadersAwareSerde`); ``exact`` is true for the built-in serdes, whose
        output is always ``bytes`` or ``None``, so the frame skips its output check.
    """
    hook = getattr(serde, "serialize_with_headers", None)
    if callable(hook):
        return hook, True, False
    return serde.serialize, False, type(serde) in (BytesSerde, StringSerde, JsonSerde)
