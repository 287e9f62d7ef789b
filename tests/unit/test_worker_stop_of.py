"""How the worker classifies what stopped it (``workers.verdicts.stop_of``), without a broker.

The stop kind comes from the exception's type and the Kafka error it carries,
never from message text (docs/operations.md, "Supervision": classified by a kind).
"""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from parsley import ParsleyFailClosedError, Reason
from workers.protocol import StopKind
from workers.verdicts import stop_of

FENCED = KafkaError(KafkaError._FENCED, "transactional producer fenced by newer producer instance",
                    fatal=True)


def _raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as exc:
            raise outer from exc
    except BaseException as caught:
        return caught


def test_a_kafka_error_beneath_a_callback_systemerror_is_what_is_reported() -> None:
    # confluent-kafka's flush raises this when the delivery callback runs while the
    # client's own fatal error is pending (seen in CI on the fencing test).
    exc = _raised_from(
        SystemError("<function on_delivery> returned a result with an exception set"),
        KafkaException(FENCED))
    stop = stop_of(exc)
    assert stop.kind is StopKind.FATAL and stop.reason is None
    assert "fenced" in (stop.detail or "").lower(), stop.detail
    assert "SystemError" not in (stop.detail or ""), stop.detail


def test_a_bare_kafka_exception_is_classified_the_same_way() -> None:
    stop = stop_of(KafkaException(FENCED))
    assert stop.kind is StopKind.FATAL and "fenced" in (stop.detail or "").lower()


def test_a_refusal_anywhere_on_the_chain_wins() -> None:
    refusal = ParsleyFailClosedError(Reason.UNDECODABLE_METADATA, "x-0@1: truncated causes header")
    stop = stop_of(_raised_from(RuntimeError("wrapped"), refusal))
    assert stop.kind is StopKind.REFUSAL and stop.reason is Reason.UNDECODABLE_METADATA


def test_an_unclassified_exception_is_a_worker_bug_reported_fatal() -> None:
    stop = stop_of(ValueError("boom"))
    assert stop.kind is StopKind.FATAL and stop.detail == "worker error ValueError: boom"
