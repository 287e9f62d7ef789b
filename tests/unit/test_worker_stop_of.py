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


def test_a_raw_kafka_acl_error_is_a_refusal_and_its_stop_names_the_application() -> None:
    """An ACL's Kafka error that reached the verdict unmapped (not through
    ``map_kafka_errors``) stops as the refusal it is, not as a worker error, and the
    stop's detail is completed with the worker's application id as a mapped one's is."""
    from workers.verdicts import ending

    class _Worker:
        app_id = "acl-app-p"
        task = 0
        member_fenced = False
        txn = None

        def successor_member(self, wait_s: float) -> str | None:
            return None

    denied = KafkaException(KafkaError(KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                                       "Transactional Id authorization failed", fatal=True))
    stop = stop_of(denied)
    assert stop.kind is StopKind.REFUSAL and stop.reason is Reason.SUBSTRATE_MISCONFIGURED, stop
    assert not (stop.detail or "").startswith("worker error"), stop.detail
    ended = ending(denied, _Worker())  # type: ignore[arg-type]
    assert ended.kind is StopKind.REFUSAL, ended
    assert "acl-app-p-task-" in (ended.detail or ""), ended.detail
