"""The opening of every refusal detail: its reason's shape, as docs/runbooks.md gives it.

Each reason's runbook gives the shape of ``failure_detail`` (the Java implementation's
text, so that one alert, log search or runbook serves a Java and a Python process).
Every detail a Python process raises opens with that shape, written here once, one
function per reason and site, and then adds what our details carry besides: the
topic name, offset and topic id as the Kafka tools want them (:func:`coordinates`),
and the remedy. In a shape, ``<channel>`` is a channel as docs/model.md names it, the
topic id and the partition, ``<topic id>-<partition>`` (Java's ``ChannelId.toString``,
:meth:`parsley.engine.channel.ChannelId.__str__`), and ``<channel>@<position>`` a
position on it. The shapes, and where ours add to them: docs/failing-closed.md,
"Detail shapes".

Pure: standard library and :mod:`parsley.engine.channel`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from uuid import UUID

from parsley.engine.channel import ChannelId, kafka_topic_id

__all__ = [
    "application_payload_undecodable",
    "application_payload_unserializable",
    "channel_deleted_with_undelivered_messages",
    "channel_identity_changed_at_start",
    "channel_identity_changed_binding",
    "channel_identity_changed_recreated",
    "channel_removed_at_initialisation",
    "channel_removed_at_start",
    "coordinates",
    "covered_position_fed",
    "emission_to_undeclared_channel",
    "fed_after_position",
    "fed_gone_channel",
    "handler_returned_null_effects",
    "metadata_over_budget_on_emission",
    "metadata_over_budget_on_merge",
    "metadata_over_budget_on_receipt",
    "ordering_state_lost",
    "positions_discarded_unread",
    "reserved_header_used",
    "state_access_to_undeclared_store",
    "state_read_key_unserializable",
    "state_write_key_null",
    "stored_value_undecodable",
    "substrate_group_conflict",
    "substrate_no_topic_id",
    "substrate_record_too_large",
    "task_width_changed",
    "undecodable_metadata",
]


def coordinates(channel: ChannelId, names: Mapping[UUID, str], position: int | None = None
                ) -> str:
    """A channel (at ``position``) as the Kafka tools need it, to follow a shape.

    Returns:
        ``topic 'shop.orders' partition 1 offset 12, topic id Iv8Irqw9RYmUoxJaXCaJow``
        (the topic id as ``kafka-topics --describe`` prints it), or for an id whose name
        ``names`` lacks ``topic id Iv8Irqw9RYmUoxJaXCaJow partition 1 offset 12, a topic
        whose name this task does not know``: what ``kafka-console-consumer --topic
        --partition --offset`` and ``kafka-topics --describe`` take.
    """
    at = "" if position is None else f" offset {position}"
    name = names.get(channel.topic_id)
    tid = kafka_topic_id(channel.topic_id)
    if name is None:
        return (f"topic id {tid} partition {channel.partition}{at}, a topic whose name this "
                "task does not know")
    return f"topic '{name}' partition {channel.partition}{at}, topic id {tid}"


# -- the engine's reasons -------------------------------------------------------------


def undecodable_metadata(channel: ChannelId, position: int, detail: str) -> str:
    """``UNDECODABLE_METADATA``: ``<channel>@<position>: <detail>``, the detail being the
    codec's diagnosis (:func:`parsley.wire.decode_causes`)."""
    return f"{channel}@{position}: {detail}"


def fed_after_position(channel: ChannelId, position: int, fed_before: int) -> str:
    """``OUT_OF_ORDER_FEED`` within an execution: ``fed <channel>@<n> after this execution
    was already fed position <m> of the same channel``."""
    return (f"fed {channel}@{position} after this execution was already fed position "
            f"{fed_before} of the same channel")


def fed_gone_channel(channel: ChannelId, position: int) -> str:
    """``OUT_OF_ORDER_FEED`` on a channel recorded as gone: ``fed <channel>@<n> on a channel
    recorded as no longer existing``."""
    return f"fed {channel}@{position} on a channel recorded as no longer existing"


def covered_position_fed(channel: ChannelId, position: int, fed_up_to: int,
                         floor: int | None) -> str:
    """``COVERED_POSITION_FED``: ``fed <channel>@<n> which this execution's own coverage
    already records as fed or never arriving (fedUpTo=<m>), above the session floor of
    <f>; ...`` (``none`` for no floor), with the seed's closing sentences."""
    return (f"fed {channel}@{position} which this execution's own coverage already records "
            f"as fed or never arriving (fedUpTo={fed_up_to}), above the session floor of "
            f"{'none' if floor is None else floor}; the host's feed and the engine's record "
            "contradict each other. A restart resumes from the committed record, and this "
            "refusal then does not recur.")


def metadata_over_budget_on_receipt(channel: ChannelId, position: int, size_bytes: int,
                                    budget_bytes: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on receipt: ``<channel>@<position> carries <n> bytes of
    causal metadata; the configured budget is <b> bytes``."""
    return (f"{channel}@{position} carries {size_bytes} bytes of causal metadata; the "
            f"configured budget is {budget_bytes} bytes")


def metadata_over_budget_on_merge(size_bytes: int, channels: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on merge: ``the causal frontier reached <n> bytes (<k>
    channels)``."""
    return f"the causal frontier reached {size_bytes} bytes ({channels} channels)"


def metadata_over_budget_on_emission(size_bytes: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on emission: ``expressing the causal frontier needs <n>
    bytes``."""
    return f"expressing the causal frontier needs {size_bytes} bytes"


# -- identity, declaration and start --------------------------------------------------


def channel_removed_at_start(channels: Iterable[ChannelId]) -> str:
    """``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` at start: ``received messages remain
    undelivered on [<topicId>/<partition>, ...], which the new declaration no longer
    receives``, topic ids as ``kafka-topics --describe`` prints them."""
    listed = ", ".join(f"{kafka_topic_id(c.topic_id)}/{c.partition}" for c in channels)
    return (f"received messages remain undelivered on [{listed}], which the new declaration "
            "no longer receives")


def channel_removed_at_initialisation(channel: ChannelId, position: int) -> str:
    """``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` at task initialisation: ``held message at
    <channel>@<position> but the channel is no longer in the declared received-channel
    set``."""
    return (f"held message at {channel}@{position} but the channel is no longer in the "
            "declared received-channel set")


def channel_identity_changed_at_start(names: Iterable[str]) -> str:
    """``CHANNEL_IDENTITY_CHANGED`` at start: ``topics [<names>] now resolve to different
    identities than this process's state was built against``."""
    return (f"topics [{', '.join(names)}] now resolve to different identities than this "
            "process's state was built against")


def channel_identity_changed_binding(name: str, channel: ChannelId) -> str:
    """``CHANNEL_IDENTITY_CHANGED`` from the stored name binding: ``topic '<name>' now
    resolves to <channel> but this process's state was built against a previous
    incarnation``."""
    return (f"topic '{name}' now resolves to {channel} but this process's state was built "
            "against a previous incarnation")


def channel_identity_changed_recreated(channel: ChannelId) -> str:
    """``CHANNEL_IDENTITY_CHANGED`` from the identity check: ``the topic of received channel
    <channel> was deleted and recreated under the same name while this process ran``."""
    return (f"the topic of received channel {channel} was deleted and recreated under the "
            "same name while this process ran")


def channel_deleted_with_undelivered_messages(count: int, channel: ChannelId) -> str:
    """``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``: ``<n> received message(s) from
    <channel> remain undelivered but the channel's topic no longer exists; their place in
    causal order can no longer be preserved.``"""
    return (f"{count} received message(s) from {channel} remain undelivered but the "
            "channel's topic no longer exists; their place in causal order can no longer "
            "be preserved.")


def task_width_changed(built_for: int, induced: int) -> str:
    """``TASK_WIDTH_CHANGED``: ``this process's ordering state was built for <n> task(s) but
    the declaration now induces <m> (the widest received topic's partition count
    changed)``."""
    return (f"this process's ordering state was built for {built_for} task(s) but the "
            f"declaration now induces {induced} (the widest received topic's partition "
            "count changed)")


def ordering_state_lost(topic: str, partition: int, *, stamped: bool,
                        changelog_partition: int | None) -> str:
    """``ORDERING_STATE_LOST``: ``committed read positions exist for <topic-partition>,
    stamped by a previous execution | committed outside parsley (external tooling, or
    pre-seeded offsets), but partition <p> of this process's ordering-store changelog
    holds no ordering records | this process's ordering-store changelog does not
    exist``.

    Args:
        stamped: the commit carries metadata (a previous execution's); else none.
        changelog_partition: the empty changelog partition, or ``None`` when the
            changelog does not exist.

    The seed's ``stamped by a previous Kafka Streams execution`` reads ``stamped by a
    previous execution``: there is no Kafka Streams here (docs/failing-closed.md,
    "Detail shapes").
    """
    provenance = ("stamped by a previous execution" if stamped else
                  "committed outside parsley (external tooling, or pre-seeded offsets)")
    behind = ("this process's ordering-store changelog does not exist"
              if changelog_partition is None else
              f"partition {changelog_partition} of this process's ordering-store changelog "
              "holds no ordering records")
    return f"committed read positions exist for {topic}-{partition}, {provenance}, but {behind}"


def positions_discarded_unread() -> str:
    """``POSITIONS_DISCARDED_UNREAD``: ``the broker no longer retains this process's
    committed read position; positions were discarded before they were read``."""
    return ("the broker no longer retains this process's committed read position; "
            "positions were discarded before they were read")


def substrate_record_too_large() -> str:
    """``SUBSTRATE_MISCONFIGURED``, a record over a size limit: ``a record exceeded a size
    limit``."""
    return "a record exceeded a size limit"


def substrate_group_conflict(window: str) -> str:
    """``SUBSTRATE_MISCONFIGURED``, something other than this process in its group: ``the
    group join has been refused as a protocol conflict for longer than <window>, so a
    member speaking another group protocol persists in this group``.

    Args:
        window: how long, with its unit (``20 s``).
    """
    return (f"the group join has been refused as a protocol conflict for longer than "
            f"{window}, so a member speaking another group protocol persists in this group")


def substrate_no_topic_id(topic: str) -> str:
    """``SUBSTRATE_MISCONFIGURED``, a broker below 3.7.0: ``topic '<name>' has no topic ID;
    brokers below the supported 3.7.0 floor cannot provide channel identity``."""
    return (f"topic '{topic}' has no topic ID; brokers below the supported 3.7.0 floor "
            "cannot provide channel identity")


# -- the handler frame's reasons ------------------------------------------------------


def handler_returned_null_effects(topic: str) -> str:
    """``HANDLER_RETURNED_NULL_EFFECTS``: ``handler for <topic> returned null effects;
    return Effects.none() for a step that changes nothing``."""
    return (f"handler for {topic} returned null effects; return Effects.none() for a step "
            "that changes nothing")


def emission_to_undeclared_channel(process: str, topic: str) -> str:
    """``EMISSION_TO_UNDECLARED_CHANNEL``: ``<process> emitted to undeclared channel
    <topic>``."""
    return f"{process} emitted to undeclared channel {topic}"


def state_access_to_undeclared_store(access: str, store: str, *, other_instance: bool) -> str:
    """``STATE_ACCESS_TO_UNDECLARED_STORE``: ``<read|write> targets a store not declared by
    stores(...): <store>``, with `` (a Store instance other than the declared one)`` when
    a store of that name is declared.

    Args:
        access: ``read`` or ``write``.
    """
    other = " (a Store instance other than the declared one)" if other_instance else ""
    return f"{access} targets a store not declared by stores(...): {store}{other}"


def reserved_header_used(topic: str, header: str) -> str:
    """``RESERVED_HEADER_USED``: ``serializer for <topic> wrote reserved header
    '<name>'``."""
    return f"serializer for {topic} wrote reserved header '{header}'"


def application_payload_unserializable(name: str) -> str:
    """``APPLICATION_PAYLOAD_UNSERIALIZABLE`` for a payload: ``<topic> payload could not be
    serialized by the declared serde`` (an emission; a state write's key or value names
    its store instead)."""
    return f"{name} payload could not be serialized by the declared serde"


def state_write_key_null(store: str) -> str:
    """``APPLICATION_PAYLOAD_UNSERIALIZABLE`` for a state write's key: ``<store> state write
    key serialized to null; the declared key serde could not encode it``."""
    return (f"{store} state write key serialized to null; the declared key serde could not "
            "encode it")


def state_read_key_unserializable(store: str) -> str:
    """``APPLICATION_PAYLOAD_UNSERIALIZABLE`` for a state read's key: ``<store> state read
    key could not be serialized by the declared serde``."""
    return f"{store} state read key could not be serialized by the declared serde"


def application_payload_undecodable(topic: str, position: int) -> str:
    """``APPLICATION_PAYLOAD_UNDECODABLE`` for a delivered message's payload:
    ``<topic>@<position>``."""
    return f"{topic}@{position}"


def stored_value_undecodable(store: str) -> str:
    """``APPLICATION_PAYLOAD_UNDECODABLE`` for a state read: ``<store> stored value could
    not be decoded by the declared serde``."""
    return f"{store} stored value could not be decoded by the declared serde"
