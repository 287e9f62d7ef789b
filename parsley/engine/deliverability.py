"""The delivery decision: may a message with these causes be delivered now?

One pure function, :func:`decide`, whose verdict names every blocker, so the
status a task reports is the engine's own reasoning.

The rule (docs/model.md, "The decision rule", R:
``Deliverability.decide``): for each cause ``(c, p)`` of the message,

* if ``c`` is not in the receiver's received-channel set, ignore it (it is
  still carried in the frontier, for processes downstream to enforce);
* otherwise block unless ``settled(c)`` is known and ``>= p``.

``settled(c)`` (docs/model.md, "Covered and settled") is the head of ``c``'s
hold-back buffer minus one when anything is held on ``c``, else the covered
position ``fedUpTo(c)``, else unknown. The engine applies the rule to the
head of each channel's buffer only, which keeps per-channel FIFO.

Pure: standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from parsley.engine.channel import ChannelId

__all__ = ["DELIVERABLE", "Blocker", "Deliverable", "Held", "Verdict", "decide"]


@dataclass(frozen=True, slots=True)
class Blocker:
    """One cause a message is waiting for.

    Attributes:
        channel: the received channel the cause names.
        required: the cause's position (inclusive): every position up to and
            including it must be delivered or known never to arrive.
        settled: how far ``channel`` has settled (inclusive), or ``None`` when
            nothing is known about it yet (docs/failing-closed.md, "Diagnosis":
            a channel started at position 0 that has received nothing).
    """

    channel: ChannelId
    required: int
    settled: int | None


@dataclass(frozen=True, slots=True)
class Deliverable:
    """Verdict: every cause on a received channel is settled."""

    @property
    def deliverable(self) -> bool:
        """Always ``True``."""
        return True


@dataclass(frozen=True, slots=True)
class Held:
    """Verdict: the message must wait.

    Attributes:
        blockers: every unsatisfied cause, in the order the causes were given
            (channel order for decoded headers); never empty.
    """

    blockers: tuple[Blocker, ...]

    @property
    def deliverable(self) -> bool:
        """Always ``False``."""
        return False


Verdict = Deliverable | Held
"""What :func:`decide` returns."""

DELIVERABLE: Final = Deliverable()
"""The one :class:`Deliverable` instance :func:`decide` returns."""

SettledView = Mapping[ChannelId, int] | Callable[[ChannelId], "int | None"]
"""How far each channel has settled: a mapping (absent = unknown) or a function."""


def decide(
    causes: Mapping[ChannelId, int] | Iterable[tuple[ChannelId, int]],
    received: Container[ChannelId],
    settled: SettledView,
) -> Verdict:
    """Decide whether a message with ``causes`` may be delivered.

    Args:
        causes: the message's causes, channel to position (inclusive), as a
            mapping or as ``(channel, position)`` pairs.
        received: the receiver's received-channel set; causes on other
            channels impose nothing.
        settled: per channel, the highest position (inclusive) up to which
            every position was delivered or will never yield a message; a
            mapping (a missing channel is unknown) or a callable returning
            ``None`` for unknown.

    Returns:
        :data:`DELIVERABLE`, or :class:`Held` naming every blocker
        ``(channel, required, settled-or-None)``.

    Source: docs/wire-format.md, "What a receiver does with the entries", and docs/model.md, "The
    decision rule".
    """
    pairs = causes.items() if isinstance(causes, Mapping) else causes
    lookup: Callable[[ChannelId], int | None] = (
        settled.get if isinstance(settled, Mapping) else settled
    )
    blockers: list[Blocker] = []
    for channel, required in pairs:
        if channel not in received:
            continue
        have = lookup(channel)
        if have is None or have < required:
            blockers.append(Blocker(channel, required, have))
    if blockers:
        return Held(tuple(blockers))
    return DELIVERABLE
