"""The naive contrast: what a plain consumer of both topics sees, without Parsley.

One ordinary consumer (``read_committed``, no Parsley) reads ``list.posts`` and
``list.threaded`` from the beginning, as a service catching up after downtime
would, and counts the threaded events it receives before the post of their own
message or of their parent (an *inversion*: the event refers to content the
reader does not have yet). Kafka orders records within a partition only;
across the two topics the order is whatever the fetches return, and a fetch
of 1.7 MB posts fills far more slowly than one of 150-byte events. Parsley's
``digest`` sees the same fetches and holds each event back instead.

Run alone: ``python -m examples.mailing_list.naive --bootstrap-servers HOST:PORT [--suffix S]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from examples.mailing_list.app import Topics

__all__ = ["NaiveResult", "count_inversions", "count_naive", "main"]


@dataclass(frozen=True, slots=True)
class NaiveResult:
    """What the plain consumer saw.

    Attributes:
        posts: post records received.
        threaded: threaded events received.
        inversions: threaded events received before their own post or, for a
            reply whose parent is in the input, before the parent's post.
    """

    posts: int
    threaded: int
    inversions: int


def count_inversions(stream: Iterable[tuple[str, dict[str, Any]]],
                     parents: dict[str, str | None] | None = None) -> NaiveResult:
    """Count inversions in a consumption order (pure).

    Args:
        stream: ``(kind, value)`` in the order received; ``kind`` is ``"post"``
            or ``"threaded"``; values carry ``message_id`` (and ``parent`` for events).
        parents: ids known to be in the input (keys); a missing parent outside
            it is not awaited. ``None``: every parent named is awaited.

    Returns:
        A :class:`NaiveResult`.
    """
    seen: set[str] = set()
    posts = threaded = inversions = 0
    for kind, value in stream:
        if kind == "post":
            posts += 1
            seen.add(value["message_id"])
            continue
        threaded += 1
        parent = value.get("parent")
        awaited = [value["message_id"]]
        if parent is not None and not value.get("orphan") and (
                parents is None or parent in parents):
            awaited.append(parent)
        if any(mid not in seen for mid in awaited):
            inversions += 1
    return NaiveResult(posts, threaded, inversions)


def count_naive(bootstrap_servers: str, topics: Topics, timeout_s: float = 120.0) -> NaiveResult:
    """Consume ``topics.posts`` and ``topics.threaded`` from the beginning to their ends.

    One consumer, default fetch settings, ``read_committed``; values decoded
    as they come (post bodies are dropped after decoding).

    Raises:
        KafkaException: a topic is missing or the consumer fails.
        TimeoutError: the ends were not reached within ``timeout_s`` seconds.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers,
        "group.id": f"mailing-list-naive-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "log_level": 3,
    })
    try:
        assignment = []
        for topic in (topics.posts, topics.threaded):
            desc = consumer.list_topics(topic, timeout=15).topics.get(topic)
            if desc is None or desc.error is not None:
                raise KafkaException(f"topic {topic!r} is not available")
            assignment += [TopicPartition(topic, p, OFFSET_BEGINNING) for p in desc.partitions]
        consumer.assign(assignment)
        remaining = {(tp.topic, tp.partition) for tp in assignment}
        order: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + timeout_s
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"naive consumer: {sorted(remaining)} not read to the end "
                                   f"in {timeout_s} s")
            for msg in consumer.consume(500, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        remaining.discard((msg.topic(), msg.partition()))
                        continue
                    raise KafkaException(err)
                raw = msg.value()
                if raw is None:
                    continue
                value = orjson.loads(raw)
                kind = value.get("type")
                if kind in ("post", "threaded"):
                    order.append((kind, {"message_id": value["message_id"],
                                         "parent": value.get("parent"),
                                         "orphan": value.get("orphan")}))
        posted = {v["message_id"]: None for k, v in order if k == "post"}
        return count_inversions(order, parents=posted)
    finally:
        consumer.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.mailing_list.naive``: print what the plain consumer saw."""
    ap = argparse.ArgumentParser(prog="python -m examples.mailing_list.naive",
                                 description="Count causal inversions a plain consumer sees.")
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--suffix", default="", help="topic name suffix of the run")
    args = ap.parse_args(argv)
    result = count_naive(args.bootstrap_servers, Topics.with_suffix(args.suffix))
    print(orjson.dumps({"posts": result.posts, "threaded": result.threaded,
                        "inversions": result.inversions}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
