"""Bootstrap step 3 (positions): committed read positions, ORDERING_STATE_LOST, pre-commits.

The rules are pure (:func:`lost_positions`, :func:`ordering_state_lost`,
:func:`initial_position`); the admin calls that feed them
(:func:`committed_positions`, :func:`list_offsets`) are kept apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.bootstrap.clients import answer
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    BOOTSTRAP_METADATA,
    STABLE_DEADLINE_S,
    STABLE_RETRY_S,
    StartError,
    StartRetryableError,
    refuse,
)
from parsley.declarations import InitialPosition
from parsley.engine.channel import FED_TO_END
from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "ForeignCommit",
    "committed_positions",
    "initial_position",
    "list_offsets",
    "lost_positions",
    "ordering_state_lost",
]


class ForeignCommit(NamedTuple):
    """A committed read position the bootstrap did not write.

    Attributes:
        topic: the received topic.
        partition: its partition (= the task, = the changelog partition).
        offset: the committed offset (next offset to fetch).
        metadata: its commit metadata ("" when none).
    """

    topic: str
    partition: int
    offset: int
    metadata: str


def lost_positions(
    committed: Mapping[tuple[str, int], tuple[int, str]],
    records: Sequence[int] | None,
) -> list[ForeignCommit]:
    """Committed positions with no ordering records behind them (pure; facts §5, seed 001).

    Every committed step writes ordering state and read positions together,
    so a position the bootstrap did not write (metadata other than
    ``parsley.bootstrap``) over a changelog partition without records means
    the state was lost.

    Args:
        committed: ``{(topic, partition): (offset, metadata)}``, committed only.
        records: records read per changelog partition, or ``None`` when the
            changelog does not exist.

    Returns:
        The suspects in (topic, partition) order; empty when nothing is lost.
    """
    out: list[ForeignCommit] = []
    for (topic, p), (offset, metadata) in sorted(committed.items()):
        if metadata == BOOTSTRAP_METADATA:
            continue
        if records is not None and p < len(records) and records[p] > 0:
            continue
        out.append(ForeignCommit(topic, p, offset, metadata))
    return out


def ordering_state_lost(
    suspect: ForeignCommit, changelog_name: str, changelog_exists: bool, app_id: str
) -> ParsleyFailClosedError:
    """The ``ORDERING_STATE_LOST`` refusal for ``suspect`` (pure; seed 001's shape, plus
    ``(offset <n>)``; docs/failing-closed.md)."""
    provenance = ("stamped by a previous execution" if suspect.metadata else
                  "committed by a previous execution or outside parsley (external "
                  "tooling, or pre-seeded offsets)")
    behind = (f"partition {suspect.partition} of this process's ordering-store changelog "
              f"{changelog_name} holds no ordering records" if changelog_exists
              else f"this process's ordering-store changelog {changelog_name} does "
              "not exist")
    return refuse(
        Reason.ORDERING_STATE_LOST,
        f"committed read positions exist for {suspect.topic}-{suspect.partition} (offset "
        f"{suspect.offset}), {provenance}, but {behind}. If the changelog's records can be "
        "restored from a backup, restore them and start; otherwise finish the reset "
        f"(kafka-consumer-groups --delete --group {app_id}).",
    )


def initial_position(
    prior_state: bool,
    covered: int | None,
    named: bool,
    declared: InitialPosition,
    earliest: int,
    latest: int,
    *,
    where: str = "the channel",
) -> int:
    """The position the bootstrap pre-commits for a received partition without one (pure).

    The rule of facts §5 (bootstrap step 3, "pre-commit every missing start
    position"), in order:

    * prior state that covers the channel: ``covered + 1``; on the fed-to-end
      sentinel (``FED_TO_END``, 2^63-1) ``earliest`` instead, never sentinel + 1;
    * prior state that names the topic but never covered this channel: ``0``;
    * prior state that never named the topic: ``earliest``;
    * no prior state (a process's first start): the declared ``starting_at``
      (``earliest`` or ``latest``).

    Args:
        prior_state: whether the ordering changelog held any state.
        covered: the channel's covered position from the state, or ``None``.
        named: whether the state binds the topic's name.
        declared: the channel's declared initial position.
        earliest: the partition's earliest offset (>= 0).
        latest: the partition's latest offset (>= ``earliest``).
        where: names the channel in a refusal's detail
            (``"<changelog>[<p>]: <topic>-<p>"``).

    Returns:
        The offset to commit (the next offset to fetch), in ``0..FED_TO_END``.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a
            ``covered`` outside ``0..FED_TO_END`` (negative, or beyond a signed
            64-bit long): no such coverage can be written, so the state is not
            one this build understands.
        ValueError: ``earliest``/``latest`` negative or out of order (a
            caller's error, not the cluster's state).
    """
    if covered is not None and not 0 <= covered <= FED_TO_END:
        raise refuse(
            Reason.UNKNOWN_ORDERING_STATE_FORMAT,
            f"{where}: covered position {covered} is outside 0..{FED_TO_END} (a covered "
            "position is a non-negative offset or the fed-to-end sentinel)",
        )
    if not 0 <= earliest <= latest:
        raise ValueError(f"{where}: offsets must satisfy 0 <= earliest <= latest, got "
                         f"earliest={earliest}, latest={latest}")
    if not prior_state:
        return latest if declared is InitialPosition.LATEST else earliest
    if covered is not None:
        return earliest if covered == FED_TO_END else covered + 1
    return 0 if named else earliest


def committed_positions(
    admin: AdminClient, group: str, tps: list[TopicPartition], sleep: Callable[[float], None]
) -> dict[tuple[str, int], tuple[int, str]]:
    """Stable committed offsets: ``{(topic, partition): (offset, metadata)}``, committed only."""
    deadline = time.monotonic() + STABLE_DEADLINE_S
    while True:
        try:
            request = [ConsumerGroupTopicPartitions(group, [TopicPartition(t.topic, t.partition)
                                                           for t in tps])]
            result = answer(admin.list_consumer_group_offsets(
                request, require_stable=True, request_timeout=ADMIN_TIMEOUT_S
            )[group], f"listing the committed positions of group '{group}'")
            out: dict[tuple[str, int], tuple[int, str]] = {}
            unstable = False
            for tp in result.topic_partitions:
                if tp.error is not None:
                    if tp.error.code() == KafkaError.UNSTABLE_OFFSET_COMMIT:
                        unstable = True
                        continue
                    raise StartError(f"could not list the committed positions of group "
                                     f"'{group}' on {tp.topic}[{tp.partition}]: {tp.error}")
                if tp.offset >= 0:
                    out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
            if not unstable:
                return out
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if not (isinstance(err, KafkaError) and err.code() in (
                    KafkaError.UNSTABLE_OFFSET_COMMIT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE)):
                raise StartError(f"could not list the committed positions of group '{group}': "
                                 f"{exc}; restore connectivity or grant Describe on the group, "
                                 "then retry") from exc
        if time.monotonic() > deadline:
            raise StartRetryableError(
                f"the committed positions of group '{group}' stayed unstable (a transaction "
                f"was committing) for {STABLE_DEADLINE_S:g} s"
            )
        sleep(STABLE_RETRY_S)


def list_offsets(
    admin: AdminClient, tps: Sequence[TopicPartition], latest: bool
) -> dict[tuple[str, int], int]:
    if not tps:
        return {}
    spec = OffsetSpec.latest() if latest else OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    try:
        futures = admin.list_offsets(
            {TopicPartition(t.topic, t.partition): spec for t in tps},
            isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=ADMIN_TIMEOUT_S,
        )
        what = f"listing the {'latest' if latest else 'earliest'} positions"
        return {(tp.topic, tp.partition): int(answer(f, f"{what} of {tp.topic}-{tp.partition}")
                                              .offset) for tp, f in futures.items()}
    except KafkaException as exc:
        which = "latest" if latest else "earliest"
        raise StartError(f"could not list the {which} positions of "
                         f"{sorted({t.topic for t in tps})}: {exc}") from exc
