"""Worker throughput for a simple relay: one task, 100-byte values, on a real broker.

Pre-produces N records to a one-partition topic, bootstraps a process that relays each
record unchanged (BYTES serdes, no store), spawns one worker and measures, from the
worker's status messages, the time from its first RUNNING status to ``delivered == N``
and ``lag == 0``. Prints messages/s.

Usage: KAFKA_BOOTSTRAP_SERVERS=host:port python perf/bench_worker_relay.py [N]
Add ``--profile`` to run the worker in-process under cProfile instead (top 25 by tottime).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, create_topic
from devtools.status_collector import StatusCollector
from devtools.worker_support import bootstrap, make_spec, spawn, stop_worker
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES


def relay(out_name: str):  # type: ignore[no-untyped-def]
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery, state):  # type: ignore[no-untyped-def]
        return Effects.builder().send(out, delivery.key, delivery.value).build()

    return handle


def main() -> None:
    bs = os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    n = int(args[0]) if args else 200_000
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    tag = uuid.uuid4().hex[:8]
    inp = create_topic(admin, f"bench-in-{tag}")
    out = create_topic(admin, f"bench-out-{tag}")
    process = (Process("relay").receives(Channel(inp.name, BYTES, BYTES), relay(out.name))
               .sends(Channel(out.name, BYTES, BYTES)))
    topics = {inp.name: inp, out.name: out}
    prefix = f"bench-{tag}"
    bootstrap(admin, prefix, process, topics)
    producer = Producer({"bootstrap.servers": bs, "linger.ms": 20, **QUIET})
    value = b"v" * 100
    for i in range(n):
        while True:
            try:
                producer.produce(inp.name, key=b"%d" % (i % 1000), value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(60)
    collector = StatusCollector()
    state_dir = tempfile.mkdtemp(prefix="bench-worker-")
    spec = make_spec(process, prefix, bs, collector.endpoint, state_dir, topics,
                     status_interval_ms=250)
    if "--profile" in sys.argv:
        import cProfile
        import pstats
        import threading

        from workers.main import run

        def stopper() -> None:
            collector.wait_for(lambda m: m["kind"] == "status" and m["delivered"] >= n,
                               timeout_s=600)
            os.kill(os.getpid(), 15)

        threading.Thread(target=stopper, daemon=True).start()
        prof = cProfile.Profile()
        prof.runcall(run, spec)
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        collector.close()
        return
    worker = spawn(spec)
    first = collector.wait_for(lambda m: m["kind"] == "status" and m["state"] == "RUNNING",
                               timeout_s=120)
    t0 = first["sent_ms"]
    done = collector.wait_for(lambda m: m["kind"] == "status" and m["delivered"] >= n
                              and m["lag"] == 0, timeout_s=600)
    elapsed = (done["sent_ms"] - t0) / 1000
    import psutil

    cpu = psutil.Process(worker.pid).cpu_times()
    print(f"worker CPU {cpu.user + cpu.system:.1f} s in all (start-up included): "
          f"{(cpu.user + cpu.system) / n * 1e6:.0f} us per message")
    print(f"relay of {n} x 100-byte records, one task: {elapsed:.1f} s, "
          f"{n / elapsed:,.0f} messages/s; commits {done['commits']}, last commit "
          f"{done['commit_latency_ms']:.1f} ms, rss {done['rss_bytes'] / 2**20:.0f} MiB, "
          f"cpu {done['cpu_percent']:.0f} %")
    stop_worker(worker)
    collector.close()
    admin.delete_topics([inp.name, out.name])


if __name__ == "__main__":
    main()
