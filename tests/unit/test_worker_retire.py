"""Retired clients (workers.clients.retire): a retired producer sends nothing more.

A producer retired by a recovery in place holds an abandoned transaction; what it still had
queued must not be sent once a broker is back (it would open a transaction no coordinator
ends). A real producer with nowhere to send keeps its message queued; retiring it empties its
queue, and the caller's list.
"""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from workers.clients import retire


def test_a_retired_producer_s_queue_is_purged() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "log_level": 0,
                         "message.timeout.ms": 600_000})
    reports: list[KafkaError | None] = []
    producer.produce("t", b"queued", on_delivery=lambda err, _msg: reports.append(err))
    doomed: list[object] = [producer]
    retire(doomed).join(10.0)
    assert doomed == []
    producer.poll(1.0)  # the test's own reference keeps it: serve its delivery reports
    assert [e.code() if e else None for e in reports] == [KafkaError._PURGE_QUEUE], (
        "the retired producer still holds its queued message")
