"""Topic identity: the identity check's verdicts and the refusals they lead to.

The engine records the topic id each topic name resolved to when its state was
built (``n`` rows) and, at task initialisation, is told for each topic id it
knows whether that id is still alive. These functions decide, from plain data,
what a new binding or a set of verdicts means; the engine applies the result.

Source: docs/model.md, "Pruning" (the identity check and what it
decides); docs/runbooks.md, CHANNEL_IDENTITY_CHANGED and
CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from uuid import UUID

from parsley import refusal_shapes as shapes
from parsley.engine.channel import ChannelId, kafka_topic_id
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = ["DELETION_REMEDY", "TopicVerdict", "deleted_channels", "new_bindings"]

DELETION_REMEDY = ("The deletion breached the deletion-hygiene assumption; an operator must "
                   "reset this process's state deliberately to proceed (docs/runbooks.md, "
                   "CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES).")
"""How every ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` detail ends (the engine's, and
the worker's for records read but never committed, ``workers/identity.py``)."""

_RESET = ("Reset the process's state and group offsets deliberately to proceed "
          "(docs/runbooks.md, Resetting a process)")


class TopicVerdict(enum.Enum):
    """The identity check's answer for one topic id (docs/model.md, "Pruning")."""

    ALIVE = "ALIVE"
    """The id resolves (or the describe was denied): nothing changes."""
    DELETED = "DELETED"
    """The id is gone and its last-known name resolves nowhere."""
    RECREATED = "RECREATED"
    """The id is gone and its last-known name resolves to another id."""


def new_bindings(
    bound: Mapping[str, UUID], bindings: Mapping[str, UUID], received: Sequence[ChannelId]
) -> list[str]:
    """Check resolved names against the recorded bindings; the names not yet recorded.

    Args:
        bound: topic name -> topic id the state was built against.
        bindings: topic name -> topic id as resolved now.
        received: the received channels in channel order (to show a channel
            rather than a bare id in the refusal).

    Returns:
        The names of ``bindings`` absent from ``bound``, in ``bindings`` order.

    Raises:
        ParsleyFailClosedError: ``CHANNEL_IDENTITY_CHANGED`` ("topic '<name>'
            now resolves to <channel> but this process's state was built
            against a previous incarnation (topic id <id> now, topic id <old id>
            then); ...") for the first name
            bound to another id. Checked before anything is returned.

    Source: docs/runbooks.md, CHANNEL_IDENTITY_CHANGED, task-initialisation site (Java
    ``ProcessEngine`` constructor).
    """
    for name, topic_id in bindings.items():
        old = bound.get(name)
        if old is not None and old != topic_id:
            # Named as a channel, as the Java implementation does: the task's own
            # channel on the topic (a store changelog's partition is the task's too).
            partition = next((ch.partition for ch in received if ch.topic_id == topic_id),
                             received[0].partition if received else 0)
            channel = ChannelId(topic_id, partition)
            raise ParsleyFailClosedError(
                Reason.CHANNEL_IDENTITY_CHANGED,
                f"{shapes.channel_identity_changed_binding(name, channel)} (topic id "
                f"{kafka_topic_id(topic_id)} now, topic id {kafka_topic_id(old)} then); its "
                "read positions for that name cannot be trusted. " + _RESET
                + "; CHANNEL_IDENTITY_CHANGED.",
            )
    return [name for name in bindings if name not in bound]


def deleted_channels(
    received: Sequence[ChannelId],
    held: Mapping[ChannelId, int],
    verdicts: Mapping[UUID, TopicVerdict],
    names: Mapping[UUID, str] | None = None,
) -> list[ChannelId]:
    """Check the verdicts against the received channels; those to set fed to end.

    Args:
        received: the received channels in channel order.
        held: per received channel, how many messages it holds (0 or absent
            for none).
        verdicts: topic id -> verdict; pending ids omitted.
        names: topic id -> topic name, to name channels in the details.

    Returns:
        The received channels whose topic was deleted (each holds nothing), in
        channel order.

    Raises:
        ParsleyFailClosedError: ``CHANNEL_IDENTITY_CHANGED`` ("the topic of
            received channel <channel> was deleted and recreated under the
            same name while this process ran; ...") for a recreated received
            topic, first; then ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``
            ("<n> received message(s) from <channel> remain undelivered but
            the channel's topic no longer exists; ...") for a deleted received
            topic that holds messages.

    Source: docs/model.md, "Pruning"; docs/runbooks.md, CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES.
    """
    names = names or {}
    for ch in received:
        if verdicts.get(ch.topic_id) is TopicVerdict.RECREATED:
            raise ParsleyFailClosedError(
                Reason.CHANNEL_IDENTITY_CHANGED,
                f"{shapes.channel_identity_changed_recreated(ch)} "
                f"({shapes.coordinates(ch, names)}); records fed under the old identity can "
                "no longer be trusted. " + _RESET + "; CHANNEL_IDENTITY_CHANGED.",
            )
    deleted = [ch for ch in received if verdicts.get(ch.topic_id) is TopicVerdict.DELETED]
    for ch in deleted:
        count = held.get(ch, 0)
        if count:
            raise ParsleyFailClosedError(
                Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES,
                f"{shapes.channel_deleted_with_undelivered_messages(count, ch)} The channel "
                f"was {shapes.coordinates(ch, names)}. " + DELETION_REMEDY,
            )
    return deleted
