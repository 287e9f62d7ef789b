"""A fence the client raises as some other exception is still judged a fence.

After a producer's fatal error (``_FENCED``: a newer producer of the task's
transactional id), confluent-kafka leaves the error pending while the call goes on
serving callbacks, and the next callback can replace it: a CI run saw a zombie worker's
``flush`` raise ``AttributeError: '_TaskAdapter' object has no attribute 'log'``, the
worker stopped FATAL as a worker bug, and its coordinator, thawed after its task moved to
a peer, stopped its process (exit 4) where the fence was the task moving
(docs/operations.md, "Fenced: a successor or a timeout"). The worker now asks the
producer for the fatal error it holds (:meth:`workers.transaction.TaskTransaction.fatal_error`)
before it judges an exception that names nothing (:func:`workers.verdicts.unmasked`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Producer

from coordinator.runtime.supervisor.exits import SUCCESSOR_FENCED
from devtools.kafka_support import CreateTopic
from workers.client_log import with_task_logger
from workers.kafka_config import producer_config
from workers.kafka_errors import ErrorKind, classify
from workers.protocol import StopKind
from workers.transaction import TaskTransaction
from workers.verdicts import ending, in_place_verdict, names_nothing, unmasked

MASKED = AttributeError("'_TaskAdapter' object has no attribute 'log'")
"""What a fenced producer's ``flush`` raised in the CI run."""


@dataclass
class _Worker:
    """What the fence verdicts read of a worker (``workers.verdicts.Fenced``)."""

    txn: TaskTransaction
    successor: str | None
    app_id: str = "masked"
    task: int = 0
    member_fenced: bool = False

    def successor_member(self, wait_s: float) -> str | None:
        return self.successor


def _producer(bootstrap: str, prefix: str) -> Producer:
    """Task 0's transactional producer of ``prefix``, logging through the task's adapter."""
    return Producer(with_task_logger(producer_config(bootstrap, prefix, "p", 0, {},
                                                     task_count=1), prefix, 0))


def _initialised(bootstrap: str, create_topic: CreateTopic) -> tuple[str, str, TaskTransaction]:
    """A fresh topic, a fresh prefix and task 0's initialised transaction account."""
    topic = create_topic(f"masked-{uuid.uuid4().hex[:8]}").name
    prefix = f"masked-{uuid.uuid4().hex[:8]}"
    txn = TaskTransaction(_producer(bootstrap, prefix), timeout_s=30.0)
    txn.init()
    return topic, prefix, txn


def test_a_fence_raised_as_another_exception_is_judged_a_fence(
    kafka_bootstrap: str, create_topic: CreateTopic,
) -> None:
    topic, prefix, txn = _initialised(kafka_bootstrap, create_topic)
    txn.begin()
    txn.send(topic, b"k", b"before", (), 0)
    assert txn.producer.flush(30) == 0
    assert txn.fatal_error() is None, "a producer in a healthy transaction holds nothing"

    successor = TaskTransaction(_producer(kafka_bootstrap, prefix), timeout_s=30.0)
    successor.init()  # a newer producer of the task: the first one is fenced

    raised: Exception | None = None
    try:
        for i in range(50):
            txn.send(topic, b"k", b"after-%d" % i, (), 0)
        txn.producer.flush(30)
    except Exception as exc:  # what the client raises for the fence varies
        raised = exc
    held = txn.fatal_error()
    assert held is not None, "a fenced producer holds its fatal error"
    assert held.__cause__ is not None and held.__cause__.__traceback__ is None
    assert classify(held).kind is ErrorKind.FENCED, held

    # Whatever the client raised (the fence itself, a SystemError with it as cause, or an
    # exception that names nothing), the worker judges the fence.
    for seen in filter(None, (raised, MASKED)):
        assert classify(unmasked(seen, _Worker(txn, None))).kind is ErrorKind.FENCED, seen

    assert names_nothing(MASKED)
    # A live successor: FATAL, told as the task moving, which the coordinator reads as such.
    owned = _Worker(txn, "member-2")
    verdict = ending(unmasked(MASKED, owned), owned)
    assert verdict.kind is StopKind.FATAL, verdict
    assert verdict.detail is not None and verdict.detail.startswith(SUCCESSOR_FENCED), verdict
    in_place = in_place_verdict(unmasked(MASKED, owned), owned)
    assert in_place is not None and in_place.detail is not None \
        and in_place.detail.startswith(SUCCESSOR_FENCED), in_place
    # No successor: recovered in place with a fresh producer, never judged a worker bug.
    assert in_place_verdict(unmasked(MASKED, _Worker(txn, None)), _Worker(txn, None)) is None


def test_asking_a_producer_what_it_holds_changes_nothing(
    kafka_bootstrap: str, create_topic: CreateTopic,
) -> None:
    topic, prefix, txn = _initialised(kafka_bootstrap, create_topic)
    # Never initialised: not asked at all (a first init_transactions would fence `txn`).
    other = TaskTransaction(_producer(kafka_bootstrap, prefix), timeout_s=30.0)
    assert other.fatal_error() is None

    assert txn.fatal_error() is None  # no transaction open
    txn.begin()
    txn.send(topic, b"k", b"v", (), 0)
    assert txn.fatal_error() is None  # one open, a record in it
    assert txn.producer.flush(30) == 0
    assert txn.fatal_error() is None
    txn.producer.commit_transaction(30)  # still the task's producer, its transaction whole
    # A healthy producer: an exception that names nothing stays a worker bug.
    worker = _Worker(txn, "member-2")
    assert unmasked(MASKED, worker) is MASKED
    verdict = ending(MASKED, worker)
    assert verdict.kind is StopKind.FATAL, verdict
    assert verdict.detail == f"worker error AttributeError: {MASKED}", verdict
