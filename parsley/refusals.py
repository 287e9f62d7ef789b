"""Refusal reasons and the one refusal type, :class:`ParsleyFailClosedError`.

A refusal is Parsley stopping a process on purpose because its guarantee
(causal order, exactly once) could not be upheld past this point. Callers
branch on :attr:`ParsleyFailClosedError.reason`, never on message text.

Source: docs/failing-closed.md ("Where each refusal is raised") for the reasons and
their conditions; docs/runbooks.md ("Runbooks by reason") for the detail shapes and what an
operator does about each. The names are the Java implementation's (``FailClosedException.java``),
kept verbatim so
that a Java and a Python process report the same refusal the same way.
"""

from __future__ import annotations

import enum

__all__ = ["ParsleyFailClosedError", "Reason"]


class Reason(enum.Enum):
    """Why a process stopped to preserve the guarantee (docs/failing-closed.md, "Where each refusal
    is raised").

    Each member's value is its own name, so ``Reason(name)`` parses a reason
    read from status JSON or a log line.
    """

    UNDECODABLE_METADATA = "UNDECODABLE_METADATA"
    """A ``parsley.causes`` header is present and not decodable."""
    POSITIONS_DISCARDED_UNREAD = "POSITIONS_DISCARDED_UNREAD"
    """Retention discarded positions this process had not yet read."""
    OUT_OF_ORDER_FEED = "OUT_OF_ORDER_FEED"
    """A channel was fed out of position order, or fed after it was recorded as deleted."""
    COVERED_POSITION_FED = "COVERED_POSITION_FED"
    """Invariant guard: a feed at a position this execution already covers, above the floor."""
    ORDERING_STATE_LOST = "ORDERING_STATE_LOST"
    """Committed read positions exist but the ordering changelog behind them holds nothing."""
    CHANNEL_REMOVED_WITH_HELD_MESSAGES = "CHANNEL_REMOVED_WITH_HELD_MESSAGES"
    """A declaration removed a channel that still holds messages."""
    CHANNEL_IDENTITY_CHANGED = "CHANNEL_IDENTITY_CHANGED"
    """A topic name now resolves to a different topic id than the state was built against."""
    CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES = "CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES"
    """A received topic was deleted while messages from it are still held."""
    TASK_WIDTH_CHANGED = "TASK_WIDTH_CHANGED"
    """The task count changed, so the ordering state no longer matches its partitioning."""
    UNKNOWN_ORDERING_STATE_FORMAT = "UNKNOWN_ORDERING_STATE_FORMAT"
    """Stored ordering state cannot be trusted (unknown version, corrupt entry, lost head)."""
    EMISSION_TO_UNDECLARED_CHANNEL = "EMISSION_TO_UNDECLARED_CHANNEL"
    """A handler sent to a topic outside its process's declared send set."""
    STATE_ACCESS_TO_UNDECLARED_STORE = "STATE_ACCESS_TO_UNDECLARED_STORE"
    """Application logic read or wrote a store its process never declared."""
    RESERVED_HEADER_USED = "RESERVED_HEADER_USED"
    """An application header used the reserved ``parsley.`` prefix."""
    HANDLER_RETURNED_NULL_EFFECTS = "HANDLER_RETURNED_NULL_EFFECTS"
    """A handler returned ``None`` instead of ``Effects``."""
    APPLICATION_PAYLOAD_UNDECODABLE = "APPLICATION_PAYLOAD_UNDECODABLE"
    """A payload or stored value could not be decoded by its declared serde."""
    APPLICATION_PAYLOAD_UNSERIALIZABLE = "APPLICATION_PAYLOAD_UNSERIALIZABLE"
    """An effect's payload or a state-read key could not be serialized by its declared serde."""
    SUBSTRATE_MISCONFIGURED = "SUBSTRATE_MISCONFIGURED"
    """The Kafka cluster is configured in a way the guarantee cannot survive."""
    METADATA_BUDGET_EXCEEDED = "METADATA_BUDGET_EXCEEDED"
    """Causal metadata exceeded the configured budget (receipt, merge or emission)."""
    CROSS_PARTITION_CAUSE = "CROSS_PARTITION_CAUSE"
    """A received record names a cause on a partition of a received topic that another
    task reads, under the ``cross_partition_causes`` setting's refusal (``auto`` with
    equal partition counts, or ``refuse``): usually a keying or partitioner mistake
    upstream (docs/failing-closed.md). Not one of the Java implementation's reasons; added after
    them, so the exit codes of those reasons (64 + index) keep their values."""


_FIND_IN_DEPTH = 64


class ParsleyFailClosedError(Exception):
    """The process stopped to preserve its guarantee (docs/failing-closed.md).

    The message is ``"<REASON>: <detail>"``, as the Java implementation's
    ``FailClosedException`` prints it; the detail opens with the shape docs/runbooks.md
    gives for the reason (for example ``<channel>@<position>: truncated causes
    header`` for ``UNDECODABLE_METADATA``), written by :mod:`parsley.refusal_shapes`.

    Attributes:
        reason: the :class:`Reason`; branch on this, never on the text.
        detail: what was seen and, where one exists, the remedy.
    """

    def __init__(self, reason: Reason, detail: str) -> None:
        if not isinstance(reason, Reason):
            raise TypeError(f"reason must be a Reason, got {type(reason).__name__}")
        super().__init__(f"{reason.name}: {detail}")
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type[ParsleyFailClosedError], tuple[Reason, str]]:
        # Refusals cross process boundaries (worker -> coordinator); keep them picklable.
        return (type(self), (self.reason, self.detail))

    @staticmethod
    def find_in(exc: BaseException | None) -> ParsleyFailClosedError | None:
        """Return the first refusal in ``exc``'s cause/context chain, or ``None``.

        Walks ``__cause__`` (falling back to ``__context__``) to a depth of 64,
        as Java's ``FailClosedException.findIn`` walks its cause chain.
        """
        seen = 0
        while exc is not None and seen < _FIND_IN_DEPTH:
            if isinstance(exc, ParsleyFailClosedError):
                return exc
            exc = exc.__cause__ if exc.__cause__ is not None else exc.__context__
            seen += 1
        return None
