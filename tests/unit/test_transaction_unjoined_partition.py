"""``TaskTransaction.commit`` when a partition of the transaction's records could not join
it for want of Write, and ``send_offsets_to_transaction`` fails first: that call's
TOPIC_AUTHORIZATION_FAILED names no topic, the purged records' reports do, and the refusal
names those candidates as a flush's failure would (docs/operations.md, "ACLs"; seen once
in CI, where the ACL test's revoked changelog Write came back as ``Topic '?'``)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from tests.delivered import DeliveredRecord
from workers.authorization import NotAuthorized
from workers.transaction import TaskTransaction

AUTH = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                  "Failed to add partition(s) to transaction", txn_requires_abort=True)
READ = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                  "Failed to commit offsets to transaction on broker b1: "
                  "in[0](Broker: Topic authorization failed)", txn_requires_abort=True)


class _Producer:
    """Queues produced records; once ``send_offsets_to_transaction`` has failed the
    transaction, ``begin_transaction`` answers its error and ``poll`` purges the queue
    (``purge_reports`` False: the reports never come)."""

    def __init__(self, purge_reports: bool, error: KafkaError) -> None:
        self.purge_reports = purge_reports
        self.error = error
        self.queued: list[tuple[Any, str]] = []
        self.failed: KafkaError | None = None

    def begin_transaction(self) -> None:
        if self.failed is not None:
            raise KafkaException(self.failed)

    def produce(self, topic: str, *, on_delivery: Any, **kwargs: Any) -> None:
        self.queued.append((on_delivery, topic))

    def send_offsets_to_transaction(self, *args: Any) -> None:
        self.failed = self.error
        raise KafkaException(self.error)

    def poll(self, timeout: float = 0) -> int:
        if not self.purge_reports or self.failed is None:
            return 0
        served, self.queued = self.queued, []
        for on_delivery, topic in served:
            purged = KafkaError(KafkaError._PURGE_QUEUE, "Purged in queue")
            on_delivery(purged, DeliveredRecord(topic))
        return len(served)

    def __len__(self) -> int:
        return len(self.queued)

    def flush(self, timeout: float) -> int:
        return 0


def _commit(purge_reports: bool, error: KafkaError = AUTH) -> NotAuthorized:
    producer = _Producer(purge_reports, error)
    txn = TaskTransaction(producer)  # type: ignore[arg-type]
    txn.begin()
    txn.send("out", b"k", b"v", (), 0)
    txn.send("relay-counts-changelog", b"k", b"1", (), 0)
    with pytest.raises(NotAuthorized) as info:
        txn.commit({("in", 0): 5}, object())
    return info.value


def test_the_purged_records_name_the_topics_the_refusal_may_mean() -> None:
    refused = _commit(purge_reports=True)
    assert refused.candidates == ("out", "relay-counts-changelog")
    assert "lacks Write on one of Topic 'out', 'relay-counts-changelog'" in refused.detail
    assert "'?'" not in refused.detail


def test_without_purge_reports_the_call_s_own_refusal_stands() -> None:
    refused = _commit(purge_reports=False)
    assert refused.grant.name is None and refused.candidates == ()
    assert "sending the read positions to the transaction" in refused.detail


def test_an_offset_commit_refused_for_want_of_read_keeps_its_own_words() -> None:
    # The same code from TxnOffsetCommit means Read on an input topic, not Write on an
    # output: the purged records must not be blamed.
    refused = _commit(purge_reports=True, error=READ)
    assert refused.grant.name is None and refused.candidates == ()
    assert "in[0](Broker: Topic authorization failed)" in refused.detail
    assert "lacks Write" not in refused.detail
