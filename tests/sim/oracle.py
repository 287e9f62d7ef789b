"""The happened-before oracle: judges a run from ground truth, never from the engine.

The simulator tells the oracle only what really happened and stuck: each
committed record (where it landed, what it carried, and who produced it on
the strength of which delivery), and each task's committed deliveries in
order. Crashed steps never reach it, so deliveries rolled back by a crash do
not count. From this the oracle computes every record's real causal past as a
vector (channel -> highest position):

* a record a task sent while handling delivery ``d`` happened after ``d`` and
  after everything the task delivered before ``d``, transitively (sends are
  never causes: docs/model.md, "The frontier, and what a header means");
* a record a source sent after reading ``(c, p)`` happened after every record
  on ``c`` up to ``p``, transitively.

A vector suffices because each receiver delivers a channel as a prefix; the
FIFO check below proves that rather than assuming it. The oracle never reads
a frontier, a header or any engine state.

Clauses it names (README.md, "The verification kit"; docs/wire-format.md, "What a receiver
does with the entries"):

* ``V1 causal order``: a task delivered a record before a cause of it that lies
  on a channel the task receives.
* ``V2 FIFO``, ``V2 duplicate``, ``V2 loss``: a channel's records must be
  delivered in offset order, each once, none skipped.
* ``V2 integrity``: a delivery that is no committed record of a received
  channel (an aborted record, a marker's offset), or whose key, value,
  timestamp, application headers (``parsley.*`` stripped) or causes differ
  from the record's.
* ``V5 liveness``: at drain, a committed record on a received channel was
  never delivered.
* ``M1 causes expressed`` and ``M2 entries name records`` (docs/model.md, "The
  frontier, and what a header means"), checked on each task's sends from their ``parsley.causes``
  bytes as they went on the wire: every real cause is expressed at or above
  its position, except on channels of deleted topics; every entry names a
  committed record, and never the send's own channel at or above its offset.
  Headers may over-approximate (receipts of undelivered messages count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from parsley.engine.channel import ChannelId, Header

__all__ = [
    "Body",
    "Delivered",
    "Oracle",
    "Sent",
    "Violation",
]

V1 = "V1 causal order"
V2_FIFO = "V2 FIFO"
V2_DUP = "V2 duplicate"
V2_LOSS = "V2 loss"
V2_INTEGRITY = "V2 integrity"
V5 = "V5 liveness"
M1 = "M1 causes expressed"
M2 = "M2 entries name records"
X1 = "X1 cross-partition causes reported"
"""Every accepted record with a cause on another task's partition of a received topic
is reported by the engine (counted in ``cross_partition_causes``, or refused):
the guard of docs/failing-closed.md, "Cross-partition causes"."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken clause: ``clause`` is e.g. ``"V1 causal order"``; ``detail`` says what broke."""

    clause: str
    detail: str

    def __str__(self) -> str:
        return f"{self.clause}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Body:
    """What an application sees of a record: timestamp, key, value, application headers."""

    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class Delivered:
    """A delivery as the task's handler received it.

    Attributes:
        channel, position: the record delivered.
        body: what the handler saw of it.
        causes: the causes the engine handed over with it, or ``None`` to skip
            that check (hand-built histories); they must be the record's header.
    """

    channel: ChannelId
    position: int
    body: Body
    causes: Mapping[ChannelId, int] | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """A task's committed send: where it landed, its body, and what it claimed.

    Attributes:
        channel, offset: where the record landed.
        body: its timestamp, key, value and application headers.
        trigger: index into the step's deliveries of the one whose handler sent it.
        causes: its decoded ``parsley.causes`` header, or ``None`` to skip the
            metadata checks (hand-built histories).
    """

    channel: ChannelId
    offset: int
    body: Body
    trigger: int
    causes: Mapping[ChannelId, int] | None = None


def _join(into: dict[ChannelId, int], other: Mapping[ChannelId, int]) -> None:
    for ch, pos in other.items():
        if into.get(ch, -1) < pos:
            into[ch] = pos


class Oracle:
    """Checks V1, V2, V5, M1 and M2 over a committed history, incrementally.

    Args:
        received: task name -> the channels that task receives.

    Feed it in commit order: :meth:`on_source_record` for a source's committed
    record, :meth:`on_commit` for a task's committed step, then call
    :meth:`finish` once the world has drained. :attr:`violations` lists what
    broke, in discovery order.
    """

    def __init__(self, received: Mapping[str, Iterable[ChannelId]]) -> None:
        self.received = {task: frozenset(chs) for task, chs in received.items()}
        self.violations: list[Violation] = []
        self._records: dict[ChannelId, list[int]] = {}  # committed offsets, ascending
        self._index: dict[tuple[ChannelId, int], int] = {}
        self._body: dict[tuple[ChannelId, int], Body] = {}
        self._past: dict[tuple[ChannelId, int], dict[ChannelId, int]] = {}
        # Per task and channel: indices (into _records) delivered, the highest one,
        # and how many from the start are delivered without a gap.
        self._seen: dict[str, dict[ChannelId, set[int]]] = {t: {} for t in self.received}
        self._top: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        self._prefix: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        # First start position per task and channel (absent: 0), and how many
        # records lie below it (never owed to the task).
        self._start: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        self._base: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        self._task_past: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        self._snapshots: dict[str, list[dict[ChannelId, int]]] = {t: [] for t in self.received}
        self._deleted: set[UUID] = set()
        # What each record's header claimed, and per task the join of the claims of
        # what it delivered: the delivered past a joining channel is clamped to.
        self._claimed: dict[tuple[ChannelId, int], Mapping[ChannelId, int]] = {}
        self._header_past: dict[str, dict[ChannelId, int]] = {t: {} for t in self.received}
        self.deliveries = 0
        self.clamps = 0  # joining channels whose delivered past reached past the start

    # ---- ground truth in ------------------------------------------------

    def observed_past(self, observed: Mapping[ChannelId, int]) -> dict[ChannelId, int]:
        """The causal past of having read each ``channel`` up to ``position`` (inclusive).

        Args:
            observed: channel -> offset of a committed record the reader consumed,
                having consumed the channel from its start.

        Returns:
            The vector a truthful producer must express (docs/model.md, "The frontier,
            and what a header means"); sources stamp exactly this.
        """
        past: dict[ChannelId, int] = {}
        for ch, pos in observed.items():
            _join(past, {ch: pos})
            for off in self._records.get(ch, ()):
                if off > pos:
                    break
                _join(past, self._past[(ch, off)])
        return past

    def _add_record(self, channel: ChannelId, offset: int, body: Body,
                    past: dict[ChannelId, int],
                    claimed: Mapping[ChannelId, int] | None = None) -> None:
        offsets = self._records.setdefault(channel, [])
        if offsets and offsets[-1] >= offset:
            raise AssertionError(f"simulator bug: {channel}@{offset} committed out of order")
        self._index[(channel, offset)] = len(offsets)
        offsets.append(offset)
        self._body[(channel, offset)] = body
        self._past[(channel, offset)] = past
        self._claimed[(channel, offset)] = past if claimed is None else claimed

    def on_source_record(self, channel: ChannelId, offset: int, body: Body,
                         observed: Mapping[ChannelId, int]) -> None:
        """A source committed a record after reading ``observed`` (empty: no causes).

        The source's header states exactly :meth:`observed_past` of ``observed``.
        """
        self._add_record(channel, offset, body, self.observed_past(observed))

    def on_start(self, task: str, positions: Mapping[ChannelId, int]) -> None:
        """A task's first start positions (its bootstrap commit), before any delivery.

        Records below a start position are never owed to the task, and lie
        below it for the receiver rule too (docs/wire-format.md, "What a receiver does with the
        entries": "the receiver started reading the channel above that position").
        """
        for ch, start in positions.items():
            base = sum(1 for off in self._records.get(ch, ()) if off < start)
            self._start[task][ch] = start
            self._base[task][ch] = base
            self._prefix[task][ch] = base
            self._top[task][ch] = base - 1

    def on_join(self, task: str, positions: Mapping[ChannelId, int]) -> None:
        """``task`` starts receiving new channels, from ``positions`` (their log starts).

        What its delivered past names on a joining channel is covered (the join
        clamp, docs/model.md): those records, and any below the start, are never
        owed to the task, and it must not deliver them.
        """
        self.received[task] = self.received[task] | frozenset(positions)
        for ch, start in positions.items():
            clamp = max(self._header_past[task].get(ch, -1), start - 1)
            self.clamps += clamp >= start
            self.on_start(task, {ch: clamp + 1})

    def on_commit(self, task: str, deliveries: Sequence[Delivered],
                  sends: Sequence[Sent]) -> None:
        """A task committed a step.

        Args:
            task: the task's name.
            deliveries: the step's deliveries in the order the handler ran.
            sends: the step's committed sends, in send order.
        """
        snaps = self._snapshots[task]
        base = len(snaps)
        for d in deliveries:
            self._check_delivery(task, d)
            _join(self._task_past[task], self._past.get((d.channel, d.position), {}))
            _join(self._task_past[task], {d.channel: d.position})
            _join(self._header_past[task], self._claimed.get((d.channel, d.position), {}))
            snaps.append(dict(self._task_past[task]))
            self.deliveries += 1
        for sent in sends:
            past = dict(snaps[base + sent.trigger])
            if sent.causes is not None:
                self._check_metadata(task, sent, past)
            self._add_record(sent.channel, sent.offset, sent.body, past, sent.causes)

    def on_delete(self, topic_id: UUID) -> None:
        """A topic was deleted: senders may stop expressing causes on it (docs/wire-format.md,
        "What a receiver does with the entries")."""
        self._deleted.add(topic_id)

    # ---- checks -------------------------------------------------------------

    def _flag(self, clause: str, detail: str) -> None:
        self.violations.append(Violation(clause, detail))

    def _check_delivery(self, task: str, d: Delivered) -> None:
        key = (d.channel, d.position)
        if d.channel not in self.received[task]:
            self._flag(V2_INTEGRITY, f"{task} delivered {d.channel}@{d.position}, "
                                     "a channel it does not receive")
            return
        index = self._index.get(key)
        if index is None:
            self._flag(V2_INTEGRITY, f"{task} delivered {d.channel}@{d.position}, "
                                     "which is no committed record (aborted record or marker?)")
            return
        if self._body[key] != d.body:
            self._flag(V2_INTEGRITY, f"{task} delivered {d.channel}@{d.position} with body "
                                     f"{d.body}, but the record is {self._body[key]}")
        if d.causes is not None and dict(d.causes) != dict(self._claimed[key]):
            self._flag(V2_INTEGRITY, f"{task} delivered {d.channel}@{d.position} with causes "
                                     f"{dict(d.causes)}, but its header says "
                                     f"{dict(self._claimed[key])}")
        if index < self._base[task].get(d.channel, 0):
            first = self._start[task][d.channel]
            if d.position <= self._task_past[task].get(d.channel, -1):
                self._flag(V1, f"{task} delivered {d.channel}@{d.position} after an effect of "
                               "it (a joining channel's delivered past must be covered)")
            else:
                self._flag(V2_INTEGRITY, f"{task} delivered {d.channel}@{d.position}, below "
                                         f"{first}, the first position owed to it (below its "
                                         "start, or in a joining channel's delivered past)")
            return
        seen = self._seen[task].setdefault(d.channel, set())
        if index in seen:
            self._flag(V2_DUP, f"{task} delivered {d.channel}@{d.position} a second time")
            return
        offsets = self._records[d.channel]
        top = self._top[task].get(d.channel, -1)
        prefix = self._prefix[task].get(d.channel, 0)
        if index < top:
            self._flag(V2_FIFO, f"{task} delivered {d.channel}@{d.position} after "
                                f"{d.channel}@{offsets[top]}, a later record on the channel")
        elif index > prefix:
            self._flag(V2_FIFO, f"{task} delivered {d.channel}@{d.position} before "
                                f"{d.channel}@{offsets[prefix]} (earlier on the channel, "
                                "not yet delivered)")
        seen.add(index)
        self._top[task][d.channel] = max(top, index)
        while prefix in seen:
            prefix += 1
        self._prefix[task][d.channel] = prefix
        for ch, pos in self._past[key].items():
            if ch not in self.received[task] or ch == d.channel:
                continue
            done = self._delivered_upto(task, ch)
            if done < pos:
                self._flag(V1, f"{task} delivered {d.channel}@{d.position} before its cause "
                               f"{ch}@{pos} (it had delivered {ch} only up to {done})")

    def _check_metadata(self, task: str, sent: Sent, past: Mapping[ChannelId, int]) -> None:
        where = f"{task}'s send {sent.channel}@{sent.offset}"
        assert sent.causes is not None
        for ch, pos in sorted(sent.causes.items()):
            if (ch, pos) not in self._index:
                self._flag(M2, f"{where} names {ch}@{pos}, which holds no committed record")
            if ch == sent.channel and pos >= sent.offset:
                self._flag(M2, f"{where} names its own channel at {pos}, not below its offset")
        for ch, pos in sorted(past.items()):
            if ch.topic_id not in self._deleted and sent.causes.get(ch, -1) < pos:
                self._flag(M1, f"{where} omits its cause {ch}@{pos} "
                               f"(header has {sent.causes.get(ch)})")

    def _delivered_upto(self, task: str, ch: ChannelId) -> int:
        """Highest offset ``p`` such that ``task`` delivered every record on ``ch`` up to ``p``."""
        prefix = self._prefix[task].get(ch, 0)
        done = self._records[ch][prefix - 1] if prefix else -1
        return max(done, self._start[task].get(ch, 0) - 1)

    def finish(self) -> list[Violation]:
        """Completeness at drain: every committed record on a received channel was delivered.

        Call once nothing more can be produced. A record missing below one that
        was delivered is ``V2 loss``; a missing tail is ``V5 liveness``.
        Returns :attr:`violations`.
        """
        for task, channels in sorted(self.received.items()):
            for ch in sorted(channels):
                offsets = self._records.get(ch, [])
                seen = self._seen[task].get(ch, set())
                top = self._top[task].get(ch, -1)
                base = self._base[task].get(ch, 0)
                lost = [offsets[i] for i in range(base, top) if i not in seen]
                if lost:
                    self._flag(V2_LOSS, f"{task} never delivered {ch}@{lost[0]} though it "
                                        f"delivered {ch}@{offsets[top]} ({len(lost)} lost)")
                tail = len(offsets) - top - 1
                if tail > 0:
                    self._flag(V5, f"{task} never delivered {ch}@{offsets[top + 1]} "
                                   f"({tail} of {len(offsets)} records on the channel "
                                   "undelivered at drain)")
        return self.violations

    def delivered_all(self, task: str, channel: ChannelId) -> bool:
        """Whether ``task`` has committed deliveries of every committed record on ``channel``."""
        return self._prefix[task].get(channel, 0) == len(self._records.get(channel, ()))
