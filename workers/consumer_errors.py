"""What the worker does with an error event ``consume`` returned, judged by its code.

An offset reset is refused (:func:`workers.offsets.resolve_offset_reset` tells a discarded
position from a missing one), a partition EOF is ignored, a fenced or failed static member
stops the task, a read the ACLs refused is a refusal naming the grant, a received topic
missing or unreadable is judged by the deletion check first, and anything else is retried
by librdkafka itself (docs/failing-closed.md, "Read positions"; docs/operations.md, "Fenced:
a successor or a timeout", "Production clusters"). It imports nothing of :mod:`workers.main`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import Consumer, KafkaError

from workers.authorization import Grant
from workers.calls import call
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    authorization_failed,
    classify,
    offset_reset,
    partition_eof,
    stop_kind,
    to_exception,
    topic_missing_or_unreadable,
)
from workers.offsets import resolve_offset_reset
from workers.protocol import StopKind

__all__ = ["consumer_error"]

log = logging.getLogger("parsley.worker")


def consumer_error(err: KafkaError, msg: Any, *, consumer: Consumer | None,
                   expected: Collection[tuple[str, int]], group_id: str,
                   on_fenced: Callable[[], None], on_missing: Callable[[], bool]) -> None:
    """Handle the error event ``msg`` (its error ``err``) of the task's main consumer.

    Args:
        consumer: the main consumer (the offset reset check reads through it).
        expected: the task's partitions (the one checked when the event names none).
        group_id: the task's group.
        on_fenced: called before the stop for a fenced or failed static member.
        on_missing: the deletion check, for a received topic missing or unreadable:
            returns ``True`` when it settled a deletion (the check's grace decides the stop).

    Raises:
        ParsleyFailClosedError: the offset reset's refusal; the deletion check's; a read
            or a group call the cluster's ACLs refused (``SUBSTRATE_MISCONFIGURED``, naming
            Read on the topic or the group: :mod:`workers.authorization`).
        SubstrateError: the member fenced or failed (FATAL), a received topic missing or
            unreadable (``RESTART_REQUIRED``: only a restart re-resolves it).
    """
    if offset_reset(err):
        topic, partition = msg.topic(), msg.partition()
        if topic is None or partition is None or partition < 0:
            topic, partition = sorted(expected)[0]
        assert consumer is not None
        refusal = call("offset reset check", resolve_offset_reset, consumer, topic, partition,
                       group_id=group_id, timeout_s=15.0)
        raise refusal
    if partition_eof(err):
        return
    if authorization_failed(err):
        topic = msg.topic()
        grant = Grant("Group", group_id, ("Read",)) if err.code() != \
            KafkaError.TOPIC_AUTHORIZATION_FAILED else Grant("Topic", topic or None, ("Read",))
        raise to_exception(err, "the task's consumer", grant=grant,
                           candidates=() if topic else tuple(sorted({t for t, _ in expected})))
    verdict = classify(err)  # a fenced static member: _FATAL, fatal() false -> FATAL
    if stop_kind(verdict) is StopKind.FATAL:
        on_fenced()
        raise SubstrateError(verdict.kind, f"the task's group member was fenced or failed: "
                             f"{verdict.name}: {verdict.text}", err.code())
    if topic_missing_or_unreadable(err):
        if on_missing():
            return  # settled: the check's grace decides the stop
        raise SubstrateError(
            ErrorKind.RESTART_REQUIRED,
            f"a received topic is missing or unreadable ({err.name()}: {err.str()}); "
            "restart the process once the topic is restored (the start re-resolves it)",
            err.code())
    # Transient fetch/connection errors: librdkafka retries them itself.
    log.debug("consumer error (retried by the client): %s", err)
