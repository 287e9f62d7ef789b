"""The worker bounds its own blocking client calls and recovers in place (docs/operations.md,
"Bounded client calls", "The task timeout").

A private broker (never the shared one) is restarted or frozen under a running worker:

* restarted (3 s down), the worker recovers in place: the same worker relays the next
  input exactly once, its status counting the recovery. Before, its next
  ``send_offsets_to_transaction`` blocked past the call's bound (librdkafka keeps a stale
  coordinator in the transactional producer and ignores the timeout there) and the
  watchdog ended the worker SUBSTRATE;
* frozen (SIGSTOP) with a transaction open, SIGTERM still ends a worker blocked in its
  commit within the stop grace;
* frozen past a short task timeout, the worker stops SUBSTRATE naming the timeout and its
  last failure; its stop then blocks in closing a client, and the final report still
  gives why it stopped (naming the close that blocked), not only the close.

Nothing of a blocked transaction is committed (an independent ``read_committed`` reader).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from devtools import devbroker
from devtools.devbroker import BrokerState
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import PrivateBroker, bounce
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES
from workers.protocol import EXIT_CODES, StopKind
from workers.watchdog import STOP_GRACE_S, bound_of


@pytest.fixture
def broker_dir(private_kafka: PrivateBroker) -> Path:
    return private_kafka.data_dir


@pytest.fixture
def broker(private_kafka: PrivateBroker) -> BrokerState:
    return private_kafka.state


def _slow_relay(source: str, out_name: str, handling: Path) -> Process:
    """A relay whose handler, given ``slow``, creates the file ``handling`` and sleeps 3 s."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if delivery.value == b"slow":
            handling.touch()
            time.sleep(3.0)  # the test freezes the broker meanwhile
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process("frozen").receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _running_worker(broker: BrokerState, tmp_path: Path, name: str,
                    **spec_args: Any) -> tuple[Any, Any, str, str]:
    """A RUNNING worker that committed once; returns (worker, collector, src, out)."""
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    src = create_topic(admin, unique_name("src", name))
    out = create_topic(admin, unique_name("out", name))
    process = _slow_relay(src.name, out.name, tmp_path / "handling")
    topics = {src.name: src, out.name: out}
    prefix = unique_name("app", name)
    bootstrap(admin, prefix, process, topics)
    collector = StatusCollector()
    spec = make_spec(process, prefix, bs, collector.endpoint, str(tmp_path / "state"), topics,
                     status_interval_ms=300, **spec_args)
    worker = spawn(spec)
    collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                       and m["state"] == "RUNNING", timeout_s=90)
    _produce(bs, src.name, b"first")
    collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                       and m["commits"] >= 1, timeout_s=60)
    return worker, collector, src.name, out.name


def _produce(bootstrap_servers: str, topic: str, value: bytes) -> None:
    producer = Producer({"bootstrap.servers": bootstrap_servers, **QUIET})
    producer.produce(topic, key=b"k", value=value, partition=0)
    assert producer.flush(60) == 0


def _final(collector: Any, pid: int, timeout_s: float) -> dict[str, Any]:
    return collector.wait_for(lambda m: m["kind"] == "final" and m["pid"] == pid,
                              timeout_s=timeout_s)


def test_a_broker_restart_under_a_running_worker_is_recovered_in_place(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, src, out = _running_worker(broker, tmp_path, "watchdog-restart")
    try:
        bounce(broker_dir, broker, down_s=3.0)
        _produce(broker.bootstrap, src, b"after")
        resumed = collector.wait_for(
            lambda m: m["kind"] == "status" and m["pid"] == worker.pid
            and m.get("recoveries", 0) >= 1 and m["state"] == "RUNNING" and m["lag"] == 0
            and m["commits"] >= 2, timeout_s=bound_of("init_transactions") + 60,
            fail_on_stop=True)
        assert worker.is_alive()
        values = _values(broker, out)
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]
    finally:
        collector.close()
    print(f"recovered in place: {resumed['recoveries']} recovery(ies), "
          f"{resumed['metrics']['aborts']} abort(s)")
    assert values == [b"relayed:first", b"relayed:after"], "each input once"


def _values(broker: BrokerState, out: str) -> list[bytes | None]:
    """The committed values of ``out``; retried while a thawed broker's metadata settles."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return [r.value for r in read_committed(broker.bootstrap, out)]
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _frozen_in_a_transaction(broker: BrokerState, broker_dir: Path, tmp_path: Path, name: str,
                              **spec: Any) -> tuple[Any, Any, str, int]:
    """A worker whose transaction is open (its handler sleeps 3 s) when the broker is frozen
    (SIGSTOP); (worker, collector, out, frozen broker pid): the caller sends SIGCONT."""
    worker, collector, src, out = _running_worker(broker, tmp_path, name, **spec)
    _produce(broker.bootstrap, src, b"slow")
    # The worker fetched it and sleeps in the handler, its transaction open.
    deadline = time.monotonic() + 60
    while not (tmp_path / "handling").exists():
        assert time.monotonic() < deadline, "the worker never handled the slow record"
        time.sleep(0.05)
    now = devbroker.running(broker_dir)  # restarted by the tests before: a new pid
    assert now is not None
    os.kill(now.pid, signal.SIGSTOP)
    return worker, collector, out, now.pid


def test_sigterm_ends_a_worker_blocked_in_a_commit(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, out, frozen = _frozen_in_a_transaction(broker, broker_dir, tmp_path,
                                                              "watchdog-term")
    try:
        time.sleep(4.0)  # the handler returned; the commit waits on the frozen broker
        asked = time.monotonic()
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(STOP_GRACE_S + 10)
        took = time.monotonic() - asked
        assert not worker.is_alive(), "SIGTERM did not end the blocked worker"
        final = _final(collector, worker.pid, timeout_s=5)
    finally:
        os.kill(frozen, signal.SIGCONT)
        collector.close()
    print(f"exited {took:.1f} s after SIGTERM: {final['failure_detail']}")
    assert took < STOP_GRACE_S + 5
    assert final["stop_kind"] == StopKind.SUBSTRATE.value, final
    assert (final["failure_detail"] or "").startswith("asked to stop while blocked in "), final
    assert _values(broker, out) == [b"relayed:first"]


def test_a_task_timeout_stop_blocked_in_closing_still_reports_why_it_stopped(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, out, frozen = _frozen_in_a_transaction(
        broker, broker_dir, tmp_path, "watchdog-close", task_timeout_ms=15_000)
    try:
        final = _final(collector, worker.pid, timeout_s=bound_of("init_transactions") + 60)
        worker.join(10)
    finally:
        os.kill(frozen, signal.SIGCONT)
        collector.close()
    print(f"final: {final['failure_detail']}")
    assert final["stop_kind"] == StopKind.SUBSTRATE.value
    detail = final["failure_detail"] or ""
    assert not detail.startswith("close blocked"), detail
    assert "task_timeout_ms=15000" in detail, detail
    assert worker.exitcode == EXIT_CODES[StopKind.SUBSTRATE]
    assert _values(broker, out) == [b"relayed:first"]
