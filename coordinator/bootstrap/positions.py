"""Bootstrap step 3 (positions): committed read positions, ORDERING_STATE_LOST, pre-commits.

The rules are pure (:func:`initial_position` here; :func:`lost_positions`,
:func:`ordering_state_lost` and the skipped-positions rule in
:mod:`workers.positions`, shared with the worker's rebuilds); the Kafka calls
that feed them (:func:`committed_positions`, :func:`list_offsets`,
:func:`first_record_between`) are kept apart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.bootstrap.clients import ANSWER_MARGIN_S, answer
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    STABLE_DEADLINE_S,
    STABLE_RETRY_S,
    StartError,
    StartRetryableError,
    log,
    not_authorized,
    refuse,
)
from parsley.declarations import InitialPosition
from parsley.engine.channel import FED_TO_END
from parsley.refusals import Reason
from workers.admin import OffsetsStayedUnstable, PartitionOffsetError, stable_committed_offsets
from workers.authorization import Grant
from workers.kafka_errors import partition_eof, topic_authorization_failed
from workers.positions import (
    ForeignCommit,
    Unaccounted,
    lost_positions,
    ordering_state_lost,
    skipped_offset,
    skipped_positions_refusal,
    unaccounted_positions,
)

__all__ = [
    "ForeignCommit",
    "committed_positions",
    "first_record_between",
    "initial_position",
    "list_offsets",
    "lost_positions",
    "ordering_state_lost",
    "refuse_skipped_positions",
]


def initial_position(
    prior_state: bool,
    covered: int | None,
    named: bool,
    declared: InitialPosition,
    earliest: int,
    latest: int,
    *,
    where: str = "the channel",
    source: str = "the ordering state",
) -> int:
    """The position the bootstrap pre-commits for a received partition without one (pure).

    The rule of docs/architecture.md, "The bootstrap", step 6, in order:

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
        where: the channel, as a refusal's detail names it (``<topic id>-<partition>``).
        source: where the coverage was read, for the detail (``<topic>-<p>, ordering
            changelog <changelog>[<p>]``).

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
            f"restored coverage names position {covered} on {where}, which no channel can "
            f"assign ({source}): a covered position is in 0..{FED_TO_END}, a non-negative "
            "offset or the fed-to-end sentinel",
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
    """Stable committed offsets: ``{(topic, partition): (offset, metadata)}``, committed only.

    :func:`workers.admin.stable_committed_offsets` under the bootstrap's rule: a coordinator
    not yet available is waited out too, for :data:`STABLE_DEADLINE_S`, logging once.

    Raises:
        StartError: the listing failed, or got no answer within the bound.
        StartRetryableError: the offsets stayed unstable for :data:`STABLE_DEADLINE_S`.
    """
    what = f"listing the committed positions of group '{group}'"

    def said() -> None:
        log.info("the committed positions of group '%s' are unstable: a transaction "
                 "carrying them is still open (a worker that died?); waiting up to "
                 "%g s for the broker to end it", group, STABLE_DEADLINE_S)

    try:
        return stable_committed_offsets(
            admin, group, tps, deadline_s=STABLE_DEADLINE_S, retry_s=STABLE_RETRY_S,
            request_timeout_s=ADMIN_TIMEOUT_S, answer_s=ADMIN_TIMEOUT_S + ANSWER_MARGIN_S,
            retry_coordinator_not_available=True, sleep=sleep, on_unstable=said)
    except TimeoutError as exc:
        raise StartError(f"{what}: no answer within {ADMIN_TIMEOUT_S + ANSWER_MARGIN_S:g} s "
                         "(the client may be wedged after a broker outage; the next attempt "
                         "uses a new one)") from exc
    except PartitionOffsetError as exc:
        tp = exc.partition
        refusal = not_authorized(tp.error, what, Grant("Topic", tp.topic, ("Read",)))
        if refusal is not None:
            raise refusal from None
        raise StartError(f"could not list the committed positions of group "
                         f"'{group}' on {tp.topic}[{tp.partition}]: {tp.error}") from None
    except KafkaException as exc:
        topics = tuple(sorted({tp.topic for tp in tps}))
        grant = Grant("Topic", None, ("Read",)) if topic_authorization_failed(exc) \
            else Grant("Group", group, ("Read",))
        refusal = not_authorized(exc, what, grant, topics)
        if refusal is not None:
            raise refusal from exc
        raise StartError(f"could not list the committed positions of group '{group}': "
                         f"{exc}; restore connectivity or grant Describe on the group, "
                         "then retry") from exc
    except OffsetsStayedUnstable as exc:
        raise StartRetryableError(
            f"the committed positions of group '{group}' stayed unstable for "
            f"{STABLE_DEADLINE_S:g} s: a transaction carrying them is still open (a worker "
            "that died, whose transaction the broker has not aborted yet, or a producer "
            "outside Parsley sending offsets for the group); retry the start"
        ) from exc


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
        topics = tuple(sorted({t.topic for t in tps}))
        refusal = not_authorized(exc, f"listing the {which} positions", Grant(
            "Topic", topics[0] if len(topics) == 1 else None, ("Read",)),
            topics if len(topics) > 1 else ())
        if refusal is not None:
            raise refusal from exc
        raise StartError(f"could not list the {which} positions of "
                         f"{sorted({t.topic for t in tps})}: {exc}") from exc


RANGE_READ_DEADLINE_S = 30.0
"""Bound on reading one channel's unaccounted range, s (our own deadline)."""


def first_record_between(
    consumer: Consumer, topic: str, partition: int, start: int, end: int,
    *, deadline_s: float = RANGE_READ_DEADLINE_S,
) -> int | None:
    """The offset of the first committed record in ``[start, end)``, or ``None``.

    Reads with ``consumer`` (assign-only, ``read_committed``,
    ``enable.partition.eof``: ``workers.kafka_config.restore_consumer_config``), so
    transaction markers and aborted records are skipped as the tasks skip
    them. ``start`` must be at or above the log start (the caller clamps it).

    Raises:
        StartError: the read failed, or reached neither a record, ``end``
            nor the partition's end within ``deadline_s``.
    """
    if start >= end:
        return None
    consumer.assign([TopicPartition(topic, partition, start)])
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(100, 0.5):
                err = msg.error()
                if err is not None:
                    if partition_eof(err):
                        return None
                    refusal = not_authorized(err, f"reading {topic}-{partition}",
                                             Grant("Topic", topic, ("Read",)))
                    if refusal is not None:
                        raise refusal
                    raise StartError(f"could not read {topic}-{partition} from offset {start} "
                                     f"to check its committed position: {err}")
                offset = msg.offset()
                assert offset is not None
                return offset if offset < end else None
            pos = consumer.position([TopicPartition(topic, partition)])[0].offset
            if pos >= end:
                return None
    except KafkaException as exc:
        raise StartError(f"could not read {topic}-{partition} from offset {start} to check "
                         f"its committed position: {exc}") from exc
    finally:
        consumer.unassign()
    raise StartError(f"reading {topic}-{partition} from offset {start} to {end} to check its "
                     f"committed position did not finish in {deadline_s:g} s")


def refuse_skipped_positions(
    admin: AdminClient,
    consumer: Consumer,
    app_id: str,
    committed: Mapping[tuple[str, int], tuple[int, str]],
    covered: Mapping[tuple[str, int], int | None],
) -> None:
    """Refuse a committed position beyond coverage + 1 over records Parsley never read.

    For every suspect of :func:`workers.positions.unaccounted_positions` (a
    commit neither the bootstrap nor a task made), reads
    ``[coverage + 1, committed)``: a committed record there was skipped without
    being read (a consumer outside Parsley committed in the group); a range
    reaching below the log start cannot be vouched for, and is refused too
    (:func:`workers.positions.skipped_offset`; docs/failing-closed.md,
    "Read positions").

    Raises:
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED``
            (:func:`workers.positions.skipped_positions_refusal`).
        StartError: a listing or a read failed.
    """
    suspects: list[Unaccounted] = unaccounted_positions(committed, covered)
    if not suspects:
        return
    earliest = list_offsets(admin, [TopicPartition(s.topic, s.partition) for s in suspects],
                            latest=False)
    for s in suspects:
        log_start = earliest[(s.topic, s.partition)]
        found = None
        if s.first_unread >= log_start:
            found = first_record_between(consumer, s.topic, s.partition, s.first_unread,
                                         s.committed)
        skipped = skipped_offset(s, log_start, found)
        if skipped is not None:
            raise skipped_positions_refusal(s, skipped, app_id)
