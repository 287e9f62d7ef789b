"""The write and read tiers of session consistency: where a token meets Kafka coordinates.

Coordinates at the edge arrive as topic names (a produce acknowledgement, a handler's
:class:`~parsley.effects.Delivery`) while a :class:`~parsley.session.past.CausalPast` is
keyed by topic id; both tiers take the names resolved to ids once, at startup, with the
admin client (docs/session.md, "The write path" and "The read path").

* :class:`WriteTier`: stamps a validated token on a produced record as its
  ``parsley.causes`` header, and merges the acknowledged record's own coordinate back in.
* :class:`ReadTier`: builds a projection's recorded past from each delivery's own
  coordinate, never from the frontier; a read serves only when that past's
  :meth:`~parsley.session.past.CausalPast.coverage_of` the client's token covers.

Pure (``tests/unit/test_purity.py``): no Kafka client here; the caller produces and consumes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol
from uuid import UUID

from parsley.engine.channel import ChannelId, Header
from parsley.session.past import CausalPast
from parsley.wire import CAUSES_HEADER, RESERVED_PREFIX

__all__ = ["Delivered", "ReadTier", "WriteTier"]


class Delivered(Protocol):
    """What :meth:`ReadTier.record` reads of a delivery: a :class:`parsley.Delivery` is one."""

    @property
    def topic(self) -> str:
        """The received topic's name."""
        ...

    @property
    def partition(self) -> int:
        """Its partition."""
        ...

    @property
    def offset(self) -> int:
        """The record's own offset (inclusive)."""
        ...


class _Tier:
    """Topic names resolved to topic ids, and the channel a (topic, partition) names."""

    __slots__ = ("_ids",)

    def __init__(self, topic_ids: Mapping[str, UUID]) -> None:
        if not isinstance(topic_ids, Mapping):
            raise TypeError(f"topic_ids must map topic names to uuid.UUID topic ids, "
                            f"got {type(topic_ids).__name__}")
        ids: dict[str, UUID] = {}
        for name, topic_id in topic_ids.items():
            if not isinstance(name, str) or not isinstance(topic_id, UUID):
                raise TypeError(f"topic_ids must map str to uuid.UUID, got {name!r}: "
                                f"{type(topic_id).__name__}")
            if topic_id.int == 0:
                raise ValueError(f"topic '{name}' has the zero topic id, which no topic can have")
            ids[name] = topic_id
        self._ids = ids

    @property
    def topic_ids(self) -> Mapping[str, UUID]:
        """The topic names this tier knows, with their ids (a copy)."""
        return dict(self._ids)

    def channel(self, topic: str, partition: int) -> ChannelId:
        """The channel of ``topic``'s partition ``partition``.

        Raises:
            ValueError: ``topic`` is not among the names resolved at startup (resolve it
                with the admin client's ``describe_topics`` and build the tier again; a
                recreated topic has a new id), or the partition is out of range.
        """
        topic_id = self._ids.get(topic)
        if topic_id is None:
            known = ", ".join(repr(n) for n in sorted(self._ids)) or "none"
            raise ValueError(f"topic '{topic}' has no topic id known to this tier (it knows "
                             f"{known}); resolve it with the admin client at startup")
        return ChannelId(topic_id, partition)


class WriteTier(_Tier):
    """Stamps a client's token on the records a gateway produces, and merges the
    acknowledged coordinate back into it (docs/session.md, "The write path").

    Produce with ``acks=all`` (and idempotence), so that an acknowledged offset names a
    record no leader failover can lose (docs/wire-format.md, "Writing a gateway", step 1).

    Args:
        topic_ids: topic name to Kafka topic id, for every topic this tier produces to.

    Raises:
        TypeError: not a mapping of str to ``uuid.UUID``.
        ValueError: a zero topic id.
    """

    __slots__ = ()

    def stamp(self, token: CausalPast,
              headers: Iterable[Header] = ()) -> list[tuple[str, bytes | None]]:
        """The headers of a record produced on the client's behalf: the application's
        ``headers``, then one ``parsley.causes`` header carrying ``token`` (none for an empty
        token, which has no causes: docs/wire-format.md, "Writing a gateway", step 5).

        Args:
            token: the client's token, already opened and bounded
                (:meth:`~parsley.session.tokens.TokenSigner.open`).
            headers: the application's ``(key, value)`` headers, in order.

        Returns:
            A new list, for the producer's ``headers`` argument.

        Raises:
            TypeError: ``token`` is not a CausalPast.
            ValueError: an application header uses the reserved ``parsley.`` prefix.
        """
        if not isinstance(token, CausalPast):
            raise TypeError(f"stamp needs a CausalPast, got {type(token).__name__}")
        out: list[tuple[str, bytes | None]] = []
        for key, value in headers:
            if key.startswith(RESERVED_PREFIX):
                raise ValueError(f"header '{key}' uses the reserved prefix '{RESERVED_PREFIX}'")
            out.append((key, value))
        if len(token):
            out.append((CAUSES_HEADER, token.encode()))
        return out

    def acknowledged(self, token: CausalPast, topic: str, partition: int,
                     offset: int) -> CausalPast:
        """``token`` with the acknowledged record's coordinate merged in.

        Args:
            token: the token the record was stamped with.
            topic, partition, offset: the delivery report's ``topic()``, ``partition()`` and
                ``offset()``: the record's own offset, never a log-end offset or high
                watermark (docs/wire-format.md, "Writing a gateway", constraint 8).

        Returns:
            The token that now includes the client's own write.

        Raises:
            ValueError: an unknown topic, or an offset below 0 (a failed produce reports
                none): only an acknowledged record enters a token.
        """
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset {offset!r} on topic '{topic}' partition {partition} is "
                             "not an acknowledged record's offset")
        return token.merge(self.channel(topic, partition), offset)


class ReadTier(_Tier):
    """Builds the past a projection records beside its rows (docs/session.md, "The read
    path"): a Parsley process's handler merges each delivery's own coordinate, and keeps
    the past in the same store as the rows, so both commit in one transaction.

    Never build it from a frontier: the frontier grows on receipt, before delivery, and
    would name records whose effects are still held back.

    Args:
        topic_ids: topic name to Kafka topic id, for every topic the projection receives.

    Raises:
        TypeError: not a mapping of str to ``uuid.UUID``.
        ValueError: a zero topic id.
    """

    __slots__ = ()

    def record(self, past: CausalPast, delivery: Delivered) -> CausalPast:
        """``past`` with ``delivery``'s own coordinate merged in.

        Args:
            past: the projection's recorded past so far (a row's, or the model's).
            delivery: the delivery being handled: its ``topic``, ``partition`` and
                ``offset`` (inclusive).

        Returns:
            The recorded past once this delivery's effects are written.

        Raises:
            ValueError: the delivery's topic is unknown to this tier.
        """
        return past.merge(self.channel(delivery.topic, delivery.partition), delivery.offset)
