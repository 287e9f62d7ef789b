"""The ordering engine on the native core: :class:`NativeProcessEngine`.

The same API, refusals, details, ``parsley.causes`` headers and changelog rows as
:class:`parsley.engine.engine.ProcessEngine`, the reference implementation. The hot
path runs in Rust (``parsley._native.EngineCore``, the crate's ``py_engine.rs``):
:meth:`receive`, :meth:`feed_records`, :meth:`deliver_next`, :meth:`deliver_batch`,
:meth:`causes_header`, the rows of :meth:`take_deltas` and the queries. The cold parts
stay here in Python, over the same pure functions the reference uses: the restore from
the store's image (:func:`parsley.engine.state_codec.load_image`), name bindings, the
identity check's verdicts (:mod:`parsley.engine.identity`) and the diagnosis
(:mod:`parsley.engine.diagnose`).

``parsley.engine.engine_type()`` chooses between the two (``PARSLEY_ENGINE``,
:mod:`parsley.native`). :data:`NativeProcessEngine` is ``None`` when the extension
module is not built.

Pure: standard library, the pure ``parsley`` modules and the extension module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final
from uuid import UUID

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId, describe_channel
from parsley.engine.deliverability import decide
from parsley.engine.deltas import Row
from parsley.engine.diagnose import diagnose_task
from parsley.engine.engine import DEFAULT_BUDGET_BYTES, CrossPartition
from parsley.engine.identity import TopicVerdict, deleted_channels, new_bindings
from parsley.engine.store import OrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.status import TaskDiagnosis

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

    class NativeProcessEngine(_EngineCore):  # type: ignore[misc,valid-type]
        """One task's ordering state and delivery decisions, on the native core.

        Constructor, methods, refusals and details as
        :class:`parsley.engine.engine.ProcessEngine` (docs/model.md, "Covered and
        settled"; docs/failing-closed.md).
        """

        _SABOTAGE = 0

        def __init__(
            self,
            store: OrderingStore,
            *,
            received: Iterable[ChannelId],
            budget_bytes: int = DEFAULT_BUDGET_BYTES,
            on_warning: Callable[[str], None] | None = None,
            cross_partition: CrossPartition = CrossPartition.WARN,
        ) -> None:
            if budget_bytes <= 0:
                raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
            ordered = sorted(set(received))
            for ch in ordered:
                if not isinstance(ch, ChannelId):
                    raise TypeError(
                        f"received channels must be ChannelId, got {type(ch).__name__}")
            self._store = store
            self._received: frozenset[ChannelId] = frozenset(ordered)
            self._by_rank: tuple[ChannelId, ...] = tuple(ordered)
            self._received_topics: frozenset[UUID] = frozenset(ch.topic_id for ch in ordered)
            image = sc.load_image(sc.image_items(store))
            self._names: dict[str, UUID] = dict(image.names)
            self._dirty_n: dict[str, None] = {}
            self._labels: dict[UUID, str] | None = None
            restored = self._restored_held(image.held)
            for ch in sorted(restored):
                positions = restored[ch]
                if positions and ch not in self._received:
                    raise ParsleyFailClosedError(
                        Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES,
                        f"held message at {self._describe(ch, positions[0])} but the channel "
                        "is no longer in the declared received-channel set. Restore the "
                        "channel to the declaration until its held messages deliver, or "
                        "reset the process (docs/runbooks.md, "
                        "CHANNEL_REMOVED_WITH_HELD_MESSAGES)",
                    )
            self._setup(
                store, list(ordered), budget_bytes, on_warning,
                cross_partition is CrossPartition.REFUSE, self._SABOTAGE,
                not image.has_version, image.fed, image.frontier, image.past,
                {ch: positions for ch, positions in restored.items() if positions},
                self._topic_names(),
            )

        # -------------------------------------------------------- details

        def _topic_names(self) -> dict[UUID, str]:
            labels = self._labels
            if labels is None:
                labels = {t: name for name, t in reversed(list(self._names.items()))}
                self._labels = labels
            return labels

        def _names_changed(self) -> None:
            self._labels = None
            self._set_labels(self._topic_names())

        def _describe(self, ch: ChannelId, position: int | None = None) -> str:
            return describe_channel(ch, self._topic_names(), position)

        def _restored_held(
            self, held: dict[ChannelId, list[int]]
        ) -> dict[ChannelId, list[int]]:
            """Held positions to restore (a hook the sabotage engines override)."""
            return held

        # -------------------------------------------------------- names, identity

        def bind_names(self, bindings: Mapping[str, UUID]) -> None:
            """As :meth:`ProcessEngine.bind_names`."""
            for name in new_bindings(self._names, bindings, self._by_rank):
                self._names[name] = bindings[name]
                self._dirty_n[name] = None
            self._names_changed()

        def names(self) -> Mapping[str, UUID]:
            """The name bindings (topic name -> topic id), read-only copy."""
            return MappingProxyType(dict(self._names))

        def unnamed_topic_ids(self) -> frozenset[UUID]:
            """As :meth:`ProcessEngine.unnamed_topic_ids`."""
            named = set(self._names.values())
            return frozenset(t for t in self.known_topic_ids() if t not in named)

        def learn_names(self, found: Mapping[str, UUID]) -> None:
            """As :meth:`ProcessEngine.learn_names`."""
            unnamed = self.unnamed_topic_ids()
            changed = False
            for name, topic_id in found.items():
                if topic_id in unnamed and name not in self._names:
                    self._names[name] = topic_id
                    self._dirty_n[name] = None
                    unnamed = unnamed - {topic_id}
                    changed = True
            if changed:
                self._names_changed()

        def known_topic_ids(self) -> frozenset[UUID]:
            """As :meth:`ProcessEngine.known_topic_ids`."""
            ids = {ch.topic_id for ch in self._received}
            ids.update(UUID(bytes=raw) for raw in self._state_topics())
            return frozenset(ids)

        def apply_identity(self, verdicts: Mapping[UUID, TopicVerdict]) -> None:
            """As :meth:`ProcessEngine.apply_identity`."""
            dead = {t for t, v in verdicts.items() if v is not TopicVerdict.ALIVE}
            if not dead:
                return
            held = {ch: self.held_count(ch) for ch in self._by_rank}
            for ch in deleted_channels(self._by_rank, held, verdicts, self._topic_names()):
                self._advance_fed(ch, FED_TO_END)
            self._prune([t.bytes for t in dead])
            received = self._received_topics
            pruned_names = [n for n, t in self._names.items() if t in dead and t not in received]
            for name in pruned_names:
                del self._names[name]
                self._dirty_n[name] = None
            if pruned_names:
                self._names_changed()

        # -------------------------------------------------------- deltas

        def take_deltas(self) -> tuple[Row, ...]:
            """As :meth:`ProcessEngine.take_deltas`: the rows, also applied to the store."""
            rows: list[Row] = self._take_rows()
            if self._dirty_n:
                names = self._names
                for name in self._dirty_n:
                    topic_id = names.get(name)
                    rows.append((sc.name_key(name),
                                 None if topic_id is None else sc.encode_binding(topic_id)))
                self._dirty_n = {}
            store = self._store
            for key, value in rows:
                if value is None:
                    store.delete(key)
                else:
                    store.put(key, value)
            return tuple(rows)

        # -------------------------------------------------------- queries

        def frontier(self) -> Mapping[ChannelId, int]:
            """The frontier (channel -> highest causal position, inclusive), read-only."""
            return MappingProxyType(self._frontier_dict())

        def delivered_past(self) -> Mapping[ChannelId, int]:
            """The delivered causal past (channel -> highest cause delivered), read-only."""
            return MappingProxyType(self._past_dict())

        def received(self) -> frozenset[ChannelId]:
            """The received-channel set."""
            return self._received

        @property
        def budget_bytes(self) -> int:
            """The metadata budget, bytes."""
            return int(self._budget)

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

        def diagnose(self) -> TaskDiagnosis:
            """As :meth:`ProcessEngine.diagnose`."""
            entries = self._held_heads()
            heads = {ch: causes for ch, _, causes in entries}
            held = [(ch, positions) for ch, positions, _ in entries]
            return diagnose_task(
                held=held,
                verdict_of_head=lambda ch, q: decide(heads[ch], self._received, self.settled),
                names=self._names,
                frontier_channels=len(self._frontier_dict()),
                frontier_bytes=self.frontier_bytes(),
                budget_bytes=self.budget_bytes,
                cross_partition_causes=self.cross_partition_causes(),
                waited=self.waited_count(),
            )

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
