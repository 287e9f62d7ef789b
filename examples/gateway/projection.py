"""The projection behind the gateway: a Parsley process that folds comments into thread rows.

``threads`` receives ``<topics>.comments`` (key: the thread, value: ``{"id", "author",
"text"}``, written by the gateway) and keeps, per task, every thread's comments and the
past it has recorded. For each comment it stores the thread's new row and sends it to
``<topics>.threads`` (key: the thread, value: ``{"thread", "comments": [...], "past":
<hex of CausalPast.encode()>}``), so the gateway's replica of the read model
(:mod:`examples.gateway.view`) learns each row together with the past it is valid for.

The recorded past is the task's own clock: every delivery's own coordinate merged in
(:meth:`parsley.session.ReadTier.record`), never the frontier. It is kept in a store beside
the rows, so row and past commit in the same Kafka transaction (docs/session.md, "The
read path").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from uuid import UUID

from parsley import Channel, Delivery, Effects, Process, State, Store
from parsley.serdes import JSON, STRING
from parsley.session import CausalPast, ReadTier

__all__ = ["CLOCK_KEY", "Projection", "Topics", "build"]

CLOCK_KEY: Final = "past"
"""The one key of the ``clock`` store: the hex of the task's recorded past."""


@dataclass(frozen=True, slots=True)
class Topics:
    """The gateway's two topics, ``<base>.comments`` and ``<base>.threads``.

    Both have one partition (docs/session.md, "Partitions"): a token stamped on a comment
    names the comments topic, and a cause on another partition of a topic the projection
    receives is one no task of it could enforce.
    """

    base: str = "gateway"

    @property
    def comments(self) -> str:
        """What the gateway writes: one record per posted comment."""
        return f"{self.base}.comments"

    @property
    def threads(self) -> str:
        """What the projection writes: a thread's full row after each comment."""
        return f"{self.base}.threads"


@dataclass(frozen=True)
class Projection:
    """``threads``'s channels, stores and handler.

    Stores (``STRING`` keys, ``JSON`` values): ``rows``: thread -> its comments in the
    order the projection delivered them; ``clock``: :data:`CLOCK_KEY` -> the hex of the
    task's recorded past.

    Attributes:
        comments: the received channel.
        threads: the channel each row is sent to.
        tier: topic ids of the received topic, for the recorded past.
    """

    comments: Channel[str, Any]
    threads: Channel[str, Any]
    tier: ReadTier
    rows: Store[str, Any] = field(default_factory=lambda: Store("rows", STRING, JSON))
    clock: Store[str, Any] = field(default_factory=lambda: Store("clock", STRING, JSON))

    def process(self) -> Process:
        """The declared process ``threads``."""
        return (Process("threads")
                .receives(self.comments, self.on_comment)
                .sends(self.threads)
                .stores(self.rows, self.clock))

    def on_comment(self, delivery: Delivery[str, Any], state: State) -> Effects:
        """Append a comment to its thread's row; merge the delivery into the recorded past.

        Returns:
            The row and the past, stored, and the row sent to the threads topic.

        Raises:
            ValueError: a record without a thread key or without a comment object (the
                writer is not the gateway).
        """
        thread, comment = delivery.key, delivery.value
        if not thread or not isinstance(comment, dict):
            raise ValueError(f"{delivery.topic}@{delivery.offset}: not a gateway comment "
                             f"(key {thread!r})")
        comments = [*(state.get(self.rows, thread) or []), comment]
        stored = state.get(self.clock, CLOCK_KEY)
        past = CausalPast.decode(bytes.fromhex(stored)) if stored else CausalPast.none()
        past = self.tier.record(past, delivery)
        row = {"thread": thread, "comments": comments, "past": past.encode().hex()}
        return (Effects.builder()
                .put(self.rows, thread, comments)
                .put(self.clock, CLOCK_KEY, row["past"])
                .send(self.threads, thread, row)
                .build())


def build(topics: Topics, topic_ids: Mapping[str, UUID]) -> list[Process]:
    """The projection over ``topics``.

    Args:
        topics: the two topic names; both must exist, with one partition each.
        topic_ids: at least the comments topic's name mapped to its Kafka topic id,
            resolved at startup (:func:`examples.gateway.cluster.topic_ids`).

    Returns:
        ``[threads]``, for ``Parsley.start``.

    Raises:
        ValueError: the comments topic's id is missing.
    """
    if topics.comments not in topic_ids:
        raise ValueError(f"no topic id for '{topics.comments}'; resolve it first")
    projection = Projection(
        Channel(topics.comments, STRING, JSON),
        Channel(topics.threads, STRING, JSON),
        ReadTier({topics.comments: topic_ids[topics.comments]}),
    )
    return [projection.process()]
