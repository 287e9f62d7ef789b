"""Reproduce librdkafka's ``rd_kafka_enq_once_del_source_return`` abort with plain confluent-kafka.

A child process runs a loop of admin calls against one broker; the parent causes
outages (a shell command pair, or SIGSTOP/SIGCONT of the broker's pid) and counts
how many outages the child survives. A child that dies of SIGABRT is counted and
started again for the next outage; a child that dies otherwise (SIGSEGV) is counted
apart. Needs only confluent-kafka and the standard library; described in
docs/upstream/librdkafka-eonce-abort.md.

Examples: a frozen broker, a new client per round kept alive (10 aborts in 10 outages
with librdkafka 2.16.0)::

    python docs/upstream/eonce_abort_repro.py --bootstrap 127.0.0.1:39091 \\
        --pid BROKER_PID --fresh --keep-clients 20 --outages 10

a broker stopped and started again (its data kept), one client::

    python docs/upstream/eonce_abort_repro.py --bootstrap 127.0.0.1:39091 --calls dcg \\
        --down-cmd 'parsley-devbroker down --dir D --keep' \\
        --up-cmd 'parsley-devbroker up --dir D --port 39091' --outages 10

Exit status: 0 when no child aborted, 1 when at least one did.
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from typing import Any

CALLS = ("lcgo", "lcgo-stable", "dcg", "list_topics", "describe_topics")
"""The admin calls the child can make: ``list_consumer_group_offsets`` (``require_stable``
False / True), ``describe_consumer_groups``, ``list_topics``, ``describe_topics``."""


def _issue(admin: Any, call: str, args: argparse.Namespace) -> Any:
    """Start one admin call; returns a future (``list_topics`` runs in a thread)."""
    from concurrent.futures import Future

    from confluent_kafka import ConsumerGroupTopicPartitions, TopicCollection, TopicPartition

    rt = args.request_timeout
    if call in ("lcgo", "lcgo-stable"):
        request = [ConsumerGroupTopicPartitions(args.group, [TopicPartition(args.topic, 0)])]
        return admin.list_consumer_group_offsets(
            request, require_stable=call == "lcgo-stable", request_timeout=rt)[args.group]
    if call == "dcg":
        return admin.describe_consumer_groups([args.group], request_timeout=rt)[args.group]
    if call == "describe_topics":
        return admin.describe_topics(TopicCollection([args.topic]),
                                     request_timeout=rt)[args.topic]
    if call == "list_topics":
        future: Future[Any] = Future()

        def run() -> None:
            try:
                future.set_result(admin.list_topics(args.topic, timeout=rt))
            except Exception as exc:
                future.set_exception(exc)

        threading.Thread(target=run, daemon=True).start()
        return future
    raise SystemExit(f"unknown call {call!r}; one of {', '.join(CALLS)}")


def child(args: argparse.Namespace) -> None:
    """The admin loop: every ``--period`` s, ``--inflight`` calls of each ``--calls`` kind.

    Prints one line per round: ``round N ok=.. err=.. pending=..``.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    conf = {"bootstrap.servers": args.bootstrap, **dict(kv.split("=", 1) for kv in args.conf)}
    shared = AdminClient(conf)
    ok = err = waited_out = skipped = 0
    kept: list[Any] = []  # abandoned futures and per-round clients, kept alive
    outstanding: dict[tuple[str, int], Any] = {}  # slot -> its unanswered future
    n = 0
    while True:
        n += 1
        admin = AdminClient(conf) if args.fresh else shared
        futures = []
        for slot in [(call, i) for call in args.calls for i in range(args.inflight)]:
            if args.one_outstanding and slot in outstanding:
                if not outstanding[slot].done():
                    skipped += 1
                    continue
                del outstanding[slot]
            future = _issue(admin, slot[0], args)
            outstanding[slot] = future
            futures.append(future)
        if args.fresh and args.keep_clients:
            kept.append(admin)
            del kept[:-args.keep_clients]
        if args.abandon:
            kept.extend(futures)
        else:
            for f in futures:
                try:
                    f.result(timeout=args.result_timeout)
                    ok += 1
                except KafkaException:
                    err += 1
                except TimeoutError:
                    waited_out += 1
        del admin
        print(f"round {n} ok={ok} err={err} waited_out={waited_out} skipped={skipped}",
              flush=True)
        time.sleep(args.period)


def _outage(args: argparse.Namespace, down: bool) -> None:
    if args.pid:
        os.kill(args.pid, signal.SIGSTOP if down else signal.SIGCONT)
    else:
        cmd = args.down_cmd if down else args.up_cmd
        subprocess.run(shlex.split(cmd), check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


class Child:
    """The admin loop in a child process, its output read without blocking."""

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--child", *argv],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.last = ""
        self.out = b""
        self.err = b""

    def pump(self, seconds: float) -> None:
        """Read the child's output for ``seconds`` (or until it exits)."""
        end = time.monotonic() + seconds
        assert self.proc.stdout is not None and self.proc.stderr is not None
        while time.monotonic() < end:
            ready, _, _ = select.select([self.proc.stdout, self.proc.stderr], [], [],
                                        max(0.0, end - time.monotonic()))
            for stream in ready:
                data = os.read(stream.fileno(), 65536)
                if stream is self.proc.stderr:
                    self.err += data
                else:
                    self.out = (self.out + data)[-4096:]
                    lines = self.out.split(b"\n")[:-1]
                    if lines:
                        self.last = lines[-1].decode()
            if self.proc.poll() is not None and not ready:
                return

    def rounds(self) -> int:
        return int(self.last.split()[1]) if self.last.startswith("round ") else 0


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    aborts = other = 0
    child = Child(argv)
    for i in range(1, args.outages + 1):
        before = child.rounds()
        child.pump(args.up_s)
        if child.rounds() == before and child.proc.poll() is None:
            print(f"outage {i}: the loop made no progress in {args.up_s:g} s before it",
                  flush=True)
        _outage(args, down=True)
        t0 = time.monotonic()
        child.pump(args.down_s)
        _outage(args, down=False)
        back = time.monotonic() - t0
        child.pump(args.settle_s)
        rc = child.proc.poll()
        verdict = "survived" if rc is None else f"child exited {rc}"
        print(f"outage {i}: down {back:.1f} s, {verdict}; last: {child.last}", flush=True)
        if rc is not None:
            tail = [line for line in child.err.decode(errors="replace").splitlines()
                    if "Assertion" in line or "assert" in line]
            for line in tail[-3:]:
                print(f"    {line}", flush=True)
            if rc == -signal.SIGABRT:
                aborts += 1
            else:
                other += 1
            child = Child(argv)
    child.proc.kill()
    child.proc.wait()
    print(f"{aborts} aborts in {args.outages} outages ({other} other exits)", flush=True)
    return 1 if aborts else 0


def main() -> int:
    assert __doc__ is not None
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(description=head, epilog=rest,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="bootstrap.servers")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--pid", type=int, help="freeze this broker pid (SIGSTOP/SIGCONT)")
    how.add_argument("--down-cmd", help="shell command that stops the broker")
    p.add_argument("--up-cmd", help="shell command that starts it again (with --down-cmd)")
    p.add_argument("--outages", type=int, default=10, help="how many outages")
    p.add_argument("--down-s", type=float, default=5.0, help="outage length, s")
    p.add_argument("--up-s", type=float, default=5.0, help="time before each outage, s")
    p.add_argument("--settle-s", type=float, default=10.0,
                   help="time after the broker is back before judging, s")
    p.add_argument("--calls", default="lcgo", type=lambda s: s.split(","),
                   help=f"comma-separated, of {', '.join(CALLS)} (lcgo: "
                   "list_consumer_group_offsets, dcg: describe_consumer_groups)")
    p.add_argument("--inflight", type=int, default=1, help="calls of each kind per round")
    p.add_argument("--request-timeout", type=float, default=1.0, help="request_timeout, s")
    p.add_argument("--result-timeout", type=float, default=5.0,
                   help="how long each future is awaited, s")
    p.add_argument("--period", type=float, default=0.2, help="pause between rounds, s")
    p.add_argument("--fresh", action="store_true", help="a new AdminClient each round")
    p.add_argument("--keep-clients", type=int, default=0,
                   help="with --fresh: keep the last N clients alive (0: drop each)")
    p.add_argument("--abandon", action="store_true", help="never await the futures")
    p.add_argument("--one-outstanding", action="store_true",
                   help="issue no call of a kind while its previous one is unanswered")
    p.add_argument("--group", default="repro-group")
    p.add_argument("--topic", default="repro-topic")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra client property (repeatable)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    argv = [a for a in sys.argv[1:] if a != "--child"]
    args = p.parse_args()
    if args.child:
        child(args)
        return 0
    if not args.pid and not (args.down_cmd and args.up_cmd):
        p.error("give --pid, or --down-cmd and --up-cmd")
    return parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())
