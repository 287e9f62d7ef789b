"""The frontier's encoding, kept incrementally: its size in bytes and its header bytes.

The engine checks the metadata budget after every merge that adds a channel
and stamps the encoded frontier on every send. Re-encoding per message would
dominate the hot path, so this keeps both up to date at the frontier's
mutation sites instead (Java ``ProcessEngine.frontierSizeAdd`` does the same
for the size):

* **size**: the formula of docs/wire-format.md, "Size"
  ``1 + v(T) + Σ_topics [16 + v(n_t) + Σ_partitions (v(p) + 8)]`` with
  per-topic partition counts, updated when a channel is added or removed;
  moving a position never changes it;
* **bytes**: positions are fixed-width int64s, so the encoding is kept in a
  buffer with the offset of each channel's position; a channel whose
  position moved is re-packed in place; adding or removing a channel changes
  the layout, and the next :meth:`FrontierEncoding.header` re-encodes with
  :func:`parsley.wire.encode_causes`.

Pure: standard library plus :mod:`parsley.wire`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Final
from uuid import UUID

from parsley.engine.channel import ChannelId
from parsley.wire import encode_causes, varint_size

__all__ = ["FrontierEncoding"]

_LONG: Final = struct.Struct(">q")
_NEW_TOPIC_BYTES: Final = 17
"""A topic's 16-byte id and its partition count of 1 (a one-byte varint)."""


class FrontierEncoding:
    """Size and canonical bytes of one frontier's ``parsley.causes`` encoding.

    The owner tells it about every change to the frontier mapping:
    :meth:`added` / :meth:`removed` for a channel entering or leaving, and
    ``moved.append(channel)`` for a position that rose (a plain list, so the
    engine's merge loop pays one append).

    Attributes:
        moved: channels whose position changed since the last :meth:`header`.
    """

    __slots__ = ("_body", "_buf", "_header", "_layout", "_topic_counts", "moved")

    def __init__(self) -> None:
        self._topic_counts: dict[UUID, int] = {}
        self._body = 0
        self._buf = bytearray()
        self._layout: dict[ChannelId, int] | None = None
        self._header: bytes | None = None
        self.moved: list[ChannelId] = []

    def added(self, ch: ChannelId) -> None:
        """Account for ``ch`` entering the frontier."""
        counts = self._topic_counts
        n = counts.get(ch.topic_id, 0) + 1
        counts[ch.topic_id] = n
        grow = _NEW_TOPIC_BYTES if n == 1 else varint_size(n) - varint_size(n - 1)
        self._body += grow + varint_size(ch.partition) + 8
        self._layout = None

    def removed(self, ch: ChannelId) -> None:
        """Account for ``ch`` leaving the frontier (it must have been :meth:`added`)."""
        counts = self._topic_counts
        n = counts[ch.topic_id] - 1
        if n == 0:
            del counts[ch.topic_id]
            shrink = _NEW_TOPIC_BYTES
        else:
            counts[ch.topic_id] = n
            shrink = varint_size(n + 1) - varint_size(n)
        self._body -= shrink + varint_size(ch.partition) + 8
        self._layout = None

    def size(self) -> int:
        """The encoded size in bytes (``2`` for an empty frontier)."""
        return 1 + varint_size(len(self._topic_counts)) + self._body

    def header(self, frontier: Mapping[ChannelId, int]) -> bytes:
        """The canonical encoding of ``frontier`` (the mapping this object tracks).

        Returns:
            Bytes equal to ``wire.encode_causes(frontier)``; the same object
            while nothing changed.
        """
        if self._layout is None:
            self._relayout(frontier)
        elif self.moved:
            buf = self._buf
            layout = self._layout
            pack_into = _LONG.pack_into
            for ch in self.moved:
                pack_into(buf, layout[ch], frontier[ch])
            self.moved.clear()
            self._header = None
        if self._header is None:
            self._header = bytes(self._buf)
        return self._header

    def trim(self, entries: int) -> None:
        """Bound :attr:`moved` when no header is asked for: past ``entries``
        moves, forget them and re-encode at the next :meth:`header`."""
        if len(self.moved) > entries:
            self.moved.clear()
            self._layout = None

    def _relayout(self, frontier: Mapping[ChannelId, int]) -> None:
        encoded = encode_causes(frontier)
        layout: dict[ChannelId, int] = {}
        offset = 1 + varint_size(len(self._topic_counts))
        topic = None
        for ch in sorted(frontier, key=lambda c: (c.topic_id.int, c.partition)):
            if ch.topic_id != topic:
                topic = ch.topic_id
                offset += 16 + varint_size(self._topic_counts[topic])
            offset += varint_size(ch.partition)
            layout[ch] = offset
            offset += 8
        if offset != len(encoded):
            raise AssertionError(
                f"frontier layout gives {offset} bytes but the encoding has {len(encoded)}"
            )
        self._buf = bytearray(encoded)
        self._layout = layout
        self._header = None
        self.moved.clear()
