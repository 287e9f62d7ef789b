"""Test-side bootstrap and observation for worker tests on the real broker.

* :func:`bootstrap` does what the coordinator's bootstrap does for a test:
  creates the changelogs and pre-commits start offsets (metadata
  ``parsley.bootstrap``) with ``AdminClient.alter_consumer_group_offsets``;
* :func:`make_spec` builds a :class:`workers.protocol.TaskSpec`;
* :func:`spawn` starts ``workers.main.run`` in a ``multiprocess`` spawn-context process;
* :class:`StatusCollector` binds a ZeroMQ PULL socket and collects status and
  final messages;
* :func:`read_committed` is a tiny independent ``read_committed`` reader the
  checkers judge output with;
* :func:`relay_setup` is the setup most worker tests share: an ``in`` and an
  ``out`` topic, a relay process with a ``counts`` store (:func:`counting_relay`
  unless told otherwise), bootstrapped.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import multiprocess
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import AdminClient  # type: ignore[attr-defined]

from devtools.kafka_support import QUIET, CreateTopic, TopicInfo, UniqueNames
from devtools.status_collector import StatusCollector  # noqa: F401 (re-export, shared with perf)
from parsley import Channel, Effects, Store
from parsley.declarations import Process, application_id, ordering_changelog, store_changelog
from parsley.serdes import BYTES, JSON, STRING
from workers.changelog import ensure_changelog_topic
from workers.protocol import TaskSpec

BOOTSTRAP_METADATA = "parsley.bootstrap"


def bootstrap(
    admin: AdminClient,
    prefix: str,
    process: Process,
    topics: Mapping[str, TopicInfo],
    *,
    start: Mapping[tuple[str, int], int] | None = None,
) -> int:
    """Create the process's changelogs and pre-commit its start offsets (0 unless ``start``).

    Returns:
        W, the task count.
    """
    received = process.received_topics
    width = max(topics[t].partitions for t in received)
    ensure_changelog_topic(admin, ordering_changelog(prefix, process.name), width)
    for store in process.declared_stores:
        ensure_changelog_topic(admin, store_changelog(prefix, process.name, store.name), width)
    tps = [
        TopicPartition(t, p, (start or {}).get((t, p), 0), metadata=BOOTSTRAP_METADATA)
        for t in received for p in range(topics[t].partitions)
    ]
    group = application_id(prefix, process.name)
    futures = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)],
                                                 request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)
    return width


def counting_relay(out: Channel[Any, Any], counts: Store[Any, Any],
                   kill_dir: str | None = None) -> Any:
    """Count deliveries per source topic in ``counts`` and relay each to ``out``.

    With ``kill_dir``, delivering a record for which a file ``kill-<topic>-<offset>``
    exists there removes the file and SIGKILLs the worker from inside the step: after
    the earlier deliveries of the open transaction were produced and before their
    commit (the replay after the restart finds no file and goes on).
    """

    def handle(delivery: Any, state: Any) -> Effects:
        if kill_dir is not None:
            token = os.path.join(kill_dir, f"kill-{delivery.topic}-{delivery.offset}")
            if os.path.exists(token):
                os.remove(token)
                os.kill(os.getpid(), signal.SIGKILL)
        n = (state.get(counts, delivery.topic) or 0) + 1
        return (Effects.builder()
                .put(counts, delivery.topic, n)
                .send(out, delivery.topic, {"src": delivery.topic, "off": delivery.offset,
                                            "n": n})
                .build())

    return handle


@dataclass(frozen=True)
class RelaySetup:
    """A bootstrapped relay ``in`` -> ``out`` (see :func:`relay_setup`).

    Attributes:
        process: the declaration; inp, out: its topics; counts: its store;
        topics: name -> topic, both topics; prefix: the unique application prefix.
    """

    process: Process
    inp: TopicInfo
    out: TopicInfo
    counts: Store[Any, Any]
    topics: dict[str, TopicInfo]
    prefix: str


def relay_setup(
    admin: AdminClient,
    create_topic: CreateTopic,
    unique_names: UniqueNames,
    name: str,
    *,
    partitions: int = 1,
    handler: Callable[[Channel[Any, Any], Store[Any, Any]], Any] = counting_relay,
) -> RelaySetup:
    """Create ``in`` and ``out`` (``partitions`` each), declare process ``name`` receiving
    ``in`` (bytes) with ``handler(out_channel, counts)``, sending ``out`` (string keys,
    JSON values) and storing ``counts`` (string -> JSON), and bootstrap it (start 0)."""
    inp = create_topic(unique_names.topic("in"), partitions=partitions)
    out = create_topic(unique_names.topic("out"), partitions=partitions)
    counts = Store("counts", STRING, JSON)
    out_ch = Channel(out.name, STRING, JSON)
    process = (Process(name).receives(Channel(inp.name, BYTES, BYTES), handler(out_ch, counts))
               .sends(out_ch).stores(counts))
    topics = {inp.name: inp, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(admin, prefix, process, topics)
    return RelaySetup(process, inp, out, counts, topics, prefix)


def make_spec(
    process: Process,
    prefix: str,
    bootstrap_servers: str,
    endpoint: str,
    state_dir: str,
    topics: Mapping[str, TopicInfo],
    task: int = 0,
    **kwargs: Any,
) -> TaskSpec:
    """A TaskSpec for task ``task`` of ``process`` over the described ``topics``."""
    received = process.received_topics
    width = max(topics[t].partitions for t in received)
    props = {"log_level": 0, "consumer.session.timeout.ms": 3000,
             "consumer.heartbeat.interval.ms": 500}
    props.update(kwargs.pop("kafka_properties", {}))
    return TaskSpec(
        process=process, prefix=prefix, task=task, task_count=width,
        bootstrap_servers=bootstrap_servers, status_endpoint=endpoint, state_dir=state_dir,
        topic_ids={n: t.topic_id for n, t in topics.items()},
        partitions={n: t.partitions for n, t in topics.items()},
        kafka_properties=props, **kwargs)


def run_to_clean_stop(worker: Any) -> None:
    """Run an in-process ``workers.main.Worker`` until its ``should_stop`` asks; assert the
    stop was clean (what a refusal or failure raises propagates) and close its clients."""
    from workers.protocol import StopKind
    from workers.verdicts import Stop

    try:
        try:
            worker.run()
        except Stop as stop:
            assert stop.kind is StopKind.CLEAN, f"the worker stopped {stop.kind}"
    finally:
        worker.close(True)


def spawn(spec: TaskSpec) -> Any:
    """Start ``workers.main.run(spec)`` in a new spawn-context process; returns the Process."""
    from workers.main import run

    ctx = multiprocess.get_context("spawn")
    proc = ctx.Process(target=run, args=(spec,), daemon=True)
    proc.start()
    return proc


@dataclass(frozen=True, slots=True)
class Record:
    """One record read by :func:`read_committed`."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_committed(bootstrap_servers: str, topic: str, partitions: Sequence[int] = (0,),
                   timeout_s: float = 30.0, *,
                   client: Mapping[str, Any] | None = None) -> list[Record]:
    """Every committed record of ``topic`` (the given partitions), from the start to the
    last stable offset, in offset order per partition.

    Independent of the worker: a plain assign()-ed consumer with
    ``isolation.level=read_committed`` (and ``client``'s properties: a secured broker's).
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap_servers, "group.id": "checker-unused",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "enable.partition.eof": True, **QUIET,
        **(client or {})})
    out: list[Record] = []
    try:
        ends: dict[int, int] = {}
        deadline = time.monotonic() + timeout_s
        for p in partitions:
            while True:  # a client with stale metadata (a broker restart) answers -1001
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                if high >= 0:
                    break
                if time.monotonic() > deadline:
                    raise AssertionError(f"no watermark for {topic}-{p} in {timeout_s} s")
                time.sleep(0.2)
            ends[p] = high
        # Done with a partition at its end-of-partition event (everything committed below
        # the last stable offset read), or at the last record below the high watermark.
        todo = set(partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        while todo and time.monotonic() < deadline:
            for msg in consumer.consume(500, 0.2):
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        todo.discard(msg.partition())
                    continue
                out.append(Record(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                  msg.value(), tuple(msg.headers() or ())))
                if ends[msg.partition()] > 0 and msg.offset() + 1 >= ends[msg.partition()]:
                    todo.discard(msg.partition())
        if todo:
            raise AssertionError(f"reading {topic} {sorted(todo)} did not reach the end "
                                 f"{ends} in {timeout_s} s")
    finally:
        consumer.close()
    return out


def stop_worker(proc: Any, timeout_s: float = 30.0) -> int | None:
    """SIGTERM the worker and wait for it; returns its exit code."""
    if proc.is_alive():
        proc.terminate()
    proc.join(timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    return proc.exitcode
