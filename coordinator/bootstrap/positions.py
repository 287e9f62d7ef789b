"""Bootstrap step 3 (positions): committed read positions, ORDERING_STATE_LOST, pre-commits.

The rules are pure (:func:`initial_position` here; :func:`lost_positions`,
:func:`ordering_state_lost` and the foreign-positions rule in
:mod:`workers.positions`, shared with the worker's rebuilds); the Kafka calls
that feed them (:func:`committed_positions`, :func:`list_offsets`) are kept apart, and
:func:`override_foreign_positions` joins the two.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence

from confluent_kafka import (
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
from workers.admin import (
    COORDINATOR_REQUEST_TIMEOUT_S,
    OffsetsStayedUnstable,
    PartitionOffsetError,
    stable_committed_offsets,
)
from workers.authorization import Grant
from workers.kafka_errors import topic_authorization_failed
from workers.positions import (
    ForeignCommit,
    foreign_position_warning,
    foreign_positions,
    lost_positions,
    ordering_state_lost,
)

__all__ = [
    "ForeignCommit",
    "committed_positions",
    "initial_position",
    "list_offsets",
    "lost_positions",
    "ordering_state_lost",
    "override_foreign_positions",
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
            request_timeout_s=COORDINATOR_REQUEST_TIMEOUT_S,  # our bound is answer_s
            answer_s=ADMIN_TIMEOUT_S + ANSWER_MARGIN_S,
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


def override_foreign_positions(
    admin: AdminClient,
    app_id: str,
    committed: Mapping[tuple[str, int], tuple[int, str]],
    covered: Mapping[tuple[str, int], int | None],
    named: Collection[str],
) -> dict[tuple[str, int], int]:
    """The positions that replace commits Parsley did not make, each logged as a WARNING.

    A committed position with metadata other than ``parsley.task`` or
    ``parsley.bootstrap`` over ordering state (:func:`workers.positions.foreign_positions`)
    was made by something else in the group: a ``kafka-console-consumer --group
    <app-id>``, or ``kafka-consumer-groups --reset-offsets``. The state records how far
    the process fed each channel (its coverage, committed in the same transaction as the
    process's own positions), so the start resumes there, exactly as it would with no
    commit at all (:func:`initial_position` with prior state: coverage + 1; 0 for a
    channel the state names but never covered; the log start for a topic it never
    named). Forward, the records the foreign commit skipped are then delivered once;
    backward (a rewind), the records it would re-read are ones the engine drops as
    replays anyway. A foreign commit over no state is ``ORDERING_STATE_LOST``'s
    (:func:`lost_positions`), decided before this runs. Rules: docs/failing-closed.md,
    "Read positions"; docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``.

    Args:
        admin: for the log start of a topic the state never named.
        app_id: the application id (the group), named in the warnings.
        committed: ``{(topic, partition): (offset, metadata)}``, committed only.
        covered: ``{(topic, partition): coverage}`` for every channel of a changelog
            partition that holds state (``None``: never covered).
        named: the topic names the ordering state binds.

    Returns:
        ``{(topic, partition): offset}`` to commit with ``parsley.bootstrap``, one per
        foreign commit that differs from it; empty when there is none.

    Raises:
        StartError: a log start could not be listed.
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a coverage
            outside ``0..FED_TO_END`` (:func:`initial_position`).
    """
    found = foreign_positions(committed, covered)
    unnamed = [TopicPartition(f.topic, f.partition) for f in found
               if f.covered is None and f.topic not in named]
    earliest = list_offsets(admin, unnamed, latest=False)
    out: dict[tuple[str, int], int] = {}
    for f in found:
        key = (f.topic, f.partition)
        start = earliest.get(key, 0)
        resume = initial_position(True, f.covered, f.topic in named, InitialPosition.EARLIEST,
                                  start, start, where=f"{f.topic}-{f.partition}")
        if resume == f.committed:
            log.info("%s: %s-%d's committed position %d (commit metadata %r) was not made by "
                     "Parsley but is where the ordering state resumes; kept", app_id,
                     f.topic, f.partition, f.committed, f.metadata)
            continue
        log.warning("%s: %s", app_id, foreign_position_warning(f, resume, app_id))
        out[key] = resume
    return out
