"""The ordering engine on the native core: :class:`NativeProcessEngine`.

The same API, refusals, details, ``parsley.causes`` headers and changelog rows as
:class:`parsley.engine.engine.ProcessEngine`, the reference implementation. The hot
path runs in Rust (``parsley._native.EngineCore``: the rules in ``native/src/engine/``,
the PyO3 adapter in ``native/src/py_engine/``):
:meth:`receive`, :meth:`feed_records`, :meth:`deliver_next`, :meth:`deliver_batch`,
:meth:`causes_header`, the rows of :meth:`take_deltas` and the queries. The cold parts
are the Python shell both engines share (:class:`parsley.engine.shell.EngineShell`:
the restore from the store's image, name bindings, the identity check's verdicts and
the diagnosis); this module fills the shell's hooks from the core.

``parsley.engine.engine_type()`` chooses between the two (``PARSLEY_ENGINE``,
:mod:`parsley.native`). :data:`NativeProcessEngine` is ``None`` when the extension
module is not built.

Pure: standard library, the pure ``parsley`` modules and the extension module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final
from uuid import UUID

from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId
from parsley.engine.cross_partition import CrossPartition
from parsley.engine.deltas import Causes
from parsley.engine.shell import EngineShell

_EngineCore: type[Any] | None
try:
    from parsley._native import EngineCore as _EngineCore
except ImportError:  # the extension module is not built: the reference engine only
    _EngineCore = None

__all__ = ["NativeProcessEngine", "native_engine_class"]

SABOTAGE_CODES: Final = {
    "EAGER_DELIVERY": 1,
    "IGNORE_ONE_CAUSE": 2,
    "DROP_HELD_ON_RESTART": 3,
    "IGNORE_CROSS_PARTITION": 4,
}
"""The native core's code for each :class:`parsley.engine.sabotage.Sabotage` mode."""


def _build() -> type[Any] | None:
    if _EngineCore is None:
        return None

    class NativeProcessEngine(EngineShell, _EngineCore):  # type: ignore[misc,valid-type]
        """One task's ordering state and delivery decisions, on the native core.

        Constructor, methods, refusals and details as
        :class:`parsley.engine.engine.ProcessEngine` (docs/model.md, "Covered and
        settled"; docs/failing-closed.md); the cold parts are the shared
        :class:`~parsley.engine.shell.EngineShell`.
        """

        _SABOTAGE = 0

        def _restore_state(
            self, image: sc.OrderingImage, held: dict[ChannelId, list[int]],
            budget_bytes: int, on_warning: Callable[[str], None] | None,
            cross_partition: CrossPartition,
        ) -> None:
            self._setup(
                self._store, list(self._by_rank), budget_bytes, on_warning,
                cross_partition is CrossPartition.REFUSE, self._SABOTAGE,
                not image.has_version, image.fed, image.frontier, image.past, held,
                self._topic_names(),
            )

        def _names_changed(self) -> None:
            super()._names_changed()
            self._set_labels(self._topic_names())

        def _state_topic_ids(self) -> Iterable[UUID]:
            return (UUID(bytes=raw) for raw in self._state_topics())

        def _prune_topics(self, dead: set[UUID]) -> None:
            self._prune([t.bytes for t in dead])

        def _diagnosis_heads(self) -> tuple[list[tuple[ChannelId, Sequence[int]]],
                                            Callable[[ChannelId, int], Causes]]:
            entries = self._held_heads()
            heads = {ch: causes for ch, _, causes in entries}
            return [(ch, positions) for ch, positions, _ in entries], lambda ch, q: heads[ch]

        # -------------------------------------------------------- for tests

        @property
        def _bodies(self) -> dict[tuple[ChannelId, int], None]:
            """Held messages whose bodies are in memory (not yet persisted), for tests."""
            return dict.fromkeys(self._memory()[0])

        @property
        def _head_causes(self) -> dict[ChannelId, tuple[tuple[ChannelId, int], ...]]:
            """Causes of each channel's head, once read, for tests."""
            return dict(self._memory()[1])

        @property
        def _loaded(self) -> tuple[ChannelId, int] | None:
            """The one decoded blob kept, as (channel, position), for tests."""
            loaded: tuple[ChannelId, int] | None = self._memory()[2]
            return loaded

    return NativeProcessEngine


NativeProcessEngine: Final[type[Any] | None] = _build()
"""The native engine class, or ``None`` when ``parsley._native`` is not built."""


def native_engine_class(sabotage: str | None = None) -> type[Any]:
    """The native engine class, with the named fault built in for the meta-tests.

    Args:
        sabotage: a :class:`parsley.engine.sabotage.Sabotage` value's name, or ``None``.

    Returns:
        :data:`NativeProcessEngine` or a subclass of it with that one fault.

    Raises:
        ImportError: the extension module is not built.
        ValueError: an unknown mode.
    """
    if NativeProcessEngine is None:
        raise ImportError("the native core parsley._native is not built")
    if sabotage is None:
        return NativeProcessEngine
    if sabotage not in SABOTAGE_CODES:
        raise ValueError(f"unknown sabotage mode {sabotage!r}")
    return _SABOTAGED[sabotage]


def _sabotaged() -> dict[str, type[Any]]:
    if NativeProcessEngine is None:
        return {}
    out: dict[str, type[Any]] = {}
    for name, code in SABOTAGE_CODES.items():
        attrs: dict[str, Any] = {"_SABOTAGE": code, "__doc__": f"Sabotage {name}."}
        if name == "DROP_HELD_ON_RESTART":
            attrs["_restored_held"] = lambda self, held: {}
        out[name] = type(f"_Native{name.title().replace('_', '')}Engine",
                         (NativeProcessEngine,), attrs)
    return out


_SABOTAGED: Final = _sabotaged()
