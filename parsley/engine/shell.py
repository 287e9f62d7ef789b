"""What both engines share: constructor, restore check, name bindings, identity, diagnosis.

:class:`EngineShell` is the base of :class:`parsley.engine.engine.ProcessEngine` (the
pure-Python reference) and of ``parsley.engine.native_engine.NativeProcessEngine`` (the
Rust core, ``parsley._native.EngineCore``, placed after it in the bases). The shell holds
the cold parts, written once: the constructor's arguments and checks, the load of the
store's image and the ``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` check, the topic name
bindings (``n`` rows), the identity check's verdicts, the delta rows' write to the store
and the diagnosis. Each engine supplies the hot state behind a few hooks (listed under
``TYPE_CHECKING`` below, so that none shadows a method of the native core at run time).
docs/architecture.md, "parsley/engine/shell.py", shows which hook each engine fills.

Pure: standard library and the pure ``parsley`` modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Final
from uuid import UUID

from parsley.engine import details
from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.engine.cross_partition import CrossPartition
from parsley.engine.deliverability import decide
from parsley.engine.deltas import Causes, Row, changed_rows
from parsley.engine.diagnose import diagnose_task
from parsley.engine.identity import TopicVerdict, deleted_channels, new_bindings
from parsley.engine.store import OrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.status import TaskDiagnosis

__all__ = ["DEFAULT_BUDGET_BYTES", "EngineShell"]

DEFAULT_BUDGET_BYTES: Final = 262_144
"""Default metadata budget, bytes (Java ``DEFAULT_METADATA_BUDGET_BYTES``, 256 KiB)."""


class EngineShell:
    """The cold half of an engine (module docstring). Not thread-safe.

    Args:
        store: the task's ordering store (layout: docs/model.md, "Restart"), possibly holding a
            previous execution's state. The engine reads it once here and then
            only for held bodies; it writes it in :meth:`take_deltas`.
        received: the task's received-channel set.
        budget_bytes: the metadata budget in bytes (> 0), enforced at receipt,
            merge and emission; a warning is issued once when the frontier
            reaches 80 % of it.
        on_warning: called with the warning text (e.g. a logger's
            ``warning``); ``None`` discards warnings.
        cross_partition: what a cause on another task's channel of a received
            topic does (:class:`~parsley.engine.cross_partition.CrossPartition`); the
            host decides.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for any
            corrupt, unversioned or foreign state
            (:func:`parsley.engine.state_codec.load_image`);
            ``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` ("held message at
            <channel>@<position> but the channel is no longer in the declared
            received-channel set") when something is held on a channel
            outside ``received``.
        ValueError: ``budget_bytes`` not positive.
        TypeError: a received channel that is not a ``ChannelId``.
    """

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
                raise TypeError(f"received channels must be ChannelId, got {type(ch).__name__}")
        self._store = store
        self._received: frozenset[ChannelId] = frozenset(ordered)
        self._by_rank: tuple[ChannelId, ...] = tuple(ordered)
        self._received_topics: frozenset[UUID] = frozenset(ch.topic_id for ch in ordered)
        self._labels: dict[UUID, str] | None = None
        image = sc.load_image(sc.image_items(store))
        self._names: dict[str, UUID] = dict(image.names)
        self._dirty_n: dict[str, None] = {}
        restored = self._restored_held(image.held)
        for ch in sorted(restored):
            positions = restored[ch]
            if positions and ch not in self._received:
                raise ParsleyFailClosedError(
                    Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES,
                    details.held_on_undeclared_channel(ch, self._topic_names(), positions[0]),
                )
        self._restore_state(image, {ch: p for ch, p in restored.items() if p},
                            budget_bytes, on_warning, cross_partition)

    if TYPE_CHECKING:  # the hooks each engine supplies (module docstring)
        def _restore_state(
            self, image: sc.OrderingImage, held: dict[ChannelId, list[int]],
            budget_bytes: int, on_warning: Callable[[str], None] | None,
            cross_partition: CrossPartition) -> None: ...
        def _advance_fed(self, ch: ChannelId, position: int) -> None: ...
        def _prune_topics(self, dead: set[UUID]) -> None: ...
        def _state_topic_ids(self) -> Iterable[UUID]: ...
        def _take_rows(self) -> list[Row]: ...
        def _frontier_dict(self) -> dict[ChannelId, int]: ...
        def _past_dict(self) -> dict[ChannelId, int]: ...
        def _diagnosis_heads(self) -> tuple[list[tuple[ChannelId, Sequence[int]]],
                                            Callable[[ChannelId, int], Causes]]: ...
        _budget: int
        def settled(self, ch: ChannelId) -> int | None: ...
        def held_count(self, ch: ChannelId | None = None) -> int: ...
        def frontier_bytes(self) -> int: ...
        def cross_partition_causes(self) -> int: ...
        def waited_count(self) -> int: ...

    # ------------------------------------------------------------ details

    def _topic_names(self) -> dict[UUID, str]:
        """Topic id -> the first name bound to it (cached until the bindings change)."""
        labels = self._labels
        if labels is None:
            labels = {t: name for name, t in reversed(list(self._names.items()))}
            self._labels = labels
        return labels

    def _names_changed(self) -> None:
        """Drop the cached labels (the native engine also hands the core the new ones)."""
        self._labels = None

    def _restored_held(self, held: dict[ChannelId, list[int]]) -> dict[ChannelId, list[int]]:
        """Held positions to restore (a hook the sabotage engines override)."""
        return held

    # ------------------------------------------------------------ names, identity

    def bind_names(self, bindings: Mapping[str, UUID]) -> None:
        """Record, or check, the topic id each received or sent topic name resolves to.

        Args:
            bindings: topic name -> topic id as resolved now.

        Raises:
            ParsleyFailClosedError: ``CHANNEL_IDENTITY_CHANGED`` ("topic
                '<name>' now resolves to <channel> but this process's state was
                built against a previous incarnation ...") when the state
                already binds a name to another id. Nothing is bound then.

        Source: docs/runbooks.md, CHANNEL_IDENTITY_CHANGED, task-initialisation site
        (Java ``ProcessEngine`` constructor).
        """
        for name in new_bindings(self._names, bindings, self._by_rank):
            self._names[name] = bindings[name]
            self._dirty_n[name] = None
        self._names_changed()

    def names(self) -> Mapping[str, UUID]:
        """The name bindings (topic name -> topic id), read-only copy."""
        return MappingProxyType(dict(self._names))

    def unnamed_topic_ids(self) -> frozenset[UUID]:
        """The ids of :meth:`known_topic_ids` that no name is bound to: the identity
        check can never judge them dead, so a host learns their names while they are
        alive (:meth:`learn_names`)."""
        named = set(self._names.values())
        return frozenset(t for t in self.known_topic_ids() if t not in named)

    def learn_names(self, found: Mapping[str, UUID]) -> None:
        """Record the names of frontier and delivered-past topic ids, learned while alive.

        An id the state names but never bound to a name (an upstream topic this task
        does not receive) can never be confirmed deleted, so its frontier entries would
        be carried for ever. The host finds the current name of each id of
        :meth:`unnamed_topic_ids` that is alive and passes it here; the binding is
        persisted (an ``n`` row), and a later identity check judges the id by it.

        Args:
            found: topic name -> topic id, as resolved now. A pair is recorded when
                the id is one of :meth:`unnamed_topic_ids` and the name is not
                already bound (to another incarnation, which the identity check
                judges first); other pairs are ignored.

        Source: Java ``AdminTopicIdentitySource`` (names learned by the by-id
        describe at task initialisation); docs/model.md, "Pruning".
        """
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
        """Every topic id the state names: received, frontier and delivered past.

        These are what the identity check at task initialisation describes
        (docs/model.md, "Pruning").
        """
        ids = {ch.topic_id for ch in self._received}
        ids.update(self._state_topic_ids())
        return frozenset(ids)

    def apply_identity(self, verdicts: Mapping[UUID, TopicVerdict]) -> None:
        """Apply the identity check's verdicts (docs/model.md, "Pruning").

        Args:
            verdicts: topic id -> verdict; ids whose check is still pending are
                omitted. May be called before or after ``start``, and
                again when a pending check is answered later.

        Raises:
            ParsleyFailClosedError: ``CHANNEL_IDENTITY_CHANGED`` ("the topic of
                received channel <channel> was deleted and recreated under the
                same name while this process ran ...") for a recreated received
                topic; ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` ("<n>
                received message(s) from <channel> remain undelivered but the
                channel's topic no longer exists; their place in causal order
                can no longer be preserved.") for a deleted received topic with
                held messages. Both are checked before anything changes.

        Effects: a deleted received channel with nothing held is set to fed to
        its end (:data:`FED_TO_END`); frontier and delivered-past entries on
        deleted or recreated topics are pruned (tombstones in the deltas), and
        so is the name binding of a dead topic this task does not receive (a
        name learned with :meth:`learn_names`), so a later incarnation under
        the name can be learned in its turn. Nothing else is ever pruned.
        """
        dead = {t for t, v in verdicts.items() if v is not TopicVerdict.ALIVE}
        if not dead:
            return
        held = {ch: self.held_count(ch) for ch in self._by_rank}
        for ch in deleted_channels(self._by_rank, held, verdicts, self._topic_names()):
            self._advance_fed(ch, FED_TO_END)
        self._prune_topics(dead)
        received = self._received_topics
        pruned = [n for n, t in self._names.items() if t in dead and t not in received]
        for name in pruned:
            del self._names[name]
            self._dirty_n[name] = None
        if pruned:
            self._names_changed()

    # ------------------------------------------------------------ deltas

    def take_deltas(self) -> tuple[Row, ...]:
        """The changelog writes since the last call, latest value per key.

        Every row is also applied to the engine's store, so the store holds what a
        changelog replay of all returned rows would hold. The rows, in order, and
        when each is written: docs/architecture.md, "parsley/engine/shell.py",
        "The deltas"; their bytes: docs/model.md, "The stored form".

        Returns:
            ``((key, value-or-None), ...)``; ``None`` is a tombstone. Empty
            when nothing changed.
        """
        rows = self._take_rows()
        if self._dirty_n:
            rows += changed_rows(stamp_version=False, bodies={}, delivered_holds=(), tables=(),
                                 changed_names=self._dirty_n, names=self._names)
            self._dirty_n = {}
        store = self._store
        for key, value in rows:
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)
        return tuple(rows)

    # ------------------------------------------------------------ queries

    def frontier(self) -> Mapping[ChannelId, int]:
        """The frontier (channel -> highest causal position, inclusive), read-only copy."""
        return MappingProxyType(self._frontier_dict())

    def delivered_past(self) -> Mapping[ChannelId, int]:
        """The delivered causal past (channel -> highest cause delivered), read-only copy."""
        return MappingProxyType(self._past_dict())

    def received(self) -> frozenset[ChannelId]:
        """The received-channel set."""
        return self._received

    @property
    def budget_bytes(self) -> int:
        """The metadata budget, bytes."""
        return int(self._budget)

    def diagnose(self) -> TaskDiagnosis:
        """What the task holds and why (docs/failing-closed.md, "Diagnosis").

        Returns:
            Per channel with held messages (channel order): topic (bound name,
            else topic id), partition, count, head position, and every cause
            the head waits for with the required position and the channel's
            settled position (``None`` when empty). A head with no blockers is
            deliverable on the next drain. Plus the frontier's channels and
            bytes against the budget.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` when a
                head's body is absent from the store.
        """
        held, causes_of_head = self._diagnosis_heads()
        return diagnose_task(
            held=held,
            verdict_of_head=lambda ch, q: decide(causes_of_head(ch, q), self._received,
                                                 self.settled),
            names=self._names,
            frontier_channels=len(self._frontier_dict()),
            frontier_bytes=self.frontier_bytes(),
            budget_bytes=self.budget_bytes,
            cross_partition_causes=self.cross_partition_causes(),
            waited=self.waited_count(),
        )
