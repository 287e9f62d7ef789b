"""The relay runs of ``python -m perf``: baseline, parsley-1, parsley-2 and diamond
(docs/performance.md).

Every run follows the same procedure, so the ratios compare like with like:

1. create fresh topics: the input(s) and an output topic with
   ``message.timestamp.type=LogAppendTime`` (each output record's timestamp is
   when the broker appended it);
2. start the relay and wait until it is ready, then send a warm-up message per
   input partition and wait until it is read from the output (clients connected,
   transactions initialised, code paths warm);
3. **throughput**: suspend the relay's worker processes (SIGSTOP), write a backlog
   of ``messages`` records into the input, sample the workers' CPU seconds, resume
   them (SIGCONT) and read until the whole backlog is out. Throughput is backlog /
   (last output append time - resume time); the load generator never competes with
   the relay for the 2 cores. Worker CPU seconds over that window give messages
   per worker CPU-second;
4. **latency**: the load generator sends ``latency_messages`` records paced at
   ``latency_rate`` per second, each stamped with its send time; the latency of a
   record is (read time - send time) at a ``read_committed`` reader, so it includes
   the commit interval. For the diamond the held message of each pair goes first
   and its cause half a pair-interval later; a held message's added latency is
   measured from its cause's send;
5. stop the relay (SIGTERM; the worker commits and exits), delete the run's topics and
   wait until ``list_topics`` no longer shows them, so the next run meets a settled broker.

A peer that runs on a JVM (Kafka Streams, :mod:`perf.peers`) first relays an untimed backlog
of the same size after its warm-up record, so its JIT has compiled the hot path before the
timed one. Each run's figures carry the load average when it began.

Peak resident memory of the workers is sampled by the reader's loop.

The baseline and the Parsley relays run under the same :func:`conditions`: the
same backlog, the same load records (value size and the 16-entry
``parsley.causes`` header, which the baseline relays unchanged), the same
commit interval and the same records per ``consume()`` call.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

import psutil  # type: ignore[import-untyped]
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from perf import load
from perf.measure import (
    CpuWindow,
    OutputReader,
    WorkerSampler,
    cpu_seconds,
    duplicates,
    header_bytes_per_message,
    held_latencies_ms,
    latency_summary,
    throughput,
)
from perf.relay_process import RelayProcess

__all__ = ["ENGINES", "KINDS", "PEER_KINDS", "Conditions", "Settings", "conditions", "run_one"]

KINDS: tuple[str, ...] = ("baseline", "parsley-1", "parsley-1-batch", "parsley-1-python",
                          "parsley-2", "diamond")
"""The relay runs, in the order each round runs them. ``parsley-1-python`` is ``parsley-1`` on
the pure-Python reference engine and codec (``PARSLEY_ENGINE=python`` in its worker; the
others run the default, native one: docs/operations.md, "Choosing the engine");
``parsley-1-batch`` is ``parsley-1`` with a batch handler (``Process.receives_batch``)."""

PEER_KINDS: tuple[str, ...] = ("quix-100ms", "quix-5s", "kstreams")
"""The peers ``--peers`` adds (:mod:`perf.peers`): Quix Streams exactly-once with a 100 ms
and its default 5 s commit interval, and Kafka Streams ``exactly_once_v2``."""

ENGINES: dict[str, str] = {"parsley-1-python": "python"}
"""The ``PARSLEY_ENGINE`` of a run's workers, where not the default (native)."""


@dataclass(frozen=True)
class Settings:
    """Sizes of one benchmark invocation.

    Attributes:
        messages: backlog records per throughput phase (diamond: half as many pairs).
        latency_messages: paced records in the latency phase (diamond: half as many pairs).
        latency_rate: paced records per second (diamond: half as many pairs per second).
        sizes: message value sizes, bytes.
        commit_interval_ms: the relays' commit interval, ms (the peers set their own:
            :mod:`perf.peers`).
        timeout_s: deadline for any one wait (startup, drain), seconds.
        settle_s: after a run, how long to wait until its deleted topics are no longer
            listed (the broker settled before the next run), seconds.
    """

    messages: int = 200_000
    latency_messages: int = 2_000
    latency_rate: float = 400.0
    sizes: tuple[int, ...] = (100, 1024)
    commit_interval_ms: int = 100
    timeout_s: float = 240.0
    settle_s: float = 60.0


QUICK = Settings(messages=100_000, latency_messages=600, latency_rate=300.0)
"""``--quick``: a backlog of 10^5 records. Not fewer: the baseline drains 10^5 records of
100 B in well under a second, and on 2*10^4 its fixed start costs (the first fetches and
commit) showed as half its throughput (63,000 msg/s against 120,000-210,000 on 10^5), which
inflated every ratio against it."""
FULL = Settings(messages=200_000, latency_messages=2_000)


@dataclass(frozen=True, slots=True)
class Conditions:
    """What one run's relay is fed and how it reads: equal for the baseline and Parsley.

    Attributes:
        backlog: records written while the relay is suspended (diamond: 2 per pair).
        pairs: diamond pairs in that backlog (0 for the other runs).
        frontier_header: every load record carries the 16-entry ``parsley.causes``
            header (the baseline relays it unchanged, so it moves the same bytes).
        consume_batch: records per consumer ``consume()`` call in the relay
            (:data:`workers.main.BATCH`, the worker's).
    """

    backlog: int
    pairs: int
    frontier_header: bool
    consume_batch: int


def conditions(kind: str, settings: Settings) -> Conditions:
    """The load and read conditions of run ``kind`` (pure).

    The baseline gets the same backlog, the same header bytes and the same
    consume batch as ``parsley-1``, so ``parsley1_vs_baseline`` compares the
    relays and nothing else (measured as ratios in the same run).
    """
    from workers.main import BATCH

    pairs = settings.messages // 2 if kind == "diamond" else 0
    backlog = 2 * pairs if kind == "diamond" else settings.messages
    return Conditions(backlog=backlog, pairs=pairs, frontier_header=True,
                      consume_batch=BATCH)


def _say(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- topics


def create_topics(admin: AdminClient, topics: Sequence[tuple[str, int, dict[str, str]]]) -> None:
    """Create ``(name, partitions, config)`` topics (replication 1) and wait for them."""
    new = [NewTopic(n, num_partitions=p, replication_factor=1, config=c) for n, p, c in topics]
    for f in admin.create_topics(new, request_timeout=30).values():
        f.result(timeout=60)
    deadline = time.monotonic() + 30
    names = {n for n, _, _ in topics}
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        if all(n in md.topics and not md.topics[n].error for n in names):
            return
        time.sleep(0.2)


OUTPUT_CONFIG = {"message.timestamp.type": "LogAppendTime"}


def delete_topics(admin: AdminClient, names: Sequence[str], prefix: str | None = None,
                  settle_s: float = 0.0) -> list[str]:
    """Delete a run's topics (and with ``prefix``, its relay's ordering changelog), best effort.

    A shared broker would otherwise collect a few topics per run. With ``settle_s`` > 0, wait
    up to that long until ``list_topics`` no longer shows any of them (the broker settled
    before the next run: ``python -m perf`` does so between runs).

    Returns:
        The topics still listed when the wait ended (empty once they are gone).
    """
    from parsley.declarations import ordering_changelog

    topics = list(names) + ([ordering_changelog(prefix, "relay")] if prefix else [])
    with contextlib.suppress(Exception):
        for f in admin.delete_topics(topics, operation_timeout=30).values():
            with contextlib.suppress(Exception):
                f.result(30)
    deadline = time.monotonic() + settle_s
    left = topics
    while settle_s > 0:
        listed: set[str]
        try:
            listed = set(admin.list_topics(timeout=10).topics)
        except Exception:  # a busy broker: ask again until the deadline
            listed = set(left)
        left = [t for t in topics if t in listed]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return left if settle_s > 0 else []


# ----------------------------------------------------------------------------- relays


class BaselineRelay(RelayProcess):
    """``python -m perf.baseline`` in a subprocess."""

    name = "baseline"

    def __init__(self, bootstrap: str, input_topic: str, output_topic: str, tag: str,
                 commit_interval_ms: int, consume_batch: int) -> None:
        super().__init__("baseline", [
            sys.executable, "-m", "perf.baseline", "--bootstrap-servers", bootstrap,
            "--input", input_topic, "--output", output_topic,
            "--group", f"{tag}-baseline", "--transactional-id", f"{tag}-baseline",
            "--commit-interval-ms", str(commit_interval_ms), "--batch", str(consume_batch)])


class ParsleyRelay:
    """A Parsley relay process: coordinator bootstrap, then one spawned worker per task.

    The workers are started straight from :class:`workers.protocol.TaskSpec` (what the
    coordinator's supervisor does), so their pids and status messages are at hand.
    """

    def __init__(self, bootstrap: str, inputs: Sequence[str], output: str, tag: str,
                 commit_interval_ms: int, state_dir: str, engine: str | None = None,
                 batch: bool = False) -> None:
        self.engine = engine  # PARSLEY_ENGINE of the workers; None: the default
        self.batch = batch  # a batch handler (receives_batch) rather than per record
        self.bootstrap = bootstrap
        self.inputs = list(inputs)
        self.output = output
        self.prefix = tag
        self.commit_interval_ms = commit_interval_ms
        self.state_dir = state_dir
        self.procs: list[Any] = []
        self.topic_ids: dict[str, UUID] = {}
        self.collector: Any = None
        self.plan: Any = None

    def process(self) -> Any:
        """The declaration: relay every input record to the output, key/value/timestamp kept."""
        from parsley import EARLIEST, Channel, Process, serdes

        out = Channel(self.output, serdes.BYTES, serdes.BYTES)
        proc = Process("relay")
        for name in self.inputs:
            ch = Channel(name, serdes.BYTES, serdes.BYTES).starting_at(EARLIEST)
            proc = (proc.receives_batch(ch, batch_relay_handler(out)) if self.batch
                    else proc.receives(ch, relay_handler(out)))
        return proc.sends(out)

    def start(self, timeout_s: float, target: Callable[..., Any] | None = None,
              extra_args: tuple[Any, ...] = ()) -> None:
        """Bootstrap, spawn every task and wait until each reports RUNNING.

        ``target``/``extra_args``: see :meth:`spawn`.
        """
        from coordinator.bootstrap import bootstrap
        from coordinator.config import ParsleyConfig
        from devtools.status_collector import StatusCollector

        config = ParsleyConfig(self.bootstrap, self.prefix, state_dir=self.state_dir,
                               commit_interval_ms=self.commit_interval_ms,
                               kafka_properties=self.PROPS)
        self.plan = bootstrap(config, [self.process()])["relay"]
        self.topic_ids = self.plan.topic_ids
        self.collector = StatusCollector()
        self.spawn(timeout_s, target=target, extra_args=extra_args)

    PROPS: ClassVar[dict[str, Any]] = {
        "log_level": 0, "consumer.session.timeout.ms": 45_000,
        "consumer.heartbeat.interval.ms": 3_000}
    """Client properties of the benchmark's workers: a long session so that a SIGSTOP'd
    worker keeps its membership while the backlog is written."""

    def spawn(self, timeout_s: float, state_dir: str | None = None,
              target: Callable[..., Any] | None = None, extra_args: tuple[Any, ...] = ()) -> float:
        """Spawn one worker per task of the bootstrapped plan; wait until each is RUNNING.

        ``target(spec, *extra_args)`` replaces ``workers.main.run`` when given (the
        profiler's wrapper).

        Returns:
            Seconds from the spawn until every task reported RUNNING.
        """
        import multiprocess  # type: ignore[import-untyped]

        from workers.main import run
        from workers.protocol import TaskSpec

        plan = self.plan
        ctx = multiprocess.get_context("spawn")
        t0 = time.monotonic()
        self.procs = []
        for task in range(plan.task_count):
            spec = TaskSpec(process=plan.process, prefix=self.prefix, task=task,
                            task_count=plan.task_count, bootstrap_servers=self.bootstrap,
                            status_endpoint=self.collector.endpoint,
                            state_dir=state_dir or self.state_dir,
                            topic_ids=plan.topic_ids, partitions=plan.partitions,
                            kafka_properties=self.PROPS,
                            commit_interval_ms=self.commit_interval_ms)
            p = ctx.Process(target=target or run, args=(spec, *extra_args), daemon=True)
            with _engine_env(self.engine):
                p.start()  # a spawned process takes the environment at its start
            self.procs.append(p)
        deadline = time.monotonic() + timeout_s
        for p in self.procs:
            self.collector.wait_for(
                lambda m, pid=p.pid: m.get("pid") == pid and m.get("state") == "RUNNING",
                max(1.0, deadline - time.monotonic()), fail_on_stop=True)
        return time.monotonic() - t0

    def stop_workers(self) -> None:
        """SIGTERM every worker and wait (SIGKILL after 30 s); the collector stays open."""
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        for p in self.procs:
            p.join(30)
            if p.is_alive():
                p.kill()
                p.join(5)

    def pids(self) -> list[int]:
        """The workers' pids, in task order."""
        return [p.pid for p in self.procs]

    def last_status(self) -> list[dict[str, Any]]:
        """The latest status message of each worker."""
        out: dict[int, dict[str, Any]] = {}
        for m in self.collector.snapshot() if self.collector else []:
            if m.get("kind") == "status":
                out[m["pid"]] = m
        return [out[pid] for pid in self.pids() if pid in out]

    def finals(self) -> list[dict[str, Any]]:
        """The workers' final messages received so far."""
        snap = self.collector.snapshot() if self.collector else []
        return [m for m in snap if m.get("kind") == "final"]

    def stop(self) -> None:
        """SIGTERM every worker, wait (SIGKILL after 30 s), close the collector."""
        self.stop_workers()
        if self.collector is not None:
            time.sleep(0.2)
            self.collector.close()
            self.collector = None


@contextlib.contextmanager
def _engine_env(engine: str | None) -> Any:
    """``PARSLEY_ENGINE=engine`` in this process's environment for the block (unchanged
    for ``None``), restored after."""
    if engine is None:
        yield
        return
    old = os.environ.get("PARSLEY_ENGINE")
    os.environ["PARSLEY_ENGINE"] = engine
    try:
        yield
    finally:
        if old is None:
            del os.environ["PARSLEY_ENGINE"]
        else:
            os.environ["PARSLEY_ENGINE"] = old


def batch_relay_handler(out: Any) -> Callable[[Any, Any], Any]:
    """A batch handler (``Process.receives_batch``) sending each delivery's key, value and
    timestamp to ``out``: the relay of ``parsley-1-batch``."""
    from parsley import Effects

    def handle(deliveries: Any, state: Any) -> Any:
        b = Effects.builder()
        send = b.send
        for d in deliveries:
            send(out, d.key, d.value, timestamp=d.timestamp)
        return b.build()

    return handle


def relay_handler(out: Any) -> Callable[[Any, Any], Any]:
    """A handler sending each delivery's key and value to ``out``, as a user writes a relay:
    one ``Effects.send``, the send's timestamp left to default to the delivered one."""
    from parsley import Effects

    send = Effects.send

    def handle(delivery: Any, state: Any) -> Any:
        return send(out, delivery.key, delivery.value)

    return handle


# ----------------------------------------------------------------------------- phases


def _suspend(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).suspend()


def _resume(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).resume()


class Loader:
    """Writes stamped records; one idempotent producer per run (contiguous offsets)."""

    def __init__(self, bootstrap: str, size: int, frontier_header: bool,
                 topic_ids: dict[str, UUID]) -> None:
        self.producer = Producer(load.producer_config(bootstrap))
        self.size = size
        self.frontier_header = frontier_header
        self.unreceived = load.Unreceived().channels()
        self.topic_ids = topic_ids

    def plain(self, topic: str, partitions: int, seq: int, sent_us: int | None = None) -> None:
        """One PLAIN record on partition ``seq % partitions``."""
        headers = load.frontier_header(seq, self.unreceived) if self.frontier_header \
            else None
        self._produce(topic, seq % partitions, seq, load.make_value(load.PLAIN, seq, self.size,
                                                                   sent_us), headers)

    def pair(self, topics: dict[str, str], i: int, gap_s: float = 0.0) -> None:
        """Diamond pair ``i``: the held record, then (after ``gap_s``) its cause."""
        from parsley.engine.channel import ChannelId

        a = ChannelId(self.topic_ids[topics["a"]], 0)
        b = ChannelId(self.topic_ids[topics["b"]], 0)
        (t1, k1, h1), (t2, k2, h2) = load.diamond_pair(i, a, b, self.unreceived)
        self._produce(topics[t1], 0, i, load.make_value(k1, i, self.size), h1)
        if gap_s > 0:
            self.producer.poll(0)
            time.sleep(gap_s)
        self._produce(topics[t2], 0, i, load.make_value(k2, i, self.size), h2)

    def _produce(self, topic: str, partition: int, seq: int, value: bytes,
                 headers: Any) -> None:
        key = b"k%d" % (seq % 1024)
        while True:
            try:
                self.producer.produce(topic, value, key, partition=partition, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def flush(self) -> None:
        """Wait until every record is acknowledged."""
        left = self.producer.flush(120)
        if left:
            raise RuntimeError(f"{left} load records not acknowledged")


def run_one(kind: str, size: int, settings: Settings, bootstrap: str, admin: AdminClient,
            workdir: str, worker_patches: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run relay ``kind`` with ``size``-byte values; returns its figures (see module docs).

    ``worker_patches`` names :data:`perf.patches.PATCHES` to apply in the Parsley workers.

    Raises:
        RuntimeError: the relay did not start or did not relay the backlog in time.
    """
    tag = f"perf-{uuid.uuid4().hex[:8]}-{kind}-{size}"
    partitions = 2 if kind == "parsley-2" else 1
    diamond = kind == "diamond"
    ins = [f"{tag}-a", f"{tag}-b"] if diamond else [f"{tag}-in"]
    out = f"{tag}-out"
    create_topics(admin, [(t, partitions, {}) for t in ins]
                  + [(out, partitions, OUTPUT_CONFIG)])
    cond = conditions(kind, settings)
    load_avg = [round(x, 2) for x in os.getloadavg()]
    relay: Any
    if kind == "baseline":
        relay = BaselineRelay(bootstrap, ins[0], out, tag, settings.commit_interval_ms,
                              cond.consume_batch)
    elif kind in PEER_KINDS:
        from perf.peers import peer_relay

        relay = peer_relay(kind, bootstrap, ins[0], out, tag, cond.consume_batch)
    else:
        relay = ParsleyRelay(bootstrap, ins, out, tag, settings.commit_interval_ms,
                             tempfile.mkdtemp(prefix="state-", dir=workdir), ENGINES.get(kind),
                             batch=kind == "parsley-1-batch")
    _say(f"{kind} {size} B: starting the relay")
    t_start = time.monotonic()
    if worker_patches and isinstance(relay, ParsleyRelay):
        from perf.patches import patched_run

        relay.start(settings.timeout_s, target=patched_run, extra_args=(worker_patches,))
    else:
        relay.start(settings.timeout_s)
    startup_s = time.monotonic() - t_start
    sampler = WorkerSampler(relay.pids())
    reader = OutputReader(bootstrap, [out], sampler)
    loader = Loader(bootstrap, size, cond.frontier_header, relay.topic_ids)
    topics = {"a": ins[0], "b": ins[-1]}
    try:
        # warm-up
        seq = 0
        if diamond:
            loader.pair(topics, 0)
            seq = 1
            expected = 2
        else:
            for _ in range(partitions):
                loader.plain(ins[0], partitions, seq)
                seq += 1
            expected = partitions
        loader.flush()
        if not reader.read_until(expected, settings.timeout_s):
            raise RuntimeError(f"{kind}: warm-up records not relayed")
        warm = getattr(relay, "warmup_records", 0) and settings.messages
        if warm:  # a JVM's JIT compiles the hot path before the timed backlog (perf.peers)
            _say(f"{kind} {size} B: warming up with {warm} records (not timed)")
            for _ in range(warm):
                loader.plain(ins[0], partitions, seq)
                seq += 1
            loader.flush()
            expected += warm
            if not reader.read_until(expected, settings.timeout_s):
                raise RuntimeError(f"{kind}: warm-up backlog not relayed")
        # throughput
        n = cond.pairs if diamond else cond.backlog
        pids = relay.pids()
        _suspend(pids)
        try:
            first = seq
            for _ in range(n):
                if diamond:
                    loader.pair(topics, seq)
                else:
                    loader.plain(ins[0], partitions, seq)
                seq += 1
            loader.flush()
            cpu = CpuWindow(start=cpu_seconds(pids))
            resume_ms = load.now_us() / 1000.0
        finally:
            _resume(pids)
        mark = len(reader.records)
        backlog = cond.backlog
        _say(f"{kind} {size} B: draining {backlog} records")
        if not reader.read_until(mark + backlog, settings.timeout_s):
            raise RuntimeError(f"{kind}: only {len(reader.records) - mark} of {backlog} "
                               f"backlog records relayed in {settings.timeout_s} s")
        cpu.end = cpu_seconds(pids)
        drained = reader.since(mark)
        last_append = max(r.append_ms for r in drained)
        rate = throughput(backlog, resume_ms, last_append)
        del first
        # latency
        mark = len(reader.records)
        count = settings.latency_messages
        if diamond:
            count //= 2
            pair_rate = settings.latency_rate / 2
            interval = 1.0 / pair_rate
            start_seq = seq

            def send(i: int) -> None:
                loader.pair(topics, start_seq + i, gap_s=interval / 2)

            load.paced(count, pair_rate, send, lambda: loader.producer.poll(0))
            seq += count
            expected = 2 * count
        else:
            start_seq = seq

            def send(i: int) -> None:
                loader.plain(ins[0], partitions, start_seq + i)

            load.paced(count, settings.latency_rate, send, lambda: loader.producer.poll(0))
            seq += count
            expected = count
        loader.flush()
        if not reader.read_until(mark + expected, settings.timeout_s):
            raise RuntimeError(f"{kind}: latency records not all relayed")
        paced_records = reader.since(mark)
        lat = [(r.read_us - r.sent_us) / 1000.0 for r in paced_records]
        status = relay.last_status() if isinstance(relay, ParsleyRelay) else []
    finally:
        with contextlib.suppress(Exception):
            reader.close()
        relay.stop()
        parsley = isinstance(relay, ParsleyRelay)
        left = delete_topics(admin, [*ins, out], tag if parsley else None,
                             settle_s=settings.settle_s)
        if left:
            _say(f"{kind} {size} B: topics still listed {settings.settle_s:g} s after their "
                 f"deletion: {left}")
    per_pid = cpu.per_pid()
    cpu_s = [round(per_pid.get(pid, 0.0), 3) for pid in pids]
    total_cpu = sum(cpu_s)
    result: dict[str, Any] = {
        "kind": kind,
        "value_bytes": size,
        "load_avg": load_avg,
        "warmup_records": warm or 0,
        "tasks": len(pids) if isinstance(relay, ParsleyRelay) else 1,
        "engine": ENGINES.get(kind, "native") if isinstance(relay, ParsleyRelay) else None,
        "backlog_records": backlog,
        "msgs_per_s": rate,
        "startup_s": round(startup_s, 2),
        "latency": latency_summary(lat),
        "header_bytes_per_msg": header_bytes_per_message(paced_records),
        "worker_rss_bytes": max(sampler.peak_rss.values()) if sampler.peak_rss else None,
        "worker_cpu_s": cpu_s,
        "msgs_per_worker_cpu_s": backlog / total_cpu if total_cpu > 0 else None,
        "duplicates": duplicates(reader.records),
        "records_read": len(reader.records),
    }
    if worker_patches and kind != "baseline":
        result["worker_patches"] = list(worker_patches)
    if diamond:
        own, released = held_latencies_ms(paced_records)
        result["held"] = {"from_own_send": latency_summary(own),
                          "from_cause_send": latency_summary(released)}
    if status:
        result["worker_status"] = [
            {k: s.get(k) for k in ("task", "delivered", "commits", "commit_latency_ms",
                                   "held_total", "frontier_channels", "frontier_bytes",
                                   "rss_bytes")}
            for s in status
        ]
    _say(f"{kind} {size} B: {rate or 0:,.0f} msg/s, p50 {result['latency']['p50_ms']} ms, "
         f"p99 {result['latency']['p99_ms']} ms, CPU {cpu_s} s")
    return result
