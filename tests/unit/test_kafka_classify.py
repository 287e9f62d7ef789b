"""The one KafkaError classifier and the config builders, without a broker.

``KafkaError`` objects are built with their flags as librdkafka sets them;
the broker-side counterparts (real codes from a real broker) are in
tests/integration/test_worker_kafka.py.
"""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import KafkaError, KafkaException

from parsley.declarations import group_instance_id
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.kafka_config import (
    OWNED_PROPERTIES,
    admin_config,
    consumer_config,
    producer_config,
    restore_consumer_config,
)
from workers.kafka_errors import (
    ErrorKind,
    SubstrateError,
    classify,
    fatal,
    map_kafka_errors,
    retriable,
    stop_kind,
    to_exception,
    txn_requires_abort,
)
from workers.ledger import DeliveryLedger
from workers.offsets import OffsetResetVerdict, offset_reset_refusal, offset_reset_verdict
from workers.protocol import StopKind

BS = "127.0.0.1:9092"


# -- classification -------------------------------------------------------------


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (KafkaError(KafkaError._FENCED, "fenced", fatal=True), ErrorKind.FENCED),
        (KafkaError(KafkaError.PRODUCER_FENCED, "x"), ErrorKind.FENCED),
        (KafkaError(KafkaError.INVALID_PRODUCER_EPOCH, "x"), ErrorKind.FENCED),
        (KafkaError(KafkaError.FENCED_INSTANCE_ID, "x", fatal=True), ErrorKind.FENCED),
        (KafkaError(KafkaError._FATAL, "x", fatal=True), ErrorKind.FATAL),
        (KafkaError(KafkaError._TIMED_OUT, "x", retriable=True), ErrorKind.RETRIABLE),
        (
            KafkaError(KafkaError._MSG_TIMED_OUT, "x", txn_requires_abort=True),
            ErrorKind.ABORTABLE,
        ),
        (KafkaError(KafkaError._TRANSPORT, "x"), ErrorKind.SUBSTRATE_TRANSIENT),
        (KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "x"), ErrorKind.SUBSTRATE_TRANSIENT),
        (KafkaError(KafkaError._AUTO_OFFSET_RESET, "x"), ErrorKind.OFFSET_RESET),
        (KafkaError(KafkaError.OFFSET_OUT_OF_RANGE, "x"), ErrorKind.OFFSET_RESET),
    ],
)
def test_kinds(err: KafkaError, kind: ErrorKind) -> None:
    assert classify(err).kind is kind, f"{err.name()} classified as {classify(err).kind}"
    assert classify(KafkaException(err)).kind is kind, "a KafkaException must classify as its error"
    assert classify(err).reason is None


@pytest.mark.parametrize("code", [KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE])
def test_record_too_large_is_a_refusal_even_when_abortable(code: int) -> None:
    err = KafkaError(code, "Broker: Message size too large", txn_requires_abort=True)
    c = classify(KafkaException(err))
    assert c.kind is ErrorKind.REFUSAL
    assert c.reason is Reason.SUBSTRATE_MISCONFIGURED
    exc = to_exception(err, "producing to t[0]")
    assert isinstance(exc, ParsleyFailClosedError)
    assert exc.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert exc.detail.startswith("a record exceeded a size limit")
    assert "producing to t[0]" in exc.detail


def test_flag_predicates() -> None:
    e = KafkaError(KafkaError._STATE, "x", fatal=True, retriable=False, txn_requires_abort=True)
    assert fatal(e) and fatal(KafkaException(e))
    assert txn_requires_abort(KafkaException(e))
    assert not retriable(e)
    assert not fatal(ValueError("x"))
    wrapped = RuntimeError("outer")
    wrapped.__cause__ = KafkaException(e)
    assert fatal(wrapped), "the flag must be found along the cause chain"


def test_refusals_and_foreign_exceptions() -> None:
    refusal = ParsleyFailClosedError(Reason.OUT_OF_ORDER_FEED, "ch@3: fed after 5")
    outer = RuntimeError("handler frame")
    outer.__cause__ = refusal
    c = classify(outer)
    assert (c.kind, c.reason) == (ErrorKind.REFUSAL, Reason.OUT_OF_ORDER_FEED)
    assert to_exception(outer) is refusal
    boom = ValueError("application bug")
    assert classify(boom).kind is ErrorKind.UNCLASSIFIED
    assert to_exception(boom) is boom


def test_map_kafka_errors_reraises_from_original() -> None:
    err = KafkaError(KafkaError._MSG_TIMED_OUT, "Local: Message timed out", txn_requires_abort=True)
    with pytest.raises(SubstrateError) as info, map_kafka_errors("committing task 3"):
        raise KafkaException(err)
    assert info.value.kind is ErrorKind.ABORTABLE
    assert "committing task 3" in info.value.detail
    assert isinstance(info.value.__cause__, KafkaException)
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.kind, copy.detail, copy.code) == (
        ErrorKind.ABORTABLE, info.value.detail, KafkaError._MSG_TIMED_OUT
    )
    with pytest.raises(ValueError):
        SubstrateError(ErrorKind.REFUSAL, "no")


# -- offset reset decision -------------------------------------------------------


@pytest.mark.parametrize(
    ("committed", "start", "end", "verdict"),
    [
        (None, 0, 10, OffsetResetVerdict.NO_COMMITTED_OFFSET),
        (-1001, 5, 10, OffsetResetVerdict.NO_COMMITTED_OFFSET),
        (3, 5, 10, OffsetResetVerdict.DISCARDED_UNREAD),
        (0, 1, 1, OffsetResetVerdict.DISCARDED_UNREAD),
        (5, 5, 10, OffsetResetVerdict.WITHIN_LOG),
        (10, 5, 10, OffsetResetVerdict.WITHIN_LOG),
        (11, 0, 10, OffsetResetVerdict.BEYOND_LOG_END),
    ],
)
def test_offset_reset_verdict(
    committed: int | None, start: int, end: int, verdict: OffsetResetVerdict
) -> None:
    assert offset_reset_verdict(committed, start, end) is verdict


def test_offset_reset_refusal_detail_names_the_gap() -> None:
    exc = offset_reset_refusal("orders", 2, 3, 7, 12, group_id="app-p")
    assert isinstance(exc, ParsleyFailClosedError)
    assert exc.reason is Reason.POSITIONS_DISCARDED_UNREAD
    assert "orders-2" in exc.detail and "3..6" in exc.detail and "app-p" in exc.detail
    missing = offset_reset_refusal("orders", 2, None, 7, 12)
    assert isinstance(missing, SubstrateError)
    # Only a restart's bootstrap pre-commits a missing position: never recovered in place.
    assert missing.kind is ErrorKind.RESTART_REQUIRED
    assert stop_kind(missing) is StopKind.SUBSTRATE


# -- delivery ledger --------------------------------------------------------------


class _Msg:
    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 4


def test_delivery_ledger() -> None:
    ledger = DeliveryLedger()
    ledger.sent(2)
    ledger.on_delivery(None, _Msg())  # type: ignore[arg-type]
    with pytest.raises(SubstrateError, match="1 of 2"):
        ledger.check("commit")
    ledger.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too big"), _Msg())  # type: ignore[arg-type]
    with pytest.raises(ParsleyFailClosedError) as info:
        ledger.check("commit")
    assert info.value.reason is Reason.SUBSTRATE_MISCONFIGURED and "t[4]" in info.value.detail
    ledger.reset()
    ledger.sent()
    ledger.on_delivery(None, _Msg())  # type: ignore[arg-type]
    ledger.check()


def test_delivery_ledger_with_error_only_reports_trusts_an_empty_queue_not_an_error() -> None:
    # delivery.report.only.error: delivered records are never reported; an empty queue
    # (flush() returned 0) says every record without an error report was delivered.
    ledger = DeliveryLedger()
    ledger.sent(3)
    with pytest.raises(SubstrateError, match="3 of 3"):
        ledger.check("commit")  # the queue not known empty: nothing counts as delivered
    ledger.check("commit", queue_empty=True)
    ledger.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too big"), _Msg())  # type: ignore[arg-type]
    with pytest.raises(ParsleyFailClosedError) as info:
        ledger.check("commit", queue_empty=True)
    assert info.value.reason is Reason.SUBSTRATE_MISCONFIGURED and "t[4]" in info.value.detail


def test_the_task_producer_reports_failed_deliveries_only() -> None:
    from workers.kafka_config import producer_config

    config = producer_config("localhost:9092", "app", "proc", 0)
    assert config["delivery.report.only.error"] is True
    assert producer_config("localhost:9092", "app", "proc", 0, {
        "producer.delivery.report.only.error": False})["delivery.report.only.error"] is False


def test_delivery_ledger_reports_the_first_error_that_is_not_a_purge() -> None:
    # An oversize record in a transaction: the other records' purge reports may come first.
    ledger = DeliveryLedger()
    ledger.sent(3)
    ledger.on_delivery(KafkaError(KafkaError._PURGE_QUEUE, "purged"), _Msg())  # type: ignore[arg-type]
    assert ledger.any_error and ledger.first_error is None and ledger.unreported == 2
    ledger.on_delivery(KafkaError(KafkaError._PURGE_INFLIGHT, "purged"), _Msg())  # type: ignore[arg-type]
    ledger.on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too big"), _Msg())  # type: ignore[arg-type]
    assert ledger.unreported == 0 and ledger.failed == 3
    with pytest.raises(ParsleyFailClosedError) as info:
        ledger.check("commit")
    assert info.value.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert "MSG_SIZE_TOO_LARGE" in info.value.detail
    # Purges alone are still a failure (nothing explains them better).
    ledger.reset()
    ledger.sent()
    ledger.on_delivery(KafkaError(KafkaError._PURGE_QUEUE, "purged"), _Msg())  # type: ignore[arg-type]
    with pytest.raises(SubstrateError) as sub:
        ledger.check("commit")
    assert "_PURGE_QUEUE" in sub.value.detail


# -- configs ------------------------------------------------------------------------


def test_consumer_config_owned_settings() -> None:
    c = consumer_config(BS, "pre", "proc", 7, {"fetch.max.bytes": 1 << 20, "producer.linger.ms": 1})
    assert c["group.id"] == "pre-proc"
    assert c["group.instance.id"] == "pre-proc-task-007" == group_instance_id("pre", "proc", 7)
    assert c["partition.assignment.strategy"] == "range"
    assert c["isolation.level"] == "read_committed"
    assert c["enable.auto.commit"] is False
    assert c["auto.offset.reset"] == "error"
    assert c["session.timeout.ms"] <= 10_000
    assert c["fetch.max.bytes"] == 1 << 20
    assert "linger.ms" not in c and "producer.linger.ms" not in c


def test_instance_ids_sort_in_task_order() -> None:
    ids = [consumer_config(BS, "a", "p", i, task_count=1500)["group.instance.id"]
           for i in range(0, 1500, 7)]
    assert ids == sorted(ids)


def test_producer_config_owned_settings() -> None:
    p = producer_config(BS, "pre", "proc", 12, {"producer.linger.ms": 1, "consumer.x": 2})
    assert p["transactional.id"] == "pre-proc-task-012"
    assert p["partitioner"] == "murmur2_random"
    assert p["transaction.timeout.ms"] == 10_000
    assert p["enable.idempotence"] is True
    assert p["linger.ms"] == 1 and "x" not in p


def test_restore_consumer_config() -> None:
    r = restore_consumer_config(BS, "pre", "proc", 0)
    assert r["isolation.level"] == "read_committed"
    # It never joins or commits (assign-only, no auto commit); librdkafka asks for its
    # group's coordinator all the same, which ACLs allow on the process's own group only
    # (docs/operations.md, "ACLs").
    assert r["group.id"] == "pre-proc"
    assert "group.instance.id" not in r and r["client.id"] == "pre-proc-task-000.restore"
    assert r["enable.auto.commit"] is False
    # A bounded prefetch (the worker keeps this consumer for its life), refilled at once.
    assert r["queued.max.messages.kbytes"] == 16_384 and r["fetch.queue.backoff.ms"] == 10
    bigger = restore_consumer_config(BS, "pre", "proc", 0,
                                     {"consumer.queued.max.messages.kbytes": 65_536})
    assert bigger["queued.max.messages.kbytes"] == 65_536, "a user's setting wins"
    assert admin_config(BS, {"admin.request.timeout.ms": 5})["request.timeout.ms"] == 5


@pytest.mark.parametrize("prop", sorted(OWNED_PROPERTIES))
@pytest.mark.parametrize("prefix", ["", "consumer.", "producer.", "admin."])
def test_owned_properties_refused(prop: str, prefix: str) -> None:
    key = prefix + prop
    for build in (
        lambda: consumer_config(BS, "a", "p", 0, {key: "x"}),
        lambda: producer_config(BS, "a", "p", 0, {key: "x"}),
        lambda: restore_consumer_config(BS, "a", "p", 0, {key: "x"}),
        lambda: admin_config(BS, {key: "x"}),
    ):
        with pytest.raises(ValueError) as info:
            build()
        assert repr(key) in str(info.value), f"the error must name {key!r}: {info.value}"


def test_owned_properties_refused_case_and_nested() -> None:
    with pytest.raises(ValueError, match=r"Group\.Id"):
        consumer_config(BS, "a", "p", 0, {"Group.Id": "other"})
    with pytest.raises(ValueError, match=r"auto\.offset\.reset"):
        nested = {"default.topic.config": {"auto.offset.reset": "earliest"}}
        consumer_config(BS, "a", "p", 0, nested)


def test_blank_arguments_refused() -> None:
    with pytest.raises(ValueError):
        consumer_config("", "a", "p", 0)
    with pytest.raises(ValueError):
        producer_config(BS, " ", "p", 0)
    with pytest.raises(ValueError):
        consumer_config(BS, "a", "p", -1)


def test_fenced_static_member_event_is_fatal_though_its_flag_is_not() -> None:
    # What librdkafka hands the consumer when a newer worker of the task joins with the
    # same group.instance.id: code _FATAL on an event whose fatal() is False.
    err = KafkaError(KafkaError._FATAL, "Static consumer fenced by other consumer with same "
                     "group.instance.id", fatal=False)
    assert not err.fatal()
    assert classify(err).kind is ErrorKind.FATAL
    assert classify(KafkaException(err)).kind is ErrorKind.FATAL
    assert stop_kind(err) is StopKind.FATAL
    exc = to_exception(err, "consuming")
    assert isinstance(exc, SubstrateError) and exc.kind is ErrorKind.FATAL
    assert stop_kind(exc) is StopKind.FATAL
    # The rule is the code, not the text: an unflagged transport error stays transient.
    assert classify(KafkaError(KafkaError._TRANSPORT, "Static consumer fenced")).kind \
        is ErrorKind.SUBSTRATE_TRANSIENT


def test_stop_kinds() -> None:
    assert stop_kind(KafkaError(KafkaError._FENCED, "x", fatal=True)) is StopKind.FATAL
    assert stop_kind(KafkaError(KafkaError._FATAL, "x", fatal=True)) is StopKind.FATAL
    assert stop_kind(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "x")) is StopKind.REFUSAL
    assert stop_kind(KafkaError(KafkaError._TRANSPORT, "x")) is StopKind.SUBSTRATE
    assert stop_kind(SubstrateError(ErrorKind.SUBSTRATE_TRANSIENT, "stall")) is StopKind.SUBSTRATE
    assert stop_kind(ParsleyFailClosedError(Reason.TASK_WIDTH_CHANGED, "x")) is StopKind.REFUSAL
    assert stop_kind(ValueError("application")) is None
    assert all(
        stop_kind(SubstrateError(kind, "x")) is not None
        for kind in ErrorKind
        if kind not in (ErrorKind.REFUSAL, ErrorKind.UNCLASSIFIED)
    ), "every Kafka kind must map to a stop kind"
