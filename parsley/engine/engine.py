"""The per-task ordering engine, pure Python: frontier, hold-back buffers, coverage, decisions.

A :class:`ProcessEngine` is one task's causal state, driven by a host (the worker, or
the simulator): it is fed records (:meth:`~ProcessEngine.receive`), asked what may be
delivered (:meth:`~ProcessEngine.deliver_next`), and asked for the header its sends
carry (:meth:`~ProcessEngine.causes_header`) and for the changelog rows its state
changes produced (``take_deltas``). It never polls, sleeps, logs or commits.

This module is the hot path and the state behind it (docs/model.md); the cold half
both engines share (constructor, restore, names, identity, diagnosis) is
:class:`parsley.engine.shell.EngineShell`, and the cross-partition rule is
:mod:`parsley.engine.cross_partition`. The state it keeps and the order of
:meth:`~ProcessEngine.receive`'s checks: docs/architecture.md,
"parsley/engine/engine.py". The native core (``parsley/engine/native_engine.py``)
gives the same decisions, refusals, headers and rows.

Pure: standard library plus :mod:`parsley.wire` and the state codec.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from heapq import heappop, heappush
from typing import Final
from uuid import UUID

from parsley.engine import details
from parsley.engine import state_codec as sc
from parsley.engine.channel import (
    FED_TO_END,
    ChannelId,
    DeliverableMessage,
    ReceivedMessage,
)
from parsley.engine.cross_partition import CrossPartition, CrossPartitionCheck, foreign_causes
from parsley.engine.deltas import Body, Causes, Row, changed_rows
from parsley.engine.feed import BatchForms, FeedOutcome
from parsley.engine.frontier import FrontierEncoding
from parsley.engine.identity import TopicVerdict
from parsley.engine.shell import EngineShell
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import decode_causes, split_causes_header, strip_reserved

__all__ = ["Causes", "ProcessEngine", "TopicVerdict"]

_NOTHING_SETTLED: Final = -1
"""Fast-map spelling of "settled unknown": below every legal position, so it blocks."""
_TS_MIN: Final = -(2**63)
"""The smallest record timestamp, ms: a Kafka timestamp is an int64."""

_DECODE_CACHE_ENTRIES: Final = 64
_NO_CAUSES: Final[Causes] = ()


class _Decoded:
    """A decoded header value, the prune epoch at which it was last merged, and its
    causes on channels of a received topic that this task does not receive."""

    __slots__ = ("causes", "foreign", "merged_epoch")

    def __init__(self, causes: Causes, foreign: Causes) -> None:
        self.causes = causes
        self.foreign = foreign
        self.merged_epoch = -1


def _refuse(reason: Reason, detail: str) -> ParsleyFailClosedError:
    return ParsleyFailClosedError(reason, detail)


class ProcessEngine(BatchForms, EngineShell):
    """One task's ordering state and delivery decisions (docs/model.md, "Covered and settled").

    Not thread-safe: one host drives one engine from one thread.

    Lifecycle: build (restores from ``store``), then optionally
    :meth:`bind_names` and :meth:`apply_identity`, then :meth:`start`, then
    any interleaving of :meth:`receive`, :meth:`deliver_next`,
    :meth:`causes_header`, :meth:`take_deltas` and :meth:`diagnose`. A crash
    or restart is a new engine over a store rebuilt from the committed deltas.

    Constructor arguments and refusals: :class:`~parsley.engine.shell.EngineShell`.

    Source: Java ``ProcessEngine`` (R: @88710cf5), docs/model.md, docs/operations.md "Running".
    """

    def _restore_state(
        self, image: sc.OrderingImage, held: dict[ChannelId, list[int]], budget_bytes: int,
        on_warning: Callable[[str], None] | None, cross_partition: CrossPartition,
    ) -> None:
        """Build the hot state from the store's image (the shell's hook)."""
        ordered = self._by_rank
        self._budget = budget_bytes
        self._on_warning = on_warning
        self._cross = CrossPartitionCheck(cross_partition, on_warning)
        self._waited = 0
        self._waited_at: dict[ChannelId, int] = {}  # the last head counted as waiting
        self._rank: dict[ChannelId, int] = {ch: i for i, ch in enumerate(ordered)}

        self._stamp_version = not image.has_version

        self._fed: dict[ChannelId, int] = dict(image.fed)
        self._frontier: dict[ChannelId, int] = {}
        self._encoding = FrontierEncoding()
        for ch, pos in image.frontier.items():
            self._frontier[ch] = pos
            self._encoding.added(ch)
        self._moved = self._encoding.moved
        self._past: dict[ChannelId, int] = dict(image.past)

        self._queues: dict[ChannelId, deque[int]] = {ch: deque() for ch in ordered}
        self._held_total = 0
        for ch, positions in held.items():
            self._queues[ch].extend(positions)
            self._held_total += len(positions)

        # Unpersisted holds' bodies; a hold not in here lives only in the store.
        self._bodies: dict[tuple[ChannelId, int], Body] = {}
        # Causes of the current head of a channel, once read.
        self._head_causes: dict[ChannelId, Causes] = {}
        # One decoded blob, so a head read for its decision is not decoded again to deliver.
        self._loaded: tuple[ChannelId, int, sc.HeldMessage] | None = None

        # Fast decision map: every received channel -> settled position
        # (_NOTHING_SETTLED when unknown). Channels outside it are not received.
        self._settled: dict[ChannelId, int] = {}
        for ch in ordered:
            self._settled[ch] = self._compute_settled(ch)
        # Heads to (re)decide, blocked heads by blocker channel, deliverable heads.
        self._candidates: dict[ChannelId, None] = {
            ch: None for ch in ordered if self._queues[ch]
        }
        self._waiting: dict[ChannelId, list[tuple[int, int]]] = {}
        self._ready: list[int] = []

        self._floor: dict[ChannelId, int] | None = None
        self._fed_exec: dict[ChannelId, int] = {}

        self._dirty_f: dict[ChannelId, None] = {}
        self._dirty_c: dict[ChannelId, None] = {}
        self._dirty_p: dict[ChannelId, None] = {}
        self._dirty_h: dict[tuple[ChannelId, int], None] = {}

        # Raw header value -> its decoded causes. The frontier only grows between
        # prunes, so a value merged once in the current epoch need not merge again.
        self._decoded: dict[bytes, _Decoded] = {}
        self._epoch = 0
        self._last_past: Causes | None = None
        self._warned = False
        self._check_warning()

    # ------------------------------------------------------------ restore

    def _compute_settled(self, ch: ChannelId) -> int:
        queue = self._queues.get(ch)
        if queue:
            return queue[0] - 1
        fed = self._fed.get(ch)
        return _NOTHING_SETTLED if fed is None else fed

    # ------------------------------------------------------------ identity hooks

    def _state_topic_ids(self) -> Iterable[UUID]:
        """The topic ids of the frontier and the delivered past."""
        yield from (ch.topic_id for ch in self._frontier)
        yield from (ch.topic_id for ch in self._past)

    def _prune_topics(self, dead: set[UUID]) -> None:
        """Prune the frontier and delivered-past entries on ``dead`` topics (tombstones)."""
        pruned = False
        for ch in [c for c in self._frontier if c.topic_id in dead]:
            del self._frontier[ch]
            self._encoding.removed(ch)
            self._dirty_c[ch] = None
            pruned = True
        for ch in [c for c in self._past if c.topic_id in dead]:
            del self._past[ch]
            self._dirty_p[ch] = None
            pruned = True
        if pruned:
            # Merges remembered as no-ops may now add entries back.
            self._epoch += 1
            self._last_past = None

    # ------------------------------------------------------------ start

    def start(self, start_positions: Mapping[ChannelId, int]) -> None:
        """Set where this execution's feed starts, and snapshot the session floor.

        Args:
            start_positions: per received channel, the committed read position
                (the next offset the host fetches, so every offset below it
                was fed to an earlier execution or skipped by the starting
                position). Channels outside the received set, and positions of
                0, change nothing.

        Effects, in Java's order (docs/model.md, "The session floor: replays and feed order"):
        coverage is raised
        to the delivered past on each received channel (the join clamp), then
        to ``start - 1``; coverage is never lowered and :data:`FED_TO_END`
        stays as it is. The session floor is coverage as it then stands.

        Raises:
            RuntimeError: called twice.
            ValueError: a start position outside 0..2^63-1.
        """
        if self._floor is not None:
            raise RuntimeError("start() was already called for this engine")
        for ch in self._by_rank:
            past = self._past.get(ch)
            if past is not None:
                self._advance_fed(ch, past)
        for ch, start in start_positions.items():
            if start < 0:
                raise ValueError(f"start position of {ch} must be >= 0, got {start}")
            if start > FED_TO_END:
                raise ValueError(f"start position of {ch} must be below 2^63, got {start}")
            if ch in self._received and start > 0:
                self._advance_fed(ch, start - 1)
        self._floor = dict(self._fed)

    @property
    def started(self) -> bool:
        """Whether :meth:`start` has run."""
        return self._floor is not None

    def _advance_fed(self, ch: ChannelId, position: int) -> None:
        current = self._fed.get(ch)
        if current is None or position > current:
            self._fed[ch] = position
            self._dirty_f[ch] = None
            if ch in self._settled and not self._queues[ch]:
                self._raise_settled(ch, position)

    def _raise_settled(self, ch: ChannelId, settled: int) -> None:
        if settled > self._settled[ch]:
            self._settled[ch] = settled
            waiting = self._waiting.get(ch)
            if waiting:
                candidates = self._candidates
                by_rank = self._by_rank
                while waiting and waiting[0][0] <= settled:
                    candidates[by_rank[heappop(waiting)[1]]] = None

    # ------------------------------------------------------------ receive

    def receive(self, msg: ReceivedMessage) -> FeedOutcome:
        """Take one record from the host.

        The checks run in the order of docs/architecture.md,
        "parsley/engine/engine.py" (docs/model.md, "The session floor: replays and feed
        order"; Java ``onReceive``); a record that passes them all is covered and held at
        the tail of its channel's buffer until :meth:`deliver_next` offers it. Refusal
        details are :mod:`parsley.engine.details`' (docs/failing-closed.md, "Detail
        shapes").

        Args:
            msg: the record; ``msg.position`` is its offset (inclusive).

        Returns:
            :attr:`FeedOutcome.ACCEPTED` or :attr:`FeedOutcome.DUPLICATE_DROPPED`.

        Raises:
            ParsleyFailClosedError: ``UNDECODABLE_METADATA`` ("<channel>@<position>:
                <diagnosis>") for a duplicate, empty or malformed causes header;
                ``METADATA_BUDGET_EXCEEDED`` for a header longer than the budget
                ("<channel>@<position> carries <n> bytes of causal metadata; ...") or a
                frontier outgrowing it ("the causal frontier reached <n> bytes ...");
                ``OUT_OF_ORDER_FEED`` for a position at or below one already fed in this
                execution, or on a fed-to-end channel; ``COVERED_POSITION_FED`` for a
                covered position above the session floor; ``CROSS_PARTITION_CAUSE``
                under :attr:`CrossPartition.REFUSE`.
            RuntimeError: before :meth:`start`.
            ValueError: a channel outside the received set; a position no
                ``parsley.causes`` header can carry (outside 0..2^63-2, as
                :func:`parsley.wire.encode_causes`); a timestamp outside an int64.
        """
        ch = msg.channel
        q = msg.position
        if ch not in self._settled:
            raise ValueError(f"received on undeclared channel {ch}")
        floor = self._floor
        if floor is None:
            raise RuntimeError("receive() before start(): the session floor is not set")
        if q < 0 or q >= FED_TO_END:
            # What no parsley.causes header can carry (parsley/wire.py, encode_causes).
            raise ValueError(
                f"position {q} on {ch} cannot be encoded: it must be in 0..2^63-2")
        ts = msg.timestamp_ms
        if not _TS_MIN <= ts <= FED_TO_END:
            raise ValueError(f"timestamp {ts} of position {q} on {ch} does not fit an int64")

        # -- causes (budget before decode)
        try:
            found, raw, app_headers = split_causes_header(msg.headers)
        except ParsleyFailClosedError as exc:
            raise _refuse(exc.reason, self._undecodable(ch, q, exc.detail)) from exc
        entry: _Decoded | None = None
        if not found:
            causes = _NO_CAUSES
            foreign = _NO_CAUSES
        else:
            if raw is not None and len(raw) > self._budget:
                raise _refuse(
                    Reason.METADATA_BUDGET_EXCEEDED,
                    details.header_over_budget(ch, self._topic_names(), q, len(raw),
                                               self._budget),
                )
            if raw is not None and type(raw) is not bytes:
                raw = bytes(raw)
            entry = self._decoded.get(raw) if raw is not None else None
            if entry is None:
                try:
                    decoded = decode_causes(raw)
                except ParsleyFailClosedError as exc:
                    raise _refuse(Reason.UNDECODABLE_METADATA,
                                  self._undecodable(ch, q, exc.detail)) from exc
                causes = tuple(decoded.items())
                assert raw is not None  # decode_causes(None) always raises
                if len(self._decoded) >= _DECODE_CACHE_ENTRIES:
                    self._decoded.clear()
                topics = self._received_topics
                received = self._settled
                entry = _Decoded(causes, foreign_causes(causes, topics, received))
                self._decoded[raw] = entry
            else:
                causes = entry.causes
            foreign = entry.foreign

        # -- in-execution order
        fed_exec = self._fed_exec
        before = fed_exec.get(ch)
        if before is not None and q <= before:
            raise _refuse(
                Reason.OUT_OF_ORDER_FEED,
                details.fed_after_position(ch, self._topic_names(), q, before),
            )
        fed_exec[ch] = q

        # -- receipt merges every cause into the frontier, before the duplicate check
        if causes and (entry is None or entry.merged_epoch != self._epoch):
            self._merge_causes(causes)
            if entry is not None:
                entry.merged_epoch = self._epoch

        # -- coverage: dead channel, invariant guard, replay drop
        fed = self._fed.get(ch)
        if fed is not None and q <= fed:
            if fed == FED_TO_END:
                raise _refuse(
                    Reason.OUT_OF_ORDER_FEED,
                    details.fed_gone_channel(ch, self._topic_names(), q),
                )
            floor_at = floor.get(ch)
            if floor_at is None or q > floor_at:
                raise _refuse(
                    Reason.COVERED_POSITION_FED,
                    details.covered_position_fed(ch, self._topic_names(), q, fed, floor_at),
                )
            return FeedOutcome.DUPLICATE_DROPPED

        if foreign:
            self._cross_partition(msg, foreign)

        # -- accept: cover, hold
        self._fed[ch] = q
        self._dirty_f[ch] = None
        self._bodies[(ch, q)] = (msg.timestamp_ms, msg.key, msg.value, app_headers, causes)
        queue = self._queues[ch]
        queue.append(q)
        self._held_total += 1
        if len(queue) == 1:
            self._head_causes[ch] = causes
            self._candidates[ch] = None
            self._raise_settled(ch, q - 1)
        return FeedOutcome.ACCEPTED

    def _undecodable(self, ch: ChannelId, q: int, diagnosis: str) -> str:
        return details.undecodable(ch, self._topic_names(), q, diagnosis)

    def _cross_partition(self, msg: ReceivedMessage, foreign: Causes) -> None:
        """Apply the cross-partition rule to ``foreign`` (a hook the sabotage engines
        override); raises as :meth:`CrossPartitionCheck.check`."""
        self._cross.check(msg.channel, msg.position, msg.key, foreign, self._topic_names())

    def waited_count(self) -> int:
        """Heads found waiting for a cause not yet delivered since this engine was built,
        each counted once: every such wait held its channel back (docs/operations.md,
        "Status", ``waited``)."""
        return self._waited

    def cross_partition_causes(self) -> int:
        """Messages accepted by this engine that carried a cause it could not enforce
        (:class:`CrossPartition`); always 0 under :attr:`CrossPartition.REFUSE`."""
        return self._cross.count

    # ------------------------------------------------------------ frontier

    def _merge_causes(self, causes: Causes) -> None:
        frontier = self._frontier
        get = frontier.get
        dirty = self._dirty_c
        moved = self._moved
        for c, p in causes:
            current = get(c)
            if current is None:
                self._merge_new(c, p)
            elif p > current:
                frontier[c] = p
                dirty[c] = None
                moved.append(c)

    def _merge_new(self, ch: ChannelId, position: int) -> None:
        self._frontier[ch] = position
        self._dirty_c[ch] = None
        self._encoding.added(ch)
        size = self._encoding.size()
        if size > self._budget:
            raise _refuse(
                Reason.METADATA_BUDGET_EXCEEDED,
                details.frontier_over_budget(size, len(self._frontier), self._budget),
            )
        self._check_warning()

    def _check_warning(self) -> None:
        if self._warned:
            return
        size = self.frontier_bytes()
        if size * 5 >= self._budget * 4:
            self._warned = True
            if self._on_warning is not None:
                self._on_warning(
                    f"the causal frontier reached {size} bytes ({len(self._frontier)} "
                    f"channels), at least 80% of the metadata budget of {self._budget} bytes; "
                    "beyond the budget the process stops with METADATA_BUDGET_EXCEEDED"
                )

    def frontier_bytes(self) -> int:
        """The frontier's encoded size in bytes, maintained incrementally (docs/wire-format.md,
        "Size")."""
        return self._encoding.size()

    def _frontier_dict(self) -> dict[ChannelId, int]:
        return dict(self._frontier)

    def causes_header(self) -> bytes:
        """The ``parsley.causes`` value every send of the current step carries.

        Returns:
            The canonical encoding of the frontier (cached until it changes).

        Raises:
            ParsleyFailClosedError: ``METADATA_BUDGET_EXCEEDED`` ("expressing the
                causal frontier needs <n> bytes (<k> channels); ...") when the
                encoding is longer than the budget (emission site).
        """
        encoded = self._encoding.header(self._frontier)
        if len(encoded) > self._budget:
            raise _refuse(
                Reason.METADATA_BUDGET_EXCEEDED,
                details.emission_over_budget(len(encoded), len(self._frontier), self._budget),
            )
        return encoded

    # ------------------------------------------------------------ decisions

    def _first_blocker(self, causes: Causes) -> tuple[ChannelId, int] | None:
        """The first cause on a received channel that is not settled, or ``None``.

        The engine's hot-path form of :func:`~parsley.engine.deliverability.decide`
        (the property tests pin the two together); sabotage engines override it.
        """
        get = self._settled.get
        for c, p in causes:
            if get(c, FED_TO_END) < p:
                return c, p
        return None

    def _causes_of_head(self, ch: ChannelId, position: int) -> Causes:
        causes = self._head_causes.get(ch)
        if causes is None:
            body = self._bodies.get((ch, position))
            causes = body[4] if body is not None else self._load(ch, position).causes
            self._head_causes[ch] = causes
        return causes

    def _load(self, ch: ChannelId, position: int) -> sc.HeldMessage:
        loaded = self._loaded
        if loaded is not None and loaded[0] == ch and loaded[1] == position:
            return loaded[2]
        blob = self._store.get(sc.held_key(ch, position))
        if blob is None:
            raise _refuse(
                Reason.UNKNOWN_ORDERING_STATE_FORMAT,
                details.held_body_missing(ch, self._topic_names(), position),
            )
        message = sc.decode_held(blob)
        self._loaded = (ch, position, message)
        return message

    def _decide_candidates(self) -> None:
        # Deciding never raises a settled position, so no candidate appears meanwhile.
        candidates = self._candidates
        self._candidates = {}
        rank = self._rank
        for ch in candidates:
            queue = self._queues[ch]
            if not queue:
                continue
            blocker = self._first_blocker(self._causes_of_head(ch, queue[0]))
            if blocker is None:
                heappush(self._ready, rank[ch])
            else:
                heappush(self._waiting.setdefault(blocker[0], []), (blocker[1], rank[ch]))
                # A blocked head keeps only its causes in memory, never its body.
                self._loaded = None
                # Counted once: a head decided again (a blocker settled, another remains)
                # is the same message; heads only move forward on a channel.
                if queue[0] > self._waited_at.get(ch, -1):
                    self._waited_at[ch] = queue[0]
                    self._waited += 1

    def deliver_next(self) -> DeliverableMessage | None:
        """Deliver the next head whose causes are all settled, if any.

        Order: among the heads deliverable now, the one on the lowest channel
        (channel order), the order Java's ``nextDeliverable`` scan gives.
        Delivering a head may make others deliverable (its channel settles
        further), so a host calls this until it returns ``None``; chains
        across channels release in that loop.

        The delivery is applied before returning: the head leaves its buffer,
        the frontier merges ``(channel, position)``, the delivered past merges
        the message's causes (docs/model.md, "Hold-back"), and a persisted hold's
        ``h`` row is tombstoned in the next deltas.

        Returns:
            The message, with application headers only, or ``None``.

        Raises:
            ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` when a
                held head's body is absent from the store or corrupt;
                ``METADATA_BUDGET_EXCEEDED`` when merging the delivered
                position outgrows the budget.
        """
        if self._candidates:
            self._decide_candidates()
        ready = self._ready
        if not ready:
            return None
        ch = self._by_rank[heappop(ready)]
        queue = self._queues[ch]
        q = queue[0]
        body = self._bodies.pop((ch, q), None)
        if body is None:
            held = self._load(ch, q)
            self._loaded = None
            body = (
                held.timestamp_ms,
                held.key,
                held.value,
                strip_reserved(held.headers),
                held.causes,
            )
            self._dirty_h[(ch, q)] = None
        queue.popleft()
        self._held_total -= 1
        self._head_causes.pop(ch, None)
        causes = body[4]

        frontier = self._frontier
        current = frontier.get(ch)
        if current is None:
            self._merge_new(ch, q)
        elif q > current:
            frontier[ch] = q
            self._dirty_c[ch] = None
            self._moved.append(ch)
        if causes and causes is not self._last_past:
            past = self._past
            past_get = past.get
            dirty_p = self._dirty_p
            for c, p in causes:
                if p > past_get(c, -1):
                    past[c] = p
                    dirty_p[c] = None
            self._last_past = causes

        if queue:
            self._candidates[ch] = None
            self._raise_settled(ch, queue[0] - 1)
        else:
            fed = self._fed.get(ch)
            if fed is not None:
                self._raise_settled(ch, fed)
        return DeliverableMessage(ch, q, body[0], body[1], body[2], body[3], causes)

    # ------------------------------------------------------------ deltas

    def _take_rows(self) -> list[Row]:
        """The rows of :meth:`take_deltas` but the ``n`` rows, which the shell adds."""
        rows = changed_rows(
            stamp_version=self._stamp_version,
            bodies=self._bodies,
            delivered_holds=self._dirty_h,
            tables=(
                (self._dirty_f, self._fed, sc.fed_key),
                (self._dirty_c, self._frontier, sc.frontier_key),
                (self._dirty_p, self._past, sc.past_key),
            ),
            changed_names=(),
            names={},
        )
        self._stamp_version = False
        if self._bodies:
            self._bodies = {}
        if self._dirty_h:
            self._dirty_h = {}
        self._dirty_f.clear()
        self._dirty_c.clear()
        self._dirty_p.clear()
        # A task that never sends never asks for a header: bound the pending moves.
        self._encoding.trim(len(self._frontier))
        return rows

    # ------------------------------------------------------------ queries

    def covered(self, ch: ChannelId) -> int | None:
        """``fedUpTo(ch)``: highest position fed or known never to arrive (inclusive).

        Returns:
            The position, :data:`FED_TO_END` for a deleted channel, or ``None``.
        """
        return self._fed.get(ch)

    def settled(self, ch: ChannelId) -> int | None:
        """``settled(ch)`` (docs/model.md, "Covered and settled"): head - 1 if anything is held,
        else covered, else ``None``."""
        queue = self._queues.get(ch)
        if queue:
            return queue[0] - 1
        return self._fed.get(ch)

    def session_floor(self, ch: ChannelId) -> int | None:
        """Coverage of ``ch`` when :meth:`start` ran (``None`` if none, or not started)."""
        return None if self._floor is None else self._floor.get(ch)

    def _past_dict(self) -> dict[ChannelId, int]:
        return dict(self._past)

    def held_count(self, ch: ChannelId | None = None) -> int:
        """Messages held on ``ch``, or on every channel when ``ch`` is ``None``."""
        if ch is None:
            return self._held_total
        queue = self._queues.get(ch)
        return len(queue) if queue else 0

    def held_positions(self, ch: ChannelId) -> tuple[int, ...]:
        """Positions held on ``ch`` in FIFO (ascending) order."""
        queue = self._queues.get(ch)
        return tuple(queue) if queue else ()

    def _diagnosis_heads(self) -> tuple[list[tuple[ChannelId, Sequence[int]]],
                                        Callable[[ChannelId, int], Causes]]:
        held: list[tuple[ChannelId, Sequence[int]]] = [
            (ch, self._queues[ch]) for ch in self._by_rank if self._queues[ch]]
        return held, self._causes_of_head
