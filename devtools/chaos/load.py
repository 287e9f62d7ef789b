"""The chaos run's load: ``A`` records at a steady rate, ``B`` records naming them as causes.

:class:`LoadProducer` is the producer of the chaos harness (:mod:`devtools.chaos.harness`);
what it writes and why: its docstring, and docs/operations.md, "Chaos test and soak".
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from devtools.kafka_support import QUIET, TopicInfo
from parsley.engine.channel import ChannelId
from parsley.wire import CAUSES_HEADER, encode_causes

TASKS = 2
"""The pipeline's task count (input partitions): the default number of partitions fed."""

class LoadProducer(threading.Thread):
    """Produces ``A`` records at ``rate``/s and ``B`` records naming ``A`` records as causes.

    Two kinds of ``B`` record, so that the pipeline has to hold messages:

    * about 30% of acknowledged ``A`` records get a ``B`` record naming them (a cause
      in the past, possibly not yet delivered by the task);
    * about 30% of ``A`` records are followed at once by a ``B`` record naming an ``A``
      offset up to :attr:`LEAD` ahead on the same partition, not produced yet, so the
      task holds the ``B`` record until its cause arrives. One idempotent producer
      without transactions writes every ``A`` record, so counting predicts the offsets.

    On :meth:`stop`, ``LEAD + 5`` more ``A`` records per partition make every named
    offset exist, then the producer flushes (bounded). Idempotent: no duplicates from
    retries across a broker restart; a fatal producer error replaces the producer.

    Counting predicts the offsets only while every ``A`` record lands. A producer that
    stalls (librdkafka's idempotent producer can wait minutes on a killed leader's
    in-flight requests before it produces to the new one) or is replaced leaves ``B``
    records naming ``A`` offsets nobody writes, which the pipeline rightly holds for ever
    (docs/failing-closed.md, "Diagnosis": not produced yet). So the stop ends with a
    top-up: whatever the old producer left is purged and dropped, and a fresh producer
    writes filler ``A`` records until each partition's end passes the highest ``A``
    offset any ``B`` record named (:attr:`topped_up` says how many; acknowledged fillers
    count in :attr:`acked`, since the pipeline relays them as it does every record).
    Purged records count in :attr:`purged`, never in :attr:`errors`. A top-up that
    cannot finish in :attr:`TOP_UP_S` leaves :attr:`top_up_error` set, and a caller must
    not take the drain's holds for the pipeline's then.
    """

    LEAD = 10
    """How far ahead (offsets) a ``B`` record's cause may be."""
    FLUSH_S = 60.0
    """Bound on the stop's flush of what the producer holds, s."""
    TOP_UP_S = 90.0
    """Bound on the stop's top-up, s."""
    STOP_S = FLUSH_S + TOP_UP_S + 30.0
    """What :meth:`stop` waits for the thread: the flush, the top-up, and 30 s for the
    purges and the clients' teardown."""

    def __init__(self, bootstrap: str, a: TopicInfo, b: TopicInfo, rate: float,
                 seed: int, tasks: int = TASKS) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self._tasks = tasks
        self._servers = bootstrap
        self._a, self._b = a, b
        self._period = 1.0 / rate
        self._rng = random.Random(seed)
        self._halt = threading.Event()
        self._lock = threading.Lock()
        self._causes: list[tuple[int, int]] = []  # (partition, offset) of acked A records
        self._next = [0] * tasks  # predicted next offset of A per partition
        self.acked = 0
        self.errors = 0
        self.last_error = ""
        self.flushed: int | None = None
        self.topped_up = 0
        self.top_up_error = ""
        self.purged = 0
        self._purging = False
        self._named = [-1] * tasks  # highest A offset any B record named, per partition

    def _config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self._servers, "enable.idempotence": True,
                "linger.ms": 5, "message.timeout.ms": 600_000, **QUIET}

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        with self._lock:
            if err is not None and self._purging:
                self.purged += 1
                return
            if err is not None:
                self.errors += 1
                self.last_error = str(err)
                return
            self.acked += 1
            if msg.topic() == self._a.name and self._rng.random() < 0.3:
                self._causes.append((msg.partition() or 0, msg.offset() or 0))

    def _produce_b(self, producer: Producer, partition: int, offset: int) -> None:
        header = encode_causes({ChannelId(self._a.topic_id, partition): offset})
        self._named[partition] = max(self._named[partition], offset)
        producer.produce(self._b.name, key=b"c%d" % offset,
                         value=b"b-for-%d-%d" % (partition, offset), partition=partition,
                         headers=[(CAUSES_HEADER, header)], on_delivery=self._on_delivery)

    def _produce_a(self, producer: Producer, partition: int) -> None:
        seq = self._next[partition]
        producer.produce(self._a.name, key=b"k%d" % seq, value=b"a%d-%d" % (partition, seq),
                         partition=partition, on_delivery=self._on_delivery)
        self._next[partition] += 1

    def run(self) -> None:
        """Produce until :meth:`stop`; then the tail, the flush (:attr:`FLUSH_S`), the purge
        of what is left and the top-up (:attr:`TOP_UP_S`): the class docstring."""
        producer = Producer(self._config())
        turn = 0
        next_at = time.monotonic()
        while not self._halt.is_set():
            now = time.monotonic()
            if now >= next_at:
                next_at += self._period
                if next_at < now - 1.0:  # fell behind (queue full, broker down): no burst
                    next_at = now
                try:
                    partition = turn % self._tasks
                    self._produce_a(producer, partition)
                    turn += 1
                    if self._rng.random() < 0.3:
                        ahead = self._next[partition] - 1 + self._rng.randint(0, self.LEAD)
                        self._produce_b(producer, partition, ahead)
                    with self._lock:
                        causes, self._causes = self._causes, []
                    for p, offset in causes:
                        self._produce_b(producer, p, offset)
                except BufferError:
                    pass  # queue full while the broker is away: produce less
                except Exception as exc:  # a fatal producer error: start a new one
                    with self._lock:
                        self.errors += 1
                        self.last_error = f"{type(exc).__name__}: {exc}"
                    producer = Producer(self._config())
            producer.poll(min(0.05, max(0.0, next_at - time.monotonic())))
        try:
            for _ in range(self.LEAD + 5):
                for partition in range(self._tasks):
                    with contextlib.suppress(BufferError):
                        self._produce_a(producer, partition)
            self.flushed = producer.flush(self.FLUSH_S)
        except Exception as exc:  # a fatal error in the tail: the top-up still runs
            with self._lock:
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
        # What a stalled producer still holds must not land after the verdict's reads.
        self._drop(producer)
        del producer  # the last reference: the old client is destroyed here
        try:
            self._top_up(deadline=time.monotonic() + self.TOP_UP_S)
        except Exception as exc:  # reported: the caller says the load failed, not the pipeline
            self.top_up_error = f"{type(exc).__name__}: {exc}"

    def _drop(self, producer: Producer) -> None:
        """Purge what ``producer`` still holds, counting it in :attr:`purged`."""
        self._purging = True
        try:
            with contextlib.suppress(Exception):
                producer.purge(in_queue=True, in_flight=True, blocking=False)
                producer.flush(0)
        finally:
            self._purging = False

    def _on_fill(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            with self._lock:
                self.acked += 1
                self.topped_up += 1

    def _top_up(self, deadline: float) -> None:
        """Write filler ``A`` records until every named ``A`` offset exists (until
        ``deadline``, retrying a failed look at the ends).

        Raises:
            TimeoutError: the ends did not pass every named offset by ``deadline``
                (the last error seen, if any, in the message).
        """
        producer = Producer(self._config())
        admin = AdminClient({"bootstrap.servers": self._servers, **QUIET})
        tps = [TopicPartition(self._a.name, p) for p in range(self._tasks)]
        last = ""
        try:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    answers = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps},
                                                 request_timeout=max(1.0, min(10.0, left)))
                    ends = {tp.partition: answers[tp].result(timeout=max(1.0, left)).offset
                            for tp in tps}
                except Exception as exc:  # a broker still away: look again
                    last = f"{type(exc).__name__}: {exc}"
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
                    continue
                short = {p: self._named[p] + 1 - end for p, end in ends.items()
                         if end <= self._named[p]}
                if not short:
                    return
                for partition, count in short.items():
                    for _ in range(count):
                        producer.produce(self._a.name, key=b"fill", value=b"a-fill",
                                         partition=partition, on_delivery=self._on_fill)
                producer.flush(max(0.0, deadline - time.monotonic()))
            raise TimeoutError(f"the top-up did not make every named A offset exist in "
                               f"{self.TOP_UP_S:g} s (last error: {last or 'none'})")
        finally:
            self._drop(producer)

    def stop(self, timeout_s: float = STOP_S) -> None:
        """Stop producing and wait (bounded by ``timeout_s``, s) for the tail, the flush, the
        purge and the top-up; the thread is still alive after it when they overran."""
        self._halt.set()
        self.join(timeout_s)


