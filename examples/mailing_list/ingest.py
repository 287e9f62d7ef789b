"""The edge producer: replays the archive into ``list.posts`` in arrival order.

Not a Parsley process: the posts are the pipeline's input, so they carry no
``parsley.causes`` header. Each record is

- key: the message's thread (:func:`~examples.mailing_list.threads.compute_threads`
  over the whole file), UTF-8, so every reply shares its parent's partition;
- value: JSON ``{"type": "post", "seq", "message_id", "parent", "in_reply_to",
  "references", "date", "author", "subject", "bytes", "thread", "body"}``,
  the body padded so the whole value is the raw message's real size in bytes
  (posts reach 1.7 MB; the value is never smaller than its fields).

After the last post, an end-of-input marker goes to every partition:
``{"type": "end", "partition", "partitions", "posts", "total"}`` keyed
``end-of-input-<j>`` (a key that lands on that partition under murmur2, so
anything keyed after it lands there too) and produced to that partition
explicitly. ``posts`` counts the records that went to that partition.

The producer partitions with ``murmur2_random`` like every producer in the
runtime, is idempotent (retries never reorder a partition), and
raises ``message.max.bytes`` to :data:`MAX_RECORD_BYTES`.

``--delay-every N --delay-ms M`` holds back every N-th post and produces it M
ms later than its turn, after posts that arrived after it: its replies reach
``threader`` first and are parked there, and the pipeline lags on purpose.

Run alone: ``python -m examples.mailing_list.ingest --bootstrap-servers HOST:PORT
[--topic list.posts] [--count N | --all] [--rate R] [--delay-every N --delay-ms M]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from confluent_kafka import KafkaException, Producer

from examples.mailing_list.partition import key_for_partition
from examples.mailing_list.threads import (
    Message,
    compute_threads,
    load_messages,
    resolve_data_path,
)

__all__ = [
    "DEFAULT_COUNT",
    "END_KEY_STEM",
    "MAX_RECORD_BYTES",
    "IngestPlan",
    "IngestReport",
    "encode_post",
    "end_marker",
    "ingest",
    "main",
    "producer_config",
]

MAX_RECORD_BYTES: Final = 4 * 1024 * 1024
"""Record size limit for the demo's topics (``max.message.bytes``) and producers
(``message.max.bytes``), bytes: the largest post (1,728,742 bytes) plus its JSON
fields, plus the default 262,144-byte metadata budget, with room to spare."""

DEFAULT_COUNT: Final = 5000
"""Posts replayed by default (``--all`` replays the whole file)."""

END_KEY_STEM: Final = "end-of-input"
"""Stem of the end-of-input markers' keys (see ``partition.key_for_partition``)."""

_FILLER: Final = b"> quoted text of an earlier message in the thread, and the reply below it. "


def encode_post(message: Message, thread: str) -> bytes:
    """A post's record value: its fields as JSON, padded to ``message.size_bytes`` bytes.

    Args:
        message: the archived post.
        thread: its thread name (the record key).

    Returns:
        UTF-8 JSON of exactly ``max(message.size_bytes, size of the fields)`` bytes.
    """
    fields: dict[str, Any] = {
        "type": "post",
        "seq": message.seq,
        "message_id": message.message_id,
        "parent": message.parent,
        "in_reply_to": list(message.in_reply_to),
        "references": list(message.references),
        "date": message.date,
        "author": message.author,
        "subject": message.subject,
        "bytes": message.size_bytes,
        "thread": thread,
        "body": "",
    }
    base = orjson.dumps(fields)
    pad = message.size_bytes - len(base)
    if pad <= 0:
        return base
    body = (_FILLER * (pad // len(_FILLER) + 1))[:pad]
    # The body is ASCII without JSON escapes, so it adds exactly len(body) bytes.
    return base[:-2] + body + base[-2:]


def end_marker(partition: int, partitions: int, posts: int, total: int) -> tuple[str, bytes]:
    """The end-of-input marker for one partition: ``(key, value)``.

    Args:
        partition: the partition it goes to.
        partitions: the topic's partition count.
        posts: post records produced to that partition.
        total: post records produced in all.

    Returns:
        A key landing on ``partition`` under murmur2, and the JSON value.
    """
    value = {"type": "end", "partition": partition, "partitions": partitions,
             "posts": posts, "total": total}
    return key_for_partition(END_KEY_STEM, partition, partitions), orjson.dumps(value)


@dataclass(frozen=True, slots=True)
class IngestPlan:
    """How to replay.

    Attributes:
        count: posts to replay from the start of the file (``None``: all).
        rate_per_s: posts per second at most; 0 means as fast as the broker takes them.
        delay_every: hold back every N-th post (0: none).
        delay_ms: how long a held-back post waits, ms.
    """

    count: int | None = DEFAULT_COUNT
    rate_per_s: float = 0.0
    delay_every: int = 0
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if self.count is not None and self.count < 1:
            raise ValueError(f"count must be >= 1, got {self.count}")
        if self.rate_per_s < 0 or self.delay_every < 0 or self.delay_ms < 0:
            raise ValueError("rate, delay-every and delay-ms must be >= 0")


@dataclass
class IngestReport:
    """What the ingester produced.

    Attributes:
        posts: post records acknowledged by the broker.
        per_partition: post records per partition.
        delayed: posts held back by ``--delay-every``.
        bytes_sent: value bytes of the posts.
        elapsed_s: wall time of the replay, seconds.
    """

    posts: int = 0
    per_partition: dict[int, int] = field(default_factory=dict)
    delayed: int = 0
    bytes_sent: int = 0
    elapsed_s: float = 0.0


def producer_config(bootstrap_servers: str) -> dict[str, Any]:
    """The ingester's librdkafka config: idempotent, ``murmur2_random``, 4 MiB records."""
    return {
        "bootstrap.servers": bootstrap_servers,
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
        "acks": "all",
        "message.max.bytes": MAX_RECORD_BYTES,
        "linger.ms": 5,
        "log_level": 3,
    }


def _partitions(producer: Producer, topic: str, timeout_s: float = 10.0) -> int:
    meta = producer.list_topics(topic, timeout=timeout_s)
    desc = meta.topics.get(topic)
    if desc is None or desc.error is not None or not desc.partitions:
        raise RuntimeError(f"topic {topic!r} is not available: "
                           f"{None if desc is None else desc.error}; create it first")
    return len(desc.partitions)


def ingest(
    bootstrap_servers: str,
    topic: str,
    messages: Sequence[Message],
    threads: dict[str, str],
    plan: IngestPlan,
    on_progress: Callable[[int], None] | None = None,
) -> IngestReport:
    """Replay ``messages`` (already cut to ``plan.count``) into ``topic``, then the end markers.

    Args:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        topic: the posts topic (must exist, with ``max.message.bytes`` >= the largest value).
        messages: posts in arrival order.
        threads: :func:`compute_threads` over the whole file (the keys).
        plan: rate and hold-back.
        on_progress: called with the number of posts handed to the producer so far.

    Returns:
        An :class:`IngestReport` once every record is acknowledged.

    Raises:
        KafkaException: a record was refused (e.g. ``MSG_SIZE_TOO_LARGE`` when the
            topic's ``max.message.bytes`` is too small).
        RuntimeError: the topic does not exist.
    """
    producer = Producer(producer_config(bootstrap_servers))
    report = IngestReport()
    errors: list[str] = []
    partitions = _partitions(producer, topic)

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(f"{msg.key()!r}: {err}")
            return
        report.posts += 1
        report.per_partition[msg.partition()] = report.per_partition.get(msg.partition(), 0) + 1

    def produce(key: str, value: bytes, partition: int | None = None,
                callback: Callable[[Any, Any], None] | None = delivered) -> None:
        extra: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                producer.produce(topic, value=value, key=key.encode(), on_delivery=callback,
                                 **extra)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if errors:
            raise KafkaException(f"{topic}: a post was refused: {errors[0]}")

    start = time.monotonic()
    interval = 1.0 / plan.rate_per_s if plan.rate_per_s > 0 else 0.0
    held: deque[tuple[float, Message]] = deque()
    handed = 0

    def send(m: Message) -> None:
        nonlocal handed
        value = encode_post(m, threads[m.message_id])
        produce(threads[m.message_id], value)
        report.bytes_sent += len(value)
        handed += 1
        if on_progress is not None:
            on_progress(handed)

    for i, m in enumerate(messages):
        if interval:
            wait = start + i * interval - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        now = time.monotonic()
        while held and held[0][0] <= now:
            send(held.popleft()[1])
        if plan.delay_every and (i + 1) % plan.delay_every == 0:
            held.append((now + plan.delay_ms / 1000.0, m))
            report.delayed += 1
            continue
        send(m)
    while held:
        due, m = held.popleft()
        time.sleep(max(0.0, due - time.monotonic()))
        send(m)
    producer.flush()
    if errors:
        raise KafkaException(f"{topic}: a post was refused: {errors[0]}")
    marker_errors: list[str] = []

    def marker_delivered(err: Any, msg: Any) -> None:
        if err is not None:
            marker_errors.append(str(err))

    for p in range(partitions):
        key, value = end_marker(p, partitions, report.per_partition.get(p, 0), report.posts)
        produce(key, value, partition=p, callback=marker_delivered)
    producer.flush()
    if marker_errors:
        raise KafkaException(f"{topic}: an end-of-input marker was refused: {marker_errors[0]}")
    report.elapsed_s = time.monotonic() - start
    return report


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.mailing_list.ingest``: replay; exit 0 once all is acknowledged."""
    ap = argparse.ArgumentParser(prog="python -m examples.mailing_list.ingest",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--topic", default="list.posts")
    ap.add_argument("--data", help="messages.jsonl (default: $PARSLEY_DEMO_DATA, else ../shared/"
                                   "data/lkml-linux-ext4/messages.jsonl from the repo root)")
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT)
    ap.add_argument("--all", action="store_true", help="replay all 42,700 messages")
    ap.add_argument("--rate", type=float, default=0.0, help="posts per second (0: unlimited)")
    ap.add_argument("--delay-every", type=int, default=0)
    ap.add_argument("--delay-ms", type=int, default=0)
    args = ap.parse_args(argv)
    try:
        path = resolve_data_path(args.data)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    everything = load_messages(path)
    threads = compute_threads(everything)
    plan = IngestPlan(None if args.all else args.count, args.rate, args.delay_every,
                      args.delay_ms)
    chosen = everything if plan.count is None else everything[:plan.count]
    report = ingest(args.bootstrap_servers, args.topic, chosen, threads, plan)
    print(f"ingested posts={report.posts} delayed={report.delayed} "
          f"bytes={report.bytes_sent} partitions={dict(sorted(report.per_partition.items()))} "
          f"elapsed_s={report.elapsed_s:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
