"""A causal past carried at the edge of a pipeline: `CausalPast` and its `Coverage` verdict.

One type plays every role of session consistency (docs/session.md): a client's session
token, the past a projection records beside its rows, and either side of the comparison
between them. Its wire form is the frozen ``parsley.causes`` grammar itself, decoded by
:mod:`parsley.wire` (the same decoder, refusals and diagnoses as the engine's receipt), so
a damaged token is refused, never salvaged into a weaker one.

:meth:`CausalPast.coverage_of` reuses the engine's delivery decision
(:func:`parsley.engine.deliverability.decide`) with the token's own channels as the
received set: a channel the past never recorded is a gap, so coverage fails closed where
the delivery gate would skip the cause. Source: Java Parsley's ``session/CausalPast.java``.

Pure: standard library and :mod:`parsley.wire` only (``tests/unit/test_purity.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, NoReturn, overload

from parsley import wire
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.engine.deliverability import Blocker, Held, decide
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = ["DEFAULT_MAX_ENTRIES", "CausalPast", "Coverage", "max_encoded_bytes"]

DEFAULT_MAX_ENTRIES: Final = 1024
"""How many channels :meth:`CausalPast.decode` accepts unless told otherwise."""

_MAX_POSITION: Final = FED_TO_END - 1  # 2^63 - 2: the largest position a channel can assign
_WORST_ENTRY_BYTES: Final = 16 + 1 + 5 + 8  # its own topic id, a count of 1, a 5-byte partition
_WORST_HEAD_BYTES: Final = 1 + 5  # version byte, a 5-byte topic count


def max_encoded_bytes(max_entries: int) -> int:
    """The longest encoding, in bytes, of a past naming at most ``max_entries`` channels.

    ``6 + 30 * max_entries``: the version byte and a five-byte topic count, then per channel
    its own 16-byte topic id, a one-byte partition count, a five-byte partition varint and
    the 8-byte position (docs/wire-format.md, "Size"). A longer value names more channels,
    so it can be refused before it is decoded.

    Raises:
        ValueError: ``max_entries`` is negative.
    """
    if max_entries < 0:
        raise ValueError(f"max_entries must be >= 0, got {max_entries}")
    return _WORST_HEAD_BYTES + _WORST_ENTRY_BYTES * max_entries


def _check_entry(channel: object, position: object) -> None:
    """Raise unless ``(channel, position)`` is an entry the grammar can carry (constraints 5-7)."""
    if not isinstance(channel, ChannelId):
        raise TypeError(f"a causal past is keyed by ChannelId, got {type(channel).__name__}")
    if not isinstance(position, int) or isinstance(position, bool):
        raise TypeError(f"position on {channel} must be an int offset, "
                        f"got {type(position).__name__}")
    if not 0 <= position <= _MAX_POSITION:
        raise ValueError(f"position {position} on {channel} cannot be carried: "
                         "it must be in 0..2^63-2")
    if channel.topic_id.int == 0:
        raise ValueError(f"channel {channel} names the zero topic id, which no topic can have")


@dataclass(frozen=True, slots=True)
class Coverage:
    """The verdict of :meth:`CausalPast.coverage_of`: what the recorded past does not account for.

    Attributes:
        gaps: one :class:`~parsley.engine.deliverability.Blocker` per token entry the past
            falls short of, in channel order: ``channel``, ``required`` (the token's
            position, inclusive) and ``settled`` (the position the past records for that
            channel, or ``None`` when it records none). Empty when the past covers.
    """

    gaps: tuple[Blocker, ...] = ()

    @property
    def covers(self) -> bool:
        """Whether the past accounts for everything the token names (no gaps)."""
        return not self.gaps


_COVERS: Final = Coverage()


class CausalPast:
    """An immutable map of channel to position (inclusive): a session token or a recorded past.

    Build one with :meth:`none`, :meth:`of` or :meth:`decode`; the constructor is not public.
    Every method returns a new past, or the same object when nothing changes. Equal pasts
    compare and hash equal, and pickle as their mapping.

    An entry ``(channel, p)`` means every record at or below offset ``p`` on that channel
    is in this past (docs/model.md, "The frontier, and what a header means").

    Source: Java Parsley's ``session/CausalPast.java`` (``none``, ``of``, ``decode``,
    ``encode``, ``causes``, ``size``, ``merge``, ``coverageOf``); docs/session.md.
    """

    __slots__ = ("_causes", "_hash")
    _causes: dict[ChannelId, int]
    _hash: int | None

    def __init__(self) -> None:
        raise TypeError("build a CausalPast with CausalPast.none(), .of(mapping) or .decode(bytes)")

    @staticmethod
    def _make(causes: dict[ChannelId, int]) -> CausalPast:
        """A past over ``causes``, already validated and in channel order (not copied)."""
        return _new_past(causes) if causes else _EMPTY

    @staticmethod
    def none() -> CausalPast:
        """The empty past: a session that has observed nothing (one shared instance)."""
        return _EMPTY

    @staticmethod
    def of(causes: Mapping[ChannelId, int]) -> CausalPast:
        """A past carrying ``causes``.

        Args:
            causes: channel to position (a Kafka offset, inclusive), any order; copied.

        Returns:
            The past, its entries in channel order; :meth:`none` for an empty mapping.

        Raises:
            TypeError: ``causes`` is not a mapping, a key is not a
                :class:`~parsley.engine.channel.ChannelId` or a position not an int.
            ValueError: a position outside 0..2^63-2 or a channel with the zero topic id:
                entries the grammar cannot carry (docs/wire-format.md, "Constraints" 5-7).
        """
        if not isinstance(causes, Mapping):
            raise TypeError(f"causes must be a mapping of ChannelId to position, "
                            f"got {type(causes).__name__}")
        for channel, position in causes.items():
            _check_entry(channel, position)
        return CausalPast._make(dict(sorted(causes.items())))

    @staticmethod
    def decode(data: bytes | bytearray | memoryview | None, *,
               max_entries: int = DEFAULT_MAX_ENTRIES) -> CausalPast:
        """Decode a past from the frozen ``parsley.causes`` grammar, exactly as strictly as
        the engine decodes a received header.

        Args:
            data: the encoded past (:meth:`encode`'s bytes, or a record's
                ``parsley.causes`` value). Grammar: docs/wire-format.md, "Grammar".
            max_entries: the most channels accepted; a token naming more is over-broad.

        Returns:
            The past.

        Raises:
            ParsleyFailClosedError: reason ``METADATA_BUDGET_EXCEEDED`` for an over-broad
                value, checked first: ``carries N bytes; a past of at most M channels
                takes at most B bytes`` (longer than :func:`max_encoded_bytes`, refused
                before decoding, as the engine refuses a header over its budget), or
                ``names N channels; at most M are accepted``. Reason
                ``UNDECODABLE_METADATA`` with the decoder's own diagnosis otherwise:
                every refusal and detail text of :func:`parsley.wire.decode_causes`,
                with nothing salvaged.
            ValueError: ``max_entries`` is negative.
        """
        bound = max_encoded_bytes(max_entries)
        if data is not None and len(data) > bound:
            raise ParsleyFailClosedError(
                Reason.METADATA_BUDGET_EXCEEDED,
                f"carries {len(data)} bytes; a past of at most {max_entries} channels "
                f"takes at most {bound} bytes")
        raw = data if data is None or type(data) is bytes else bytes(data)
        causes = wire.decode_causes(raw)
        if len(causes) > max_entries:
            raise ParsleyFailClosedError(
                Reason.METADATA_BUDGET_EXCEEDED,
                f"names {len(causes)} channels; at most {max_entries} are accepted")
        return CausalPast._make(causes)  # the decoder returns channel order

    def encode(self) -> bytes:
        """This past in the frozen grammar: canonical (one past, one spelling), valid as a
        ``parsley.causes`` header value, and :meth:`decode` of it gives this past back;
        ``01 00`` when empty. Same bytes as :func:`parsley.wire.encode_causes`."""
        return wire.encode_causes(self._causes)

    @property
    def causes(self) -> Mapping[ChannelId, int]:
        """A read-only view: channel to position (inclusive), in channel order."""
        return MappingProxyType(self._causes)

    def __len__(self) -> int:
        """How many channels this past names: bound it before trusting an inbound token."""
        return len(self._causes)

    @overload
    def merge(self, other: CausalPast, /) -> CausalPast: ...
    @overload
    def merge(self, channel: ChannelId, position: int, /) -> CausalPast: ...

    def merge(self, other: CausalPast | ChannelId, position: int | None = None, /) -> CausalPast:
        """Merge pointwise: per channel the greater position wins.

        ``merge(channel, position)`` merges one observed coordinate: a delivery's own
        ``(channel, offset)`` at a projection's handler, or the coordinate a produce
        acknowledgement confirmed at a write tier. ``merge(other)`` merges another past: a
        read tier folding the served data's recorded past into the client's token.

        Returns:
            A past covering both. ``self`` itself when it already covers what is merged; the
            other past itself when ``self`` is empty or the other already covers ``self``.

        Raises:
            TypeError: ``other`` is neither a CausalPast nor a ChannelId, a position is
                given with a past or missing with a channel, or the position is not an int.
            ValueError: a negative position, or one above 2^63-2 (docs/wire-format.md,
                "Constraints" 6-7).
        """
        if isinstance(other, CausalPast):
            if position is not None:
                raise TypeError("merge(past) takes no position")
            return self._merge_past(other)
        if position is None:
            raise TypeError(f"merge needs a CausalPast, or a ChannelId and a position, "
                            f"got {type(other).__name__} alone")
        _check_entry(other, position)
        current = self._causes.get(other)
        if current is not None and current >= position:
            return self
        merged = dict(self._causes)
        merged[other] = position
        if current is None:
            merged = dict(sorted(merged.items()))
        return CausalPast._make(merged)

    def _merge_past(self, other: CausalPast) -> CausalPast:
        mine, theirs = self._causes, other._causes
        if not theirs:
            return self
        if not mine:
            return other
        merged = dict(mine)
        grew = added = False
        for channel, position in theirs.items():
            current = merged.get(channel)
            if current is None:
                merged[channel] = position
                grew = added = True
            elif position > current:
                merged[channel] = position
                grew = True
        if not grew:
            return self
        if merged == theirs:
            return other
        return CausalPast._make(dict(sorted(merged.items())) if added else merged)

    def coverage_of(self, token: CausalPast) -> Coverage:
        """Whether this past (a recorded past) accounts for everything ``token`` names.

        Every channel of the token is checked: the engine's rule
        (:func:`parsley.engine.deliverability.decide`) runs with the token's own channels as
        the received set, so none is skippable. A channel this past never recorded is a gap
        with ``settled`` ``None``, where the delivery gate would have skipped the cause: a
        read tier must not serve on what it cannot verify (docs/session.md, "Coverage fails
        closed").

        Returns:
            :class:`Coverage`, naming every gap in channel order.

        Raises:
            TypeError: ``token`` is not a CausalPast.
        """
        if not isinstance(token, CausalPast):
            raise TypeError(f"coverage_of needs a CausalPast, got {type(token).__name__}")
        wanted = token._causes
        verdict = decide(wanted, wanted, self._causes)
        return Coverage(verdict.blockers) if isinstance(verdict, Held) else _COVERS

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CausalPast) and self._causes == other._causes

    def __hash__(self) -> int:
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(frozenset(self._causes.items())))
        return self._hash  # type: ignore[return-value]

    def __repr__(self) -> str:
        entries = ", ".join(f"{channel}: {position}" for channel, position in self._causes.items())
        return f"CausalPast({{{entries}}})"

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("a CausalPast is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("a CausalPast is immutable")

    def __reduce__(self) -> tuple[Any, tuple[dict[ChannelId, int]]]:
        return (CausalPast.of, (dict(self._causes),))


def _new_past(causes: dict[ChannelId, int]) -> CausalPast:
    past: CausalPast = object.__new__(CausalPast)
    object.__setattr__(past, "_causes", causes)
    object.__setattr__(past, "_hash", None)
    return past


_EMPTY: Final = _new_past({})
