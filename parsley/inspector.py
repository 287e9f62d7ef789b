"""Read a process's ordering state from its changelog records, no engine needed.

The coordinator's bootstrap and ``parsley-coordinator inspect`` read one
task's changelog partition (``<prefix>-<process>-__parsley.ordering-changelog``)
and ask a few questions of it before any worker starts: which channels hold
messages, how far each channel is covered, which topic id each topic name was
bound to, and which names now resolve to a different id. Records arrive as raw
bytes; no Kafka import here.

Source: docs/model.md, "The stored form" ("Start-time reads of the changelog")
(Java ``OrderingStateInspector`` / ``OrderingStateCodec`` readers). Key layout
in :mod:`parsley.engine.state_codec`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final
from uuid import UUID

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId

__all__ = ["OrderingStateInspector"]

_HELD_MARKER: Final = b""


class OrderingStateInspector:
    """The latest value per key of one task's ordering changelog, and questions over it.

    Held-message bodies are never kept: a held key maps to an empty presence
    marker (as Java's bootstrap reader does, D110), so a deep hold-back buffer
    costs O(keys) memory, not O(bodies).

    Args:
        records: (key, value) in changelog (offset) order; ``value=None`` is a
            tombstone that deletes the key. The latest record per key wins.

    Each question checks the rows it reads; a corrupt one raises
    ``ParsleyFailClosedError(UNKNOWN_ORDERING_STATE_FORMAT)`` with the
    :mod:`~parsley.engine.state_codec` diagnosis (``corrupt held key: length
    N``, ``corrupt ordering key: ...``, ``corrupt ordering value: ...``).
    """

    __slots__ = ("_latest",)

    def __init__(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        latest: dict[bytes, bytes] = {}
        for key, value in records:
            key = bytes(key)
            if value is None:
                latest.pop(key, None)
            elif key[:1] == b"h":
                latest[key] = _HELD_MARKER
            else:
                latest[key] = bytes(value)
        self._latest = latest

    def __len__(self) -> int:
        """Number of live keys (held keys included)."""
        return len(self._latest)

    def is_empty(self) -> bool:
        """True when the changelog holds no live key at all (a fresh task)."""
        return not self._latest

    def has_version(self) -> bool:
        """True when the ``v`` (store format version) entry is live."""
        return sc.VERSION_KEY in self._latest

    def held_channels(self) -> dict[ChannelId, int]:
        """Channels with at least one held message, and how many.

        Returns:
            ``{channel: held message count}``, in channel order.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a held
                key that is not 29 bytes or names an unassignable position.
        """
        counts: dict[ChannelId, int] = {}
        for key in self._latest:
            if key[:1] == b"h":
                ch, _ = sc.held_key_parts(key)
                counts[ch] = counts.get(ch, 0) + 1
        return dict(sorted(counts.items()))

    def held_heads(self) -> dict[ChannelId, int]:
        """The head of each channel's hold-back buffer: its lowest held position.

        Returns:
            ``{channel: head position}``, in channel order; the head is the message the
            decision reads (docs/model.md, "Hold-back").

        Raises:
            ParsleyFailClosedError: as :meth:`held_channels`.
        """
        heads: dict[ChannelId, int] = {}
        for key in self._latest:
            if key[:1] == b"h":
                ch, position = sc.held_key_parts(key)
                if ch not in heads or position < heads[ch]:
                    heads[ch] = position
        return dict(sorted(heads.items()))

    def covered_positions(self) -> dict[ChannelId, int]:
        """How far each channel is covered (``fedUpTo``: fed, or will never arrive).

        Returns:
            ``{channel: covered position}``, offsets inclusive. A channel whose
            topic was confirmed deleted carries the fed-to-end sentinel
            ``FED_TO_END`` (2^63-1) verbatim: test it with :meth:`is_fed_to_end`
            before adding one (a lost read position resumes at covered + 1).

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for an
                ``f`` key that is not 21 bytes, a value that is not 8 bytes, or
                a negative coverage (``restored coverage names position P on
                <ch>, ...``, as :func:`~parsley.engine.state_codec.decode_coverage`).
        """
        covered: dict[ChannelId, int] = {}
        for key, value in self._latest.items():
            if key[:1] == b"f":
                ch = sc.channel_of_key(key)
                covered[ch] = sc.decode_coverage(ch, value)
        return dict(sorted(covered.items()))

    @staticmethod
    def is_fed_to_end(covered: int) -> bool:
        """Whether a covered position is the fed-to-end sentinel (2^63-1)."""
        return covered == FED_TO_END

    def name_bindings(self) -> dict[str, UUID]:
        """The topic id each topic name was bound to when the state was built.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for an
                empty or non-UTF-8 name, or a value that is not 20 bytes.
        """
        names: dict[str, UUID] = {}
        for key, value in self._latest.items():
            if key[:1] == b"n":
                name = sc.name_of_key(key)
                names[name] = sc.decode_binding(value, name)
        return dict(sorted(names.items()))

    def identity_changed_topics(self, current: Mapping[str, UUID]) -> list[str]:
        """Names whose recorded topic id differs from the one they resolve to now.

        A topic deleted and recreated under its name resolves to a new id, and
        every position stored for the old one is meaningless (docs/runbooks.md,
        ``CHANNEL_IDENTITY_CHANGED``).

        Args:
            current: topic name -> the topic id the cluster reports now. Names
                with no recorded binding, and recorded names absent from
                ``current``, are not reported.

        Returns:
            The changed names, sorted.

        Raises:
            ParsleyFailClosedError: as :meth:`name_bindings`.
        """
        bound = self.name_bindings()
        return sorted(
            name for name, topic_id in current.items()
            if name in bound and bound[name] != topic_id
        )
