"""Deliberately broken engines, for the meta-tests that prove the harness can fail.

A verification kit that passes against a broken engine proves nothing
(the simulator in ``tests/sim/``, docs/model.md "Restart"). Each :class:`Sabotage` mode names one
fault; :func:`engine_class` returns a :class:`ProcessEngine` subclass with
that fault and nothing else changed. The simulator's oracle must catch every
mode. Java Parsley keeps the same idea as ``Sabotage.Mode``.

Never used outside tests.
"""

from __future__ import annotations

import enum
from typing import Any

from parsley.engine.channel import ChannelId, ReceivedMessage
from parsley.engine.engine import Causes, ProcessEngine

__all__ = ["Sabotage", "engine_class"]


class Sabotage(enum.Enum):
    """One deliberate fault."""

    EAGER_DELIVERY = "EAGER_DELIVERY"
    """Every head is deliverable at once, whatever its causes (breaks causal order)."""
    IGNORE_ONE_CAUSE = "IGNORE_ONE_CAUSE"
    """Each decision skips the first cause on a received channel (breaks causal order
    for messages with such a cause)."""
    DROP_HELD_ON_RESTART = "DROP_HELD_ON_RESTART"
    """A restored engine forgets the held messages in its store (breaks completeness:
    their positions are covered, so a re-feed is dropped as a replay)."""
    IGNORE_CROSS_PARTITION = "IGNORE_CROSS_PARTITION"
    """Causes on another task's partition of a received topic pass silently: never
    refused, warned or counted (the silent reorder ``CROSS_PARTITION_CAUSE`` closes)."""


class _EagerDeliveryEngine(ProcessEngine):
    """:attr:`Sabotage.EAGER_DELIVERY`."""

    def _first_blocker(self, causes: Causes) -> tuple[ChannelId, int] | None:
        return None


class _IgnoreOneCauseEngine(ProcessEngine):
    """:attr:`Sabotage.IGNORE_ONE_CAUSE`."""

    def _first_blocker(self, causes: Causes) -> tuple[ChannelId, int] | None:
        received = self._settled
        dropped = False
        kept = []
        for c, p in causes:
            if not dropped and c in received:
                dropped = True
                continue
            kept.append((c, p))
        return super()._first_blocker(tuple(kept))


class _DropHeldOnRestartEngine(ProcessEngine):
    """:attr:`Sabotage.DROP_HELD_ON_RESTART`."""

    def _restored_held(self, held: dict[ChannelId, list[int]]) -> dict[ChannelId, list[int]]:
        return {}


class _IgnoreCrossPartitionEngine(ProcessEngine):
    """:attr:`Sabotage.IGNORE_CROSS_PARTITION`."""

    def _cross_partition(self, msg: ReceivedMessage, foreign: Causes) -> None:
        return None


_CLASSES: dict[Sabotage, type[ProcessEngine]] = {
    Sabotage.EAGER_DELIVERY: _EagerDeliveryEngine,
    Sabotage.IGNORE_ONE_CAUSE: _IgnoreOneCauseEngine,
    Sabotage.DROP_HELD_ON_RESTART: _DropHeldOnRestartEngine,
    Sabotage.IGNORE_CROSS_PARTITION: _IgnoreCrossPartitionEngine,
}


def engine_class(mode: Sabotage | None, implementation: str = "python") -> type[Any]:
    """The engine class with fault ``mode``; ``None`` gives the sound engine.

    Args:
        mode: the fault to build in.
        implementation: ``"python"`` for :class:`ProcessEngine` and its subclasses,
            ``"native"`` for :class:`~parsley.engine.native_engine.NativeProcessEngine`
            and its subclasses (the native core takes the fault as a flag).

    Returns:
        An engine class taking the same constructor arguments as :class:`ProcessEngine`.

    Raises:
        ValueError: an unknown mode or implementation.
        ImportError: ``"native"`` when the native core is not built.
    """
    if implementation == "native":
        from parsley.engine.native_engine import native_engine_class

        if mode is not None and not isinstance(mode, Sabotage):
            raise ValueError(f"unknown sabotage mode {mode!r}")
        return native_engine_class(None if mode is None else mode.value)
    if implementation != "python":
        raise ValueError(f"implementation must be 'python' or 'native', got {implementation!r}")
    if mode is None:
        return ProcessEngine
    try:
        return _CLASSES[mode]
    except KeyError:
        raise ValueError(f"unknown sabotage mode {mode!r}") from None
