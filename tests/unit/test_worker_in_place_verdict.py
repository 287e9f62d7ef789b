"""Which faults a worker recovers from in place (workers.verdicts.in_place_verdict), pure:
the successor check is the fake's answer, not the group's."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from coordinator.runtime.supervisor.exits import SUCCESSOR_FENCED
from parsley.frame import HandlerFailure
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.calls import CallStalled
from workers.client_log import _TaskAdapter
from workers.kafka_errors import ErrorKind, SubstrateError
from workers.protocol import StopKind
from workers.task_timeout import TaskTimedOut
from workers.verdicts import Stop, ending, in_place_verdict, unmasked


class FakeTxn:
    """The producer's account; ``held`` is the fatal error its producer holds."""

    def __init__(self, held: SubstrateError | None = None) -> None:
        self.held = held
        self.asked = 0

    def fatal_error(self) -> SubstrateError | None:
        self.asked += 1
        return self.held


class FakeWorker:
    """What the fence verdicts read of a worker; ``successor`` is the group's answer."""

    def __init__(self, successor: str | None = None, held: SubstrateError | None = None
                 ) -> None:
        self.app_id = "app-p"
        self.task = 0
        self.member_fenced = False
        self.txn = FakeTxn(held)
        self.successor = successor
        self.asked = 0

    def successor_member(self, wait_s: float) -> str | None:
        self.asked += 1
        return self.successor


def _kafka(code: int, *, fatal: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, "x", fatal=fatal))


@pytest.mark.parametrize("exc", [
    CallStalled("send_offsets_to_transaction", 25.0),
    _kafka(KafkaError._TRANSPORT),
    _kafka(KafkaError._TIMED_OUT),
    _kafka(KafkaError.COORDINATOR_NOT_AVAILABLE),
    SubstrateError(ErrorKind.ABORTABLE, "abort"),
    SubstrateError(ErrorKind.SUBSTRATE_TRANSIENT, "changelog read stalled"),
], ids=lambda e: type(e).__name__ + ":" + str(getattr(e, "detail", e))[:30])
def test_faults_a_restart_would_cure_are_recovered_in_place(exc: BaseException) -> None:
    worker = FakeWorker()
    assert in_place_verdict(exc, worker) is None
    assert worker.asked == 0


@pytest.mark.parametrize("exc, kind", [
    (ParsleyFailClosedError(Reason.UNDECODABLE_METADATA, "x"), StopKind.REFUSAL),
    (SubstrateError(ErrorKind.RESTART_REQUIRED, "topic missing"), StopKind.SUBSTRATE),
    (SubstrateError(ErrorKind.OFFSET_RESET, "reset"), StopKind.SUBSTRATE),
    (ValueError("a worker bug"), StopKind.FATAL),
    (Stop(StopKind.CLEAN, None, None), StopKind.CLEAN),
], ids=["refusal", "restart-required", "offset-reset", "bug", "clean"])
def test_what_a_restart_alone_or_nothing_cures_stops(exc: BaseException, kind: StopKind) -> None:
    verdict = in_place_verdict(exc, FakeWorker())
    assert verdict is not None and verdict.kind is kind


def test_a_handler_failure_with_a_kafka_error_beneath_it_stops_as_an_application_failure() -> None:
    failure = HandlerFailure(0, "orders", 0, 3, "KafkaException: transport")
    failure.__cause__ = _kafka(KafkaError._TRANSPORT)
    verdict = in_place_verdict(failure, FakeWorker())
    assert verdict is not None and verdict.kind is StopKind.APPLICATION


@pytest.mark.parametrize("exc", [
    _kafka(KafkaError._FENCED, fatal=True),
    _kafka(KafkaError._FATAL, fatal=True),
], ids=["fenced", "fatal"])
def test_a_fence_is_recovered_unless_a_live_successor_owns_the_task(exc: BaseException) -> None:
    alone = FakeWorker(successor=None)
    assert in_place_verdict(exc, alone) is None
    assert alone.asked == 1
    owned = FakeWorker(successor="member-7")
    verdict = in_place_verdict(exc, owned)
    assert verdict is not None and verdict.kind is StopKind.FATAL
    assert "member member-7 of group app-p" in (verdict.detail or "")


def test_a_stop_already_weighed_is_not_weighed_again() -> None:
    worker = FakeWorker(successor="member-7")
    stop = Stop(StopKind.FATAL, None, "fenced by a live successor: ...")
    assert ending(stop, worker) is stop
    assert worker.asked == 0


def test_the_task_timeout_is_a_substrate_stop_not_one_more_fault() -> None:
    timed_out = TaskTimedOut("no progress for 300.1 s (task_timeout_ms=300000) ...")
    verdict = in_place_verdict(timed_out, FakeWorker())
    assert verdict is not None and verdict.kind is StopKind.SUBSTRATE
    assert verdict.detail == timed_out.detail, "not wrapped in another recovery's detail"


def test_an_exception_that_names_nothing_is_judged_by_the_fatal_error_the_producer_holds(
) -> None:
    masked = AttributeError("'_TaskAdapter' object has no attribute 'log'")
    fence = SubstrateError(ErrorKind.FENCED, "_FENCED: fenced by a newer producer")
    owned = FakeWorker(successor="member-7", held=fence)
    verdict = in_place_verdict(unmasked(masked, owned), owned)
    assert verdict is not None and verdict.kind is StopKind.FATAL
    assert (verdict.detail or "").startswith(SUCCESSOR_FENCED), verdict
    alone = FakeWorker(successor=None, held=fence)
    assert in_place_verdict(unmasked(masked, alone), alone) is None, \
        "a fence with no successor: recovered"
    judged = unmasked(masked, alone)
    assert judged is fence and fence.__context__ is masked
    # A producer that holds nothing: a worker bug, as it was.
    healthy = FakeWorker(successor="member-7")
    verdict = in_place_verdict(unmasked(masked, healthy), healthy)
    assert verdict is not None and verdict.kind is StopKind.FATAL
    assert verdict.detail == f"worker error AttributeError: {masked}"
    assert healthy.txn.asked == 1 and healthy.asked == 0
    # An exception that names something is never traded: the producer is not asked.
    named = FakeWorker(held=fence)
    assert unmasked(ValueError("x"), None).args == ("x",), "no worker: nothing to ask"
    for exc in (_kafka(KafkaError._TRANSPORT), HandlerFailure(0, "orders", 0, 3, "boom"),
                SubstrateError(ErrorKind.ABORTABLE, "abort")):
        assert unmasked(exc, named) is exc
    assert named.txn.asked == 0


def test_the_task_adapter_defines_log_on_its_own_class() -> None:
    """confluent-kafka looks ``log`` up with a fatal error pending: found on the class
    itself, the lookup does not clear it (workers/client_log.py, ``_TaskAdapter.log``)."""
    assert "log" in vars(_TaskAdapter)
