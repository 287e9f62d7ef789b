"""The baseline: a plain confluent-kafka exactly-once relay, one process (docs/performance.md).

What Parsley's relay is compared with: consume ``read_committed``, produce each
record to the output topic (same key, value, headers and timestamp), and every
commit interval (default 100 ms, as the worker's) ``send_offsets_to_transaction``
and ``commit_transaction``. One transaction per interval, none while idle, the
same producer settings as the worker (idempotent, ``acks=all``,
``transaction.timeout.ms=10000``, ``partitioner=murmur2_random``) and the same
consumer settings (``read_committed``, no auto commit, and the worker's prefetch: 16 MiB
fetched again within 10 ms, ``workers.kafka_config.PREFETCH_KIB`` and
``FETCH_QUEUE_BACKOFF_MS``; with librdkafka's defaults, 64 MiB and a one-second backoff, a
backlog of 1 KiB records filled the queue, and the relay then sat idle for most of a second,
which halved its msg/s in some rounds). No ordering, no causal metadata, no changelog.

Run: ``python -m perf.baseline --bootstrap-servers HOST:PORT --input IN --output OUT
--group G --transactional-id T [--commit-interval-ms 100] [--batch 500]``.
SIGTERM/SIGINT commit the open transaction and exit 0. It prints ``ready`` on
stdout once its transactions are initialised and its consumer has an assignment.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

__all__ = ["consumer_settings", "main", "relay"]


def consumer_settings(bootstrap: str, group: str) -> dict[str, object]:
    """The baseline consumer's librdkafka settings: ``read_committed``, no auto commit, and
    the worker's prefetch (``workers.kafka_config.consumer_config``'s
    ``queued.max.messages.kbytes`` and ``fetch.queue.backoff.ms``)."""
    return {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        # The worker's values (workers.kafka_config.PREFETCH_KIB, FETCH_QUEUE_BACKOFF_MS),
        # written out so that the plain relay imports nothing of Parsley;
        # tests/unit/test_perf_report.py keeps the two consumers alike.
        "queued.max.messages.kbytes": 16_384,
        "fetch.queue.backoff.ms": 10,
    }


def relay(bootstrap: str, input_topic: str, output_topic: str, group: str,
          transactional_id: str, commit_interval_ms: int = 100, batch: int = 500) -> int:
    """Relay ``input_topic`` to ``output_topic`` exactly once until SIGTERM.

    ``batch`` is the records per ``consume()`` call (default 500, the worker's
    ``workers.main.BATCH``; ``perf.runs`` passes the worker's value).

    Returns:
        Messages relayed (committed).

    Raises:
        KafkaException: any client error (the benchmark treats it as a failed run).
    """
    consumer = Consumer(consumer_settings(bootstrap, group))
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "enable.idempotence": True,
        "acks": "all",
        "transaction.timeout.ms": 10_000,
        "partitioner": "murmur2_random",
    })
    producer.init_transactions(30)
    stopping = False

    def stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    assigned = False

    def on_assign(c: Consumer, parts: list[TopicPartition]) -> None:
        nonlocal assigned
        assigned = True

    consumer.subscribe([input_topic], on_assign=on_assign)
    interval = commit_interval_ms / 1000.0
    in_txn = False
    txn_started = 0.0
    positions: dict[tuple[str, int], int] = {}
    relayed = pending = 0
    announced = False

    def commit() -> None:
        nonlocal in_txn, relayed, pending
        offsets = [TopicPartition(t, p, o) for (t, p), o in positions.items()]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.commit_transaction(30)
        in_txn = False
        relayed += pending
        pending = 0

    while not stopping:
        records = consumer.consume(num_messages=batch, timeout=interval / 2)
        if assigned and not announced:
            print("ready", flush=True)
            announced = True
        for m in records:
            if m.error():
                raise KafkaException(m.error())
            if not in_txn:
                producer.begin_transaction()
                in_txn = True
                txn_started = time.monotonic()
            producer.produce(output_topic, m.value(), m.key(), headers=m.headers(),
                             timestamp=m.timestamp()[1])
            positions[(str(m.topic()), int(m.partition() or 0))] = int(m.offset() or 0) + 1
            pending += 1
        producer.poll(0)
        if in_txn and time.monotonic() - txn_started >= interval:
            commit()
    if in_txn:
        commit()
    consumer.close()
    return relayed


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perf.baseline", description=__doc__)
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--transactional-id", required=True)
    ap.add_argument("--commit-interval-ms", type=int, default=100)
    ap.add_argument("--batch", type=int, default=500, help="records per consume() call")
    a = ap.parse_args(argv)
    n = relay(a.bootstrap_servers, a.input, a.output, a.group, a.transactional_id,
              a.commit_interval_ms, a.batch)
    print(f"relayed {n}", flush=True)
    sys.exit(0)


if __name__ == "__main__":
    main()
