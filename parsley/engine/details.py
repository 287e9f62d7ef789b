"""The ordering engine's refusal details, one function per refusal site, for both engines.

Each detail opens with its reason's shape (:mod:`parsley.refusal_shapes`), then names
the channel as the Kafka tools need it (:func:`parsley.refusal_shapes.coordinates`) and
ends with the remedy and the runbook section, ``(docs/runbooks.md, <REASON>)``. The
pure-Python engine calls these functions; the native core returns a refusal's figures
and its Python adapter calls the same function by name (``native/src/py_engine``), so
the two engines' texts cannot drift apart (tests/property/test_engine_differential.py
compares them). ``names`` is topic id -> topic name, the task's bindings.

Pure: standard library and the pure ``parsley`` modules.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

from parsley import refusal_shapes as shapes
from parsley.engine.channel import ChannelId, describe_channel

__all__ = [
    "covered_position_fed",
    "cross_partition_cause",
    "emission_over_budget",
    "fed_after_position",
    "fed_gone_channel",
    "frontier_over_budget",
    "header_over_budget",
    "held_body_missing",
    "held_on_undeclared_channel",
    "undecodable",
]

_RAISE_BUDGET = "Raise metadata_budget_bytes here and upstream"


def undecodable(ch: ChannelId, names: Mapping[UUID, str], position: int,
                diagnosis: str) -> str:
    """``UNDECODABLE_METADATA`` for the record at ``ch@position``."""
    return (f"{shapes.undecodable_metadata(ch, position, diagnosis)} "
            f"({shapes.coordinates(ch, names, position)}). Find and fix the producer that "
            "stamped the header; no restart passes the record (docs/runbooks.md, "
            "UNDECODABLE_METADATA)")


def header_over_budget(ch: ChannelId, names: Mapping[UUID, str], position: int,
                       size_bytes: int, budget_bytes: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on receipt: a header longer than the budget, bytes."""
    return (f"{shapes.metadata_over_budget_on_receipt(ch, position, size_bytes, budget_bytes)}"
            f" ({shapes.coordinates(ch, names, position)}). {_RAISE_BUDGET} "
            "(docs/runbooks.md, METADATA_BUDGET_EXCEEDED)")


def frontier_over_budget(size_bytes: int, channels: int, budget_bytes: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on merge: the frontier grew past the budget, bytes."""
    return (f"{shapes.metadata_over_budget_on_merge(size_bytes, channels)}; the configured "
            f"budget is {budget_bytes} bytes. The frontier's size is the sum over its topics "
            "of 26 bytes for the first partition and 9 for each further one, plus 2 "
            f"(docs/model.md). {_RAISE_BUDGET} (docs/runbooks.md, METADATA_BUDGET_EXCEEDED).")


def emission_over_budget(size_bytes: int, channels: int, budget_bytes: int) -> str:
    """``METADATA_BUDGET_EXCEEDED`` on emission: the header a send needs, bytes."""
    return (f"{shapes.metadata_over_budget_on_emission(size_bytes)} ({channels} channels); "
            f"the configured budget is {budget_bytes} bytes. {_RAISE_BUDGET} "
            "(docs/runbooks.md, METADATA_BUDGET_EXCEEDED).")


def fed_after_position(ch: ChannelId, names: Mapping[UUID, str], position: int,
                       fed_before: int) -> str:
    """``OUT_OF_ORDER_FEED`` within an execution: ``ch`` fed at or below ``fed_before``."""
    return (f"{shapes.fed_after_position(ch, position, fed_before)} "
            f"({shapes.coordinates(ch, names, position)}); the host must feed each channel in "
            "increasing position order. Restart; if it recurs at the same offsets, keep the "
            "logs and report it (docs/runbooks.md, OUT_OF_ORDER_FEED)")


def fed_gone_channel(ch: ChannelId, names: Mapping[UUID, str], position: int) -> str:
    """``OUT_OF_ORDER_FEED`` on a channel recorded as fed to its end (its topic deleted)."""
    return (f"{shapes.fed_gone_channel(ch, position)} "
            f"({shapes.coordinates(ch, names, position)}); the identity verdict was wrong. "
            "Reset the process, keep the logs and report it (docs/runbooks.md, "
            "OUT_OF_ORDER_FEED)")


def covered_position_fed(ch: ChannelId, names: Mapping[UUID, str], position: int,
                         fed_up_to: int, floor: int | None) -> str:
    """``COVERED_POSITION_FED``: a feed inside this execution's own coverage."""
    return (f"{shapes.covered_position_fed(ch, position, fed_up_to, floor)} The record is "
            f"{shapes.coordinates(ch, names, position)} (docs/runbooks.md, "
            "COVERED_POSITION_FED).")


def held_body_missing(ch: ChannelId, names: Mapping[UUID, str], position: int) -> str:
    """``UNKNOWN_ORDERING_STATE_FORMAT``: a held message's row has gone from the store."""
    return (f"held message at {ch}@{position} is in the hold-back buffer but absent from the "
            f"store ({shapes.coordinates(ch, names, position)}). Wipe the process's local "
            "state directory and restart (docs/runbooks.md, UNKNOWN_ORDERING_STATE_FORMAT)")


def held_on_undeclared_channel(ch: ChannelId, names: Mapping[UUID, str], position: int) -> str:
    """``CHANNEL_REMOVED_WITH_HELD_MESSAGES`` at task initialisation: the oldest message
    held on a channel the declaration no longer receives."""
    return (f"{shapes.channel_removed_at_initialisation(ch, position)} "
            f"({shapes.coordinates(ch, names, position)}). Restore the channel to the "
            "declaration until its held messages deliver, or reset the process "
            "(docs/runbooks.md, CHANNEL_REMOVED_WITH_HELD_MESSAGES)")


def cross_partition_cause(ch: ChannelId, names: Mapping[UUID, str], position: int,
                          key: str, cause: ChannelId, cause_at: int) -> str:
    """``CROSS_PARTITION_CAUSE``: the record at ``ch@position`` with key text ``key``
    (:func:`parsley.engine.channel.describe_key`) names ``cause@cause_at``. Not a reason of
    the Java implementation, so it has no seed shape: channels read as
    docs/failing-closed.md, "Cross-partition causes", shows."""
    return (f"the record at {describe_channel(ch, names, position)} ({key}) names a cause at "
            f"{describe_channel(cause, names, cause_at)}, a partition another task of this "
            "process reads, so no task can hold the record until its cause is delivered. "
            "Usually a keying or partitioner mistake upstream: produce the input keyed, with "
            "the murmur2_random partitioner (Java's default), and reset the process past the "
            "record; if an upstream stage deliberately fans in partitions, "
            "cross_partition_causes = \"warn\" carries such causes unenforced "
            "(docs/runbooks.md, CROSS_PARTITION_CAUSE)")
