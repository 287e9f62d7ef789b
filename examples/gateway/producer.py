"""An asyncio face on confluent-kafka's Producer: produce, then await the delivery report.

The write tier may merge only an acknowledged record's own offset into a token, so each
produce is awaited until its delivery report. The producer runs with ``acks=all`` and
idempotence, so an acknowledged offset names a record no leader failover can lose
(docs/wire-format.md, "Writing a gateway"), and with ``murmur2_random``, the partitioner
Parsley's producers use, so a thread's comments and its rows share a partition index.
(confluent-kafka's own ``aio.AIOProducer`` does not take headers, which the stamp needs.)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException, Message, Producer

__all__ = ["Acknowledged", "AsyncProducer"]

Acknowledged = tuple[str, int, int]
"""A delivery report's ``(topic, partition, offset)``: the record's own coordinate."""


class AsyncProducer:
    """One Kafka producer whose delivery reports resolve asyncio futures.

    A daemon thread serves the reports (``poll``); :meth:`close` flushes and stops it.
    Build it inside the event loop that awaits its produces.

    Args:
        bootstrap_servers: ``host:port[,...]``.
        settings: more librdkafka properties (``log_level``, security...).
    """

    def __init__(self, bootstrap_servers: str, **settings: Any) -> None:
        self._loop = asyncio.get_running_loop()
        self._producer = Producer({
            "bootstrap.servers": bootstrap_servers, "acks": "all",
            "enable.idempotence": True, "partitioner": "murmur2_random", "linger.ms": 1,
            **settings})
        self._closed = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="gateway-producer",
                                        daemon=True)
        self._poller.start()

    def _poll(self) -> None:
        while not self._closed.is_set():
            self._producer.poll(0.05)

    async def produce(self, topic: str, key: bytes, value: bytes,
                      headers: Sequence[tuple[str, bytes | None]]) -> Acknowledged:
        """Produce one record and wait for its delivery report.

        Returns:
            The acknowledged record's ``(topic, partition, offset)``.

        Raises:
            KafkaException: the broker did not acknowledge the record.
        """
        done: asyncio.Future[Acknowledged] = self._loop.create_future()

        def report(err: Any, msg: Message) -> None:
            self._loop.call_soon_threadsafe(_settle, done, err, msg)

        self._producer.produce(topic, value=value, key=key, headers=list(headers),
                               on_delivery=report)
        return await done

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush, then stop the report thread.

        Returns:
            How many records were still undelivered at the timeout (0 when all were).
        """
        left = int(self._producer.flush(timeout_s))
        self._closed.set()
        self._poller.join(timeout_s)
        return left


def _settle(done: asyncio.Future[Acknowledged], err: Any, msg: Message) -> None:
    if done.done():
        return
    if err is not None:
        done.set_exception(KafkaException(err))
        return
    partition, offset = msg.partition(), msg.offset()
    if partition is None or offset is None or offset < 0:  # never guess a coordinate
        done.set_exception(RuntimeError(f"a delivery report without a coordinate: "
                                        f"partition {partition}, offset {offset}"))
        return
    done.set_result((str(msg.topic()), partition, offset))
