"""Retired clients (workers.clients.retire): a retired producer sends nothing more, and what
is retired is destroyed on the retiring thread, not on the worker's.

A producer retired by a recovery in place holds an abandoned transaction; what it still had
queued must not be sent once a broker is back (it would open a transaction no coordinator
ends). A real producer with nowhere to send keeps its message queued; retiring it empties its
queue, and the caller's list.
"""

from __future__ import annotations

import gc
import threading
import time
import weakref

from confluent_kafka import KafkaError, Producer

from workers.clients import retire
from workers.transaction import TaskTransaction


def test_a_retired_producer_s_queue_is_purged() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                         "message.timeout.ms": 600_000})
    reports: list[KafkaError | None] = []
    producer.produce("t", b"queued", on_delivery=lambda err, _msg: reports.append(err))
    doomed: list[object] = [producer]
    retiring = retire(doomed)
    assert doomed == []
    until = time.monotonic() + 10.0
    while not reports and time.monotonic() < until:
        producer.poll(0.2)  # the test's own reference keeps it: serve its delivery reports
    assert [e.code() if e else None for e in reports] == [KafkaError._PURGE_QUEUE], (
        "the retired producer still holds its queued message")
    del producer
    retiring.join(10.0)
    assert not retiring.is_alive()


class _Noted:
    """Notes the thread it is destroyed on."""

    def __init__(self, died_on: list[str], holds: object = None) -> None:
        self.died_on = died_on
        self.holds = holds

    def __del__(self) -> None:
        self.died_on.append(threading.current_thread().name)


def test_retired_objects_are_destroyed_on_the_retiring_thread_once_the_caller_lets_go() -> None:
    died_on: list[str] = []
    client = _Noted(died_on)
    holder = _Noted(died_on, holds=client)
    clients, holders = [client], [holder]
    retiring = retire(clients, holders)
    assert clients == [] and holders == []
    time.sleep(0.3)
    assert died_on == [], "destroyed while the caller still held it"
    del client, holder  # the worker lets go of its old objects a moment later
    retiring.join(10.0)
    assert died_on == ["parsley-retire-clients"] * 2


def test_a_transaction_account_frees_its_producer_without_the_cyclic_collector() -> None:
    # Its ledger asks it for the transaction's error: through a weak reference, or the
    # cycle would keep a retired producer alive until the collector happens to run.
    class FakeProducer:
        def produce(self, *args: object, **kwargs: object) -> None:
            pass

    producer = FakeProducer()
    gone = weakref.ref(producer)
    enabled = gc.isenabled()
    gc.disable()
    try:
        txn = TaskTransaction(producer)  # type: ignore[arg-type]
        del producer, txn
        assert gone() is None
    finally:
        if enabled:
            gc.enable()


def test_a_missing_holder_and_a_closed_consumer_are_not_waited_for() -> None:
    from confluent_kafka import Consumer

    died_on: list[str] = []
    holder = _Noted(died_on)
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "log_level": 0})
    began = time.monotonic()
    retiring = retire([consumer], [None, holder])  # the test keeps its consumer
    del holder
    retiring.join(10.0)
    assert not retiring.is_alive()
    assert time.monotonic() - began < 3.0, "it waited for the None or the closed consumer"
    assert died_on == ["parsley-retire-clients"]


def test_drop_frame_locals_frees_what_a_fault_s_frames_held() -> None:
    from workers.clients import drop_frame_locals

    died_on: list[str] = []

    def inner() -> None:
        held = _Noted(died_on)  # noqa: F841  # a local of the frame the fault unwinds
        raise ValueError("fault")

    def outer() -> None:
        try:
            inner()
        except ValueError as first:
            raise RuntimeError("while recovering") from first

    try:
        outer()
    except RuntimeError as exc:
        failed = exc
    assert died_on == [], "the traceback keeps the frame's locals"
    drop_frame_locals(failed)
    assert died_on == [threading.current_thread().name]
    assert failed.__cause__ is not None and failed.__cause__.__traceback__ is not None
