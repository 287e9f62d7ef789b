"""The changelog rows a task's state changes produce (``take_deltas``).

The engine marks what changed (a set of channels per table, names, delivered
holds) and keeps the bodies of holds not yet persisted; :func:`changed_rows`
turns that into ordering-changelog rows in the layout of docs/model.md, "Restart" and "The stored
form". It reads
its arguments and changes none of them.

Source: docs/model.md, "Restart" and "The stored form".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from uuid import UUID

from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId, Header

__all__ = ["Body", "Causes", "Row", "changed_rows"]

Causes = tuple[tuple[ChannelId, int], ...]
"""``((channel, position), ...)``: a message's causes, channel order."""

Body = tuple[int, bytes | None, bytes | None, tuple[Header, ...], Causes]
"""A held message in memory: (timestamp ms, key, value, application headers, causes)."""

Row = tuple[bytes, bytes | None]
"""One changelog row: (key, value), value ``None`` for a tombstone."""


def changed_rows(
    *,
    stamp_version: bool,
    bodies: Mapping[tuple[ChannelId, int], Body],
    delivered_holds: Iterable[tuple[ChannelId, int]],
    tables: Sequence[tuple[Iterable[ChannelId], Mapping[ChannelId, int],
                           Callable[[ChannelId], bytes]]],
    changed_names: Iterable[str],
    names: Mapping[str, UUID],
) -> list[Row]:
    """The ordering-changelog rows for one ``take_deltas``, in write order.

    Args:
        stamp_version: write the version entry ``v`` first (a store with no state).
        bodies: holds not yet persisted, ``(channel, position) -> body``; each
            becomes an ``h`` row with its encoded blob.
        delivered_holds: persisted holds since delivered; each becomes an
            ``h`` tombstone.
        tables: ``(changed channels, current values, key function)`` for the
            coverage (``f``), frontier (``c``) and delivered-past (``p``)
            tables; a changed channel absent from its table is a tombstone.
        changed_names: names whose binding changed; absent from ``names`` is
            a tombstone.
        names: topic name -> topic id.

    Returns:
        ``[(key, value-or-None), ...]``: ``v``; ``h`` rows; ``h`` tombstones;
        then ``f``, ``c``, ``p`` and ``n`` rows. Empty when nothing changed.
    """
    rows: list[Row] = []
    if stamp_version:
        rows.append((sc.VERSION_KEY, sc.VERSION_VALUE))
    if bodies:
        encode, held_key, message = sc.encode_held, sc.held_key, sc.HeldMessage
        for (ch, q), body in bodies.items():
            rows.append((held_key(ch, q), encode(message(*body))))
    rows.extend((sc.held_key(ch, q), None) for ch, q in delivered_holds)
    encode_long = sc.encode_long
    for changed, table, key_of in tables:
        for ch in changed:
            position = table.get(ch)
            rows.append((key_of(ch), None if position is None else encode_long(position)))
    for name in changed_names:
        topic_id = names.get(name)
        rows.append((sc.name_key(name), None if topic_id is None else sc.encode_binding(topic_id)))
    return rows
