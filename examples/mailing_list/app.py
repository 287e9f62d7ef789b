"""The two Parsley processes of the mailing-list pipeline, declared with the public API only.

``threader`` receives ``list.posts`` and places each message in its thread's
reply tree; ``digest`` receives ``list.posts`` and ``list.threaded`` and keeps
per-thread timelines, emitting every step it takes to ``list.digest``::

    ingest ──list.posts──► threader ──list.threaded──► digest ──list.digest──► checker
              └──────────────────────────────────────►┘

Why Parsley is needed: ``digest`` must never handle a message's threaded event
before the posts it depends on (its own, its parent's). ``threader`` emits the
event only after it has delivered both posts, so the event's ``parsley.causes``
names their positions on ``list.posts``; ``digest``'s task ``i`` receives
``list.posts`` partition ``i`` and holds the event until those positions are
delivered. All three topics are keyed by thread (the ingester's union-find over
the whole file) with the same partition count, so a reply, its parent and
their events share a partition index, and each ``digest`` task receives every
cause it must enforce (docs/failing-closed.md, "Cross-partition causes"). A plain consumer that
catches up on both topics sees many threaded events before their posts
(``naive.py``): large posts and small events are fetched at different speeds.

Record shapes (JSON values, UTF-8 string keys = the thread name):

- ``list.posts``: see :mod:`examples.mailing_list.ingest` (``type`` ``post`` or ``end``).
- ``list.threaded``: ``{"type": "threaded", "message_id", "parent", "thread",
  "depth", "orphan", "seq"}``. ``depth`` counts the placed ancestors (0 for a
  thread root or an orphan); ``orphan`` is true for a reply whose parent never
  arrived (released at end of input; ``parent`` still names the missing id).
- ``list.digest``: one record per ``digest`` step, ``{"step", "task", "kind",
  "input": {"topic", "partition", "offset"}, ...}``; ``step`` counts the
  task's steps from 1; ``kind`` ``post`` adds ``message_id``, ``thread``,
  ``duplicate``; ``end`` adds ``posts`` (the marker's count); ``threaded``
  adds ``message_id``, ``parent``, ``thread``, ``depth``, ``orphan``,
  ``position`` (1-based place in the thread's timeline), ``post_seen`` and
  ``parent_post_seen`` (``None`` for a root or an orphan): what ``digest``
  found in its store when it handled the event.

``PROCESSES`` (for ``parsley-coordinator run examples.mailing_list.app:PROCESSES``)
uses the topic names ``list.posts``, ``list.threaded`` and ``list.digest``,
each followed by ``$MAILING_LIST_TOPIC_SUFFIX`` when that is set (the demo sets
it to run beside an earlier run on a shared broker). ``THREADER`` and
``DIGEST`` are the two processes alone, for starting them separately.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Final

from parsley import Channel, Delivery, Effects, Process, State, Store
from parsley.serdes import JSON, STRING

__all__ = [
    "DIGEST",
    "PROCESSES",
    "THREADER",
    "TOPIC_SUFFIX_ENV",
    "Digest",
    "Threader",
    "Topics",
    "build",
]

TOPIC_SUFFIX_ENV: Final = "MAILING_LIST_TOPIC_SUFFIX"
"""Environment variable appended to the three topic names when ``PROCESSES`` is built."""

PENDING_KEY: Final = "parents"
"""The one key of ``threader``'s ``pending`` store: missing parents with parked replies."""

STEPS_KEY: Final = "count"
"""The one key of ``digest``'s ``steps`` store: the task's step count."""


@dataclass(frozen=True, slots=True)
class Topics:
    """The pipeline's topic names.

    Attributes:
        posts: the ingester's output, received by both processes.
        threaded: ``threader``'s output, received by ``digest``.
        digest: ``digest``'s output, read by the checker.
    """

    posts: str = "list.posts"
    threaded: str = "list.threaded"
    digest: str = "list.digest"

    @staticmethod
    def with_suffix(suffix: str) -> Topics:
        """The default names, each followed by ``suffix`` (``""``: the names as documented)."""
        return Topics(f"list.posts{suffix}", f"list.threaded{suffix}", f"list.digest{suffix}")

    def all(self) -> tuple[str, str, str]:
        """``(posts, threaded, digest)``."""
        return (self.posts, self.threaded, self.digest)


class _Step:
    """One handler call's reads and writes: reads see this call's own writes first.

    ``State.get`` sees earlier deliveries only, and the threader places several
    messages in one call (a parent and the replies parked under it), so its
    writes are staged here and handed to :class:`Effects` once, the last value
    per key, in first-write order.
    """

    __slots__ = ("_state", "_writes", "sends")

    def __init__(self, state: State) -> None:
        self._state = state
        self._writes: dict[tuple[str, str], tuple[Store[str, Any], Any]] = {}
        self.sends = Effects.builder()

    def get(self, store: Store[str, Any], key: str) -> Any:
        staged = self._writes.get((store.name, key))
        if staged is not None:
            return staged[1]
        return self._state.get(store, key)

    def put(self, store: Store[str, Any], key: str, value: Any) -> None:
        self._writes[(store.name, key)] = (store, value)

    def delete(self, store: Store[str, Any], key: str) -> None:
        self._writes[(store.name, key)] = (store, None)

    def effects(self) -> Effects:
        builder = self.sends
        for (_, key), (store, value) in self._writes.items():
            if value is None:
                builder.delete(store, key)
            else:
                builder.put(store, key, value)
        return builder.build()


@dataclass(frozen=True)
class Threader:
    """``threader``'s handler and stores: the reply tree, parked replies, end-of-input release.

    Stores (``STRING`` keys, ``JSON`` values):

    - ``nodes``: ``message_id -> {"state": "placed", "parent", "depth", "thread",
      "orphan"}`` or ``{"state": "parked", "parent", "thread", "seq"}``. A
      Message-ID already here is a repeat and is dropped.
    - ``parked``: ``parent id -> [{"message_id", "thread", "seq"}, ...]``, the
      replies waiting for that parent, in arrival order. Never skipped: each is
      released when the parent is placed, or at end of input as an orphan.
    - ``pending``: ``"parents" -> [parent id, ...]``, the keys of ``parked`` in
      first-parking order (a handler cannot list a store).

    Attributes:
        posts: the received channel.
        threaded: the channel it sends one event per placed message to.
    """

    posts: Channel[str, Any]
    threaded: Channel[str, Any]
    nodes: Store[str, Any] = field(default_factory=lambda: Store("nodes", STRING, JSON))
    parked: Store[str, Any] = field(default_factory=lambda: Store("parked", STRING, JSON))
    pending: Store[str, Any] = field(default_factory=lambda: Store("pending", STRING, JSON))

    def process(self) -> Process:
        """The declared process ``threader``."""
        return (Process("threader")
                .receives(self.posts, self.on_post)
                .sends(self.threaded)
                .stores(self.nodes, self.parked, self.pending))

    def on_post(self, delivery: Delivery[str, Any], state: State) -> Effects:
        """Place a post (and any replies parked under it), park it, drop it, or release all.

        Args:
            delivery: a ``list.posts`` record: ``type`` ``post`` or ``end``.
            state: the task's stores.

        Returns:
            Store writes and one ``list.threaded`` event per message placed.

        Raises:
            ValueError: a record of unknown ``type`` (the input is not the ingester's).
        """
        value = delivery.value or {}
        kind = value.get("type")
        step = _Step(state)
        if kind == "end":
            self._release_all(step)
            return step.effects()
        if kind != "post":
            raise ValueError(f"{delivery.topic}@{delivery.offset}: unknown record type {kind!r}")
        mid = value["message_id"]
        if step.get(self.nodes, mid) is not None:
            return Effects.none()  # the same mail delivered twice: already placed or parked
        thread = delivery.key or value["thread"]
        parent = value.get("parent")
        seq = value.get("seq")
        if parent is None:
            self._place(step, mid, None, 0, thread, seq, orphan=False)
            return step.effects()
        parent_node = step.get(self.nodes, parent)
        if parent_node is not None and parent_node["state"] == "placed":
            self._place(step, mid, parent, parent_node["depth"] + 1, thread, seq, orphan=False)
        else:
            self._park(step, mid, parent, thread, seq)
        return step.effects()

    def _park(self, step: _Step, mid: str, parent: str, thread: str, seq: Any) -> None:
        step.put(self.nodes, mid, {"state": "parked", "parent": parent, "thread": thread,
                                   "seq": seq})
        waiting = list(step.get(self.parked, parent) or [])
        waiting.append({"message_id": mid, "thread": thread, "seq": seq})
        step.put(self.parked, parent, waiting)
        pending = list(step.get(self.pending, PENDING_KEY) or [])
        if parent not in pending:
            pending.append(parent)
            step.put(self.pending, PENDING_KEY, pending)

    def _place(self, step: _Step, mid: str, parent: str | None, depth: int, thread: str,
               seq: Any, *, orphan: bool) -> None:
        """Place ``mid``, emit its event, then the replies parked under it, breadth first."""
        queue: list[tuple[str, str | None, int, str, Any, bool]] = [
            (mid, parent, depth, thread, seq, orphan)]
        while queue:
            mid, parent, depth, thread, seq, orphan = queue.pop(0)
            step.put(self.nodes, mid, {"state": "placed", "parent": parent, "depth": depth,
                                       "thread": thread, "orphan": orphan})
            step.sends.send(self.threaded, thread, {
                "type": "threaded", "message_id": mid, "parent": parent, "thread": thread,
                "depth": depth, "orphan": orphan, "seq": seq})
            children = step.get(self.parked, mid)
            if children:
                step.delete(self.parked, mid)
                pending = [p for p in step.get(self.pending, PENDING_KEY) or [] if p != mid]
                step.put(self.pending, PENDING_KEY, pending)
                queue.extend((c["message_id"], mid, depth + 1, c["thread"], c["seq"], False)
                             for c in children)

    def _release_all(self, step: _Step) -> None:
        """End of input: every parked reply whose parent never came is placed as an orphan.

        Replies parked under a parent that did arrive but is itself parked are
        placed under it when it is released; a cycle of replies (none seen in
        the archive) is broken at its first-parked parent.
        """
        while True:
            pending = list(step.get(self.pending, PENDING_KEY) or [])
            if not pending:
                return
            missing = [p for p in pending if step.get(self.nodes, p) is None]
            pick = missing[0] if missing else pending[0]
            children = step.get(self.parked, pick) or []
            step.delete(self.parked, pick)
            step.put(self.pending, PENDING_KEY, [p for p in pending if p != pick])
            for child in children:
                node = step.get(self.nodes, child["message_id"])
                if node is not None and node["state"] == "parked":
                    self._place(step, child["message_id"], pick, 0, child["thread"],
                                child["seq"], orphan=True)


@dataclass(frozen=True)
class Digest:
    """``digest``'s handlers and stores: per-thread timelines, one output record per step.

    Stores (``STRING`` keys, ``JSON`` values):

    - ``posts``: ``message_id -> {"seq", "subject", "author", "date", "bytes",
      "partition", "offset"}`` of the first copy of each post (the content it
      needs to place a message; the padded body is not kept).
    - ``timelines``: ``thread -> [[message_id, depth], ...]`` in handling order.
    - ``steps``: ``"count" -> int``, the task's steps so far.

    Attributes:
        posts: received (the content).
        threaded: received (the placements); each event is held by Parsley
            until the posts named in its causes are delivered.
        digest: the output channel.
    """

    posts: Channel[str, Any]
    threaded: Channel[str, Any]
    digest: Channel[str, Any]
    contents: Store[str, Any] = field(default_factory=lambda: Store("posts", STRING, JSON))
    timelines: Store[str, Any] = field(default_factory=lambda: Store("timelines", STRING, JSON))
    steps: Store[str, Any] = field(default_factory=lambda: Store("steps", STRING, JSON))

    def process(self) -> Process:
        """The declared process ``digest``."""
        return (Process("digest")
                .receives(self.posts, self.on_post)
                .receives(self.threaded, self.on_threaded)
                .sends(self.digest)
                .stores(self.contents, self.timelines, self.steps))

    def _step(self, step: _Step, delivery: Delivery[str, Any], kind: str,
              fields: dict[str, Any]) -> None:
        count = int(step.get(self.steps, STEPS_KEY) or 0) + 1
        step.put(self.steps, STEPS_KEY, count)
        record = {"step": count, "task": delivery.partition, "kind": kind,
                  "input": {"topic": delivery.topic, "partition": delivery.partition,
                            "offset": delivery.offset}}
        record.update(fields)
        step.sends.send(self.digest, delivery.key, record)

    def on_post(self, delivery: Delivery[str, Any], state: State) -> Effects:
        """Keep a post's content (first copy only) and record the step.

        Raises:
            ValueError: a record of unknown ``type``.
        """
        value = delivery.value or {}
        step = _Step(state)
        kind = value.get("type")
        if kind == "end":
            self._step(step, delivery, "end", {"posts": value.get("posts")})
            return step.effects()
        if kind != "post":
            raise ValueError(f"{delivery.topic}@{delivery.offset}: unknown record type {kind!r}")
        mid = value["message_id"]
        duplicate = step.get(self.contents, mid) is not None
        if not duplicate:
            step.put(self.contents, mid, {
                "seq": value.get("seq"), "subject": value.get("subject"),
                "author": value.get("author"), "date": value.get("date"),
                "bytes": value.get("bytes"), "partition": delivery.partition,
                "offset": delivery.offset})
        self._step(step, delivery, "post", {"message_id": mid, "thread": value.get("thread"),
                                            "duplicate": duplicate})
        return step.effects()

    def on_threaded(self, delivery: Delivery[str, Any], state: State) -> Effects:
        """Append a placed message to its thread's timeline and record the step.

        Records whether the message's post, and its parent's, were in the store
        when the event was handled: with Parsley's hold-back both always are.

        Raises:
            ValueError: a record of unknown ``type``.
        """
        value = delivery.value or {}
        if value.get("type") != "threaded":
            raise ValueError(f"{delivery.topic}@{delivery.offset}: unknown record type "
                             f"{value.get('type')!r}")
        step = _Step(state)
        mid = value["message_id"]
        parent = value.get("parent")
        thread = value.get("thread") or delivery.key
        own = step.get(self.contents, mid)
        parent_seen = None
        if parent is not None and not value.get("orphan"):
            parent_seen = step.get(self.contents, parent) is not None
        timeline = list(step.get(self.timelines, thread) or [])
        timeline.append([mid, value.get("depth")])
        step.put(self.timelines, thread, timeline)
        self._step(step, delivery, "threaded", {
            "message_id": mid, "parent": parent, "thread": thread, "depth": value.get("depth"),
            "orphan": bool(value.get("orphan")), "position": len(timeline),
            "post_seen": own is not None, "parent_post_seen": parent_seen,
            "subject": None if own is None else own.get("subject")})
        return step.effects()


def build(topics: Topics | None = None) -> tuple[Process, Process]:
    """``(threader, digest)`` over ``topics`` (default names when ``None``).

    Every topic has ``STRING`` keys and ``JSON`` values and is read from the
    earliest offset on a process's first start.
    """
    names = topics or Topics()
    posts: Channel[str, Any] = Channel(names.posts, STRING, JSON)
    threaded: Channel[str, Any] = Channel(names.threaded, STRING, JSON)
    digest: Channel[str, Any] = Channel(names.digest, STRING, JSON)
    return Threader(posts, threaded).process(), Digest(posts, threaded, digest).process()


PROCESSES: Final = build(Topics.with_suffix(os.environ.get(TOPIC_SUFFIX_ENV, "")))
"""``(threader, digest)`` on ``list.posts``, ``list.threaded``, ``list.digest`` (+ suffix)."""
THREADER: Final = PROCESSES[0]
"""``threader`` alone (``parsley-coordinator run examples.mailing_list.app:THREADER``)."""
DIGEST: Final = PROCESSES[1]
"""``digest`` alone, to start it late."""
