"""The refusal detail shapes of the runbooks, and the check that a detail opens with one.

``SHAPES`` holds, per reason, every shape the Java implementation's runbooks give for
``failureDetail`` (docs/runbooks.md, "Runbooks by reason", repeats them), written as
they are there: ``<placeholder>`` for a figure, ``...`` for elided text. Operators'
alerts, log searches and a mixed Java/Python shop's one runbook key on these texts, so
every refusal detail a Python process raises opens with its reason's shape
(docs/failing-closed.md, "Detail shapes"). :func:`assert_seed_shape` checks that
against a detail from a real occurrence; the regex is built from the shape text here,
never from the product's own formatting (``parsley/refusal_shapes.py``), so the two can
disagree and a test then fails.

``<channel>`` is a channel as docs/model.md names it, ``<topic id>-<partition>`` with the
topic id as a UUID (Java's ``ChannelId.toString``); ``<topicId>`` in a list of channels
is the topic id as ``kafka-topics --describe`` prints it. Every other placeholder stands
for any text.
"""

from __future__ import annotations

import re
from typing import Final

from parsley.refusals import Reason

__all__ = ["DEVIATIONS", "SHAPES", "WRITTEN_AS", "assert_seed_shape", "shape_regex"]

SHAPES: Final[dict[Reason, tuple[str, ...]]] = {
    Reason.UNDECODABLE_METADATA: ("<channel>@<position>: <detail>",),
    Reason.OUT_OF_ORDER_FEED: (
        "fed <channel>@<n> after this execution was already fed position <q> of the same "
        "channel",
        "fed <channel>@<n> on a channel recorded as no longer existing",
    ),
    Reason.COVERED_POSITION_FED: (
        "fed <channel>@<n> which this execution's own coverage already records as fed or "
        "never arriving (fedUpTo=<m>), above the session floor of <f>; the host's feed and "
        "the engine's record contradict each other. A restart resumes from the committed "
        "record, and this refusal then does not recur.",
    ),
    Reason.HANDLER_RETURNED_NULL_EFFECTS: (
        "handler for <topic> returned null effects; return Effects.none() for a step that "
        "changes nothing",
    ),
    Reason.EMISSION_TO_UNDECLARED_CHANNEL: ("<process> emitted to undeclared channel <topic>",),
    Reason.STATE_ACCESS_TO_UNDECLARED_STORE: (
        "<read|write> targets a store not declared by stores(...): <store>",
    ),
    Reason.RESERVED_HEADER_USED: ("serializer for <topic> wrote reserved header '<name>'",),
    Reason.APPLICATION_PAYLOAD_UNSERIALIZABLE: (
        "<topic> payload could not be serialized by the declared serde",
        "<store> state write key serialized to null; the declared key serde could not "
        "encode it",
        "<store> state read key could not be serialized by the declared serde",
    ),
    Reason.APPLICATION_PAYLOAD_UNDECODABLE: (
        "<topic>@<position>",
        "<store> stored value could not be decoded by the declared serde",
    ),
    Reason.METADATA_BUDGET_EXCEEDED: (
        "<channel>@<position> carries <n> bytes of causal metadata; the configured budget "
        "is <b> bytes",
        "the causal frontier reached <n> bytes (<k> channels)",
        "expressing the causal frontier needs <n> bytes",
    ),
    Reason.SUBSTRATE_MISCONFIGURED: (
        "a record exceeded a size limit",
        "the group join has been refused as a protocol conflict for longer than <window>, "
        "so a member speaking another group protocol persists in this group",
        "topic '<name>' has no topic ID; brokers below the supported 3.7.0 floor cannot "
        "provide channel identity",
    ),
    Reason.TASK_WIDTH_CHANGED: (
        "this process's ordering state was built for <n> task(s) but the declaration now "
        "induces <m> (the widest received topic's partition count changed)",
    ),
    Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES: (
        "received messages remain undelivered on [<topicId>/<partition>, ...], which the "
        "new declaration no longer receives",
        "held message at <channel>@<position> but the channel is no longer in the declared "
        "received-channel set",
    ),
    Reason.POSITIONS_DISCARDED_UNREAD: (
        "the broker no longer retains this process's committed read position; positions "
        "were discarded before they were read",
    ),
    Reason.ORDERING_STATE_LOST: (
        "committed read positions exist for <topic-partition>, stamped by a previous Kafka "
        "Streams execution, but partition <p> of this process's ordering-store changelog "
        "holds no ordering records",
        "committed read positions exist for <topic-partition>, stamped by a previous Kafka "
        "Streams execution, but this process's ordering-store changelog does not exist",
        "committed read positions exist for <topic-partition>, committed outside parsley "
        "(external tooling, or pre-seeded offsets), but partition <p> of this process's "
        "ordering-store changelog holds no ordering records",
        "committed read positions exist for <topic-partition>, committed outside parsley "
        "(external tooling, or pre-seeded offsets), but this process's ordering-store "
        "changelog does not exist",
    ),
    Reason.CHANNEL_IDENTITY_CHANGED: (
        "topics [<names>] now resolve to different identities than this process's state "
        "was built against",
        "topic '<name>' now resolves to <channel> but this process's state was built "
        "against a previous incarnation",
        "the topic of received channel <channel> was deleted and recreated under the same "
        "name while this process ran",
    ),
    Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES: (
        "<n> received message(s) from <channel> remain undelivered but the channel's topic "
        "no longer exists; their place in causal order can no longer be preserved.",
    ),
    Reason.UNKNOWN_ORDERING_STATE_FORMAT: (
        "ordering store format not understood by this build",
        "ordering state present without its format version entry; the earliest records of "
        "the ordering changelog have been lost",
        "corrupt ordering key",
        "corrupt ordering value",
        "corrupt held blob",
        "held message ... is in the hold-back buffer but absent from the store",
        "held messages restored out of position order",
        "restored frontier names the reserved zero topic id",
        "restored <what> names position <p> on <channel>, which no channel can assign",
        # The Java implementation's own OrderingStateCodec text for a held key of the
        # wrong length, a corrupt entry the runbook's list does not spell out.
        "corrupt held key",
    ),
}
"""Per reason, the shapes of its runbook (CROSS_PARTITION_CAUSE, ours alone, has none)."""

WRITTEN_AS: Final[dict[Reason, tuple[str, ...]]] = {
    Reason.ORDERING_STATE_LOST: (
        "committed read positions exist for <topic-partition>, stamped by a previous Kafka "
        "Streams execution | committed outside parsley (external tooling, or pre-seeded "
        "offsets), but partition <p> of this process's ordering-store changelog holds no "
        "ordering records | this process's ordering-store changelog does not exist",
    ),
}
"""How a runbook writes the shapes of a reason where it folds several into one with
``|`` alternatives (the others it writes as :data:`SHAPES` has them)."""

DEVIATIONS: Final[dict[str, str]] = {
    "stamped by a previous Kafka Streams execution": "stamped by a previous execution",
}
"""Seed text -> the text a Python process writes instead, with the reason: there is no
Kafka Streams execution in the Python runtime (docs/failing-closed.md, "Detail shapes")."""

_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PLACEHOLDER = re.compile(r"<[^<>]+>|\.\.\.")
_KAFKA_ID = "[A-Za-z0-9_-]{22}"
_CHANNEL_LIST = "[<topicId>/<partition>, ...]"
_SPECIAL: Final = {
    "<channel>": _UUID + r"-\d+",
    "<read|write>": "(?:read|write)",
    "<channel list>": rf"\[{_KAFKA_ID}/\d+(?:, {_KAFKA_ID}/\d+)*\]",
}


def shape_regex(shape: str) -> re.Pattern[str]:
    """The regex a detail opening with ``shape`` matches (anchored at its start).

    Literal text must match exactly; ``<channel>`` must be ``<uuid>-<partition>``;
    ``[<topicId>/<partition>, ...]`` a list of one or more channels, topic ids as Kafka
    prints them; any other placeholder, and ``...``, is non-empty text.
    """
    for seed, ours in DEVIATIONS.items():
        shape = shape.replace(seed, ours)
    shape = shape.replace(_CHANNEL_LIST, "<channel list>")
    out: list[str] = []
    at = 0
    for m in _PLACEHOLDER.finditer(shape):
        out.append(re.escape(shape[at:m.start()]))
        out.append(_SPECIAL.get(m.group(0), ".+?"))
        at = m.end()
    out.append(re.escape(shape[at:]))
    return re.compile("".join(out))


def assert_seed_shape(reason: Reason, detail: str) -> None:
    """Assert ``detail`` opens with one of ``reason``'s shapes (:data:`SHAPES`).

    Raises:
        AssertionError: naming the reason, the detail and the shapes tried.
    """
    shapes = SHAPES[reason]
    if not any(shape_regex(s).match(detail) for s in shapes):
        raise AssertionError(
            f"the {reason.name} detail does not open with its runbook's shape:\n  {detail}\n"
            "shapes:\n" + "\n".join(f"  {s}" for s in shapes))
