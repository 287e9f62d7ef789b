"""The worker bounds its own blocking client calls (docs/operations.md, "Bounded client calls").

A private broker (never the shared one) is restarted under a running worker; the
transaction it opens next blocks in ``send_offsets_to_transaction`` far past the
client's own timeout argument (librdkafka ignores it there). Then:

* the worker's watchdog ends it within the call's bound: the final report is SUBSTRATE,
  its detail names the call and how long it was blocked, and the exit code is
  SUBSTRATE's, so the coordinator restarts it under ``transient`` and stops with that
  detail under ``never``;
* SIGTERM still ends a worker blocked in such a call, within the stop grace.

And with the broker frozen (SIGSTOP) while a transaction is open, the client does time
out; the worker's stop then blocks in closing its consumer, and the final report still
gives the commit's failure (naming the close that blocked), not only the close.

Nothing of a blocked transaction is committed (an independent ``read_committed`` reader).
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

from devtools import devbroker
from devtools.devbroker import BrokerState
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import bounce, private_broker
from devtools.worker_support import StatusCollector, bootstrap, make_spec, read_committed, spawn
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES
from workers.protocol import EXIT_CODES, StopKind
from workers.watchdog import STOP_GRACE_S, bound_of

SELF_FENCED = "the task's static group member was fenced, but no other live member"
COMMIT_CALL = re.compile(r"^(send_offsets_to_transaction|flush|commit_transaction) blocked "
                         r"(\d+\.\d) s \(bound (\d+) s\)")


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("watchdog") / "broker"


@pytest.fixture(scope="module")
def broker(broker_dir: Path) -> Iterator[BrokerState]:
    with private_broker(broker_dir) as state:
        yield state


def _slow_relay(source: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if delivery.value == b"slow":
            time.sleep(3.0)  # the test freezes the broker meanwhile
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process("frozen").receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _running_worker(broker: BrokerState, tmp_path: Path, name: str) -> tuple[Any, Any, str, str]:
    """A RUNNING worker that committed once; returns (worker, collector, src, out)."""
    bs = broker.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    src = create_topic(admin, unique_name("src", name))
    out = create_topic(admin, unique_name("out", name))
    process = _slow_relay(src.name, out.name)
    topics = {src.name: src, out.name: out}
    prefix = unique_name("app", name)
    bootstrap(admin, prefix, process, topics)
    collector = StatusCollector()
    spec = make_spec(process, prefix, bs, collector.endpoint, str(tmp_path / "state"), topics,
                     status_interval_ms=300)
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


def _blocked_after_a_restart(broker: BrokerState, data_dir: Path, tmp_path: Path,
                             name: str) -> tuple[Any, Any, str]:
    """A worker whose next transaction follows a broker restart; (worker, collector, out)."""
    worker, collector, src, out = _running_worker(broker, tmp_path, name)
    bounce(data_dir, broker, down_s=3.0)
    _produce(broker.bootstrap, src, b"after")
    return worker, collector, out


def _final(collector: Any, pid: int, timeout_s: float) -> dict[str, Any]:
    return collector.wait_for(lambda m: m["kind"] == "final" and m["pid"] == pid,
                              timeout_s=timeout_s)


def test_a_commit_blocked_past_its_bound_stops_the_worker_naming_the_call(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, out = _blocked_after_a_restart(broker, broker_dir, tmp_path,
                                                      "watchdog-bound")
    produced = time.monotonic()
    try:
        final = _final(collector, worker.pid, timeout_s=bound_of("init_transactions") + 30)
        worker.join(10)
        took = time.monotonic() - produced
    finally:
        collector.close()
    print(f"final {took:.1f} s after the input: {final['failure_detail']}")
    assert final["stop_kind"] == StopKind.SUBSTRATE.value, final
    detail = final["failure_detail"] or ""
    if not detail.startswith(SELF_FENCED):
        # Otherwise the broker fenced the worker's own static member first (seen after
        # a restart): a SUBSTRATE stop too, docs/operations.md "Fenced: a successor or
        # a timeout".
        match = COMMIT_CALL.match(detail)
        assert match, detail
        # The detail rounds to 0.1 s: a call 25.04 s past its start reads "blocked 25.0 s".
        assert float(match.group(2)) >= float(match.group(3)) == bound_of(match.group(1))
    assert worker.exitcode == EXIT_CODES[StopKind.SUBSTRATE]
    assert _values(broker, out) == [b"relayed:first"], "nothing of the blocked transaction"


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


def test_sigterm_ends_a_worker_blocked_in_a_commit(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, out = _blocked_after_a_restart(broker, broker_dir, tmp_path,
                                                      "watchdog-term")
    try:
        time.sleep(8.0)  # past the client's own timeout argument: the call is blocked
        asked = time.monotonic()
        os.kill(worker.pid, signal.SIGTERM)
        worker.join(STOP_GRACE_S + 10)
        took = time.monotonic() - asked
        assert not worker.is_alive(), "SIGTERM did not end the blocked worker"
        final = _final(collector, worker.pid, timeout_s=5)
    finally:
        collector.close()
    print(f"exited {took:.1f} s after SIGTERM: {final['failure_detail']}")
    assert took < STOP_GRACE_S + 5
    assert final["stop_kind"] == StopKind.SUBSTRATE.value
    detail = final["failure_detail"] or ""
    # After a broker restart the broker may fence the worker's own static member while
    # the commit is blocked; that ends the worker as SUBSTRATE too (docs/operations.md,
    # "Fenced: a successor or a timeout"). Either way it ended within the stop bound.
    assert detail.startswith(("asked to stop while blocked in ", SELF_FENCED)), final
    assert _values(broker, out) == [b"relayed:first"]


def test_a_stop_blocked_in_closing_still_reports_why_it_stopped(
    broker: BrokerState, broker_dir: Path, tmp_path: Path
) -> None:
    worker, collector, src, out = _running_worker(broker, tmp_path, "watchdog-close")
    _produce(broker.bootstrap, src, b"slow")
    time.sleep(1.5)  # the worker fetched it and sleeps in the handler, its transaction open
    now = devbroker.running(broker_dir)  # restarted by the tests before: a new pid
    assert now is not None
    os.kill(now.pid, signal.SIGSTOP)
    try:
        final = _final(collector, worker.pid, timeout_s=bound_of("init_transactions") + 30)
        worker.join(10)
    finally:
        os.kill(now.pid, signal.SIGCONT)
        collector.close()
    print(f"final: {final['failure_detail']}")
    assert final["stop_kind"] == StopKind.SUBSTRATE.value
    detail = final["failure_detail"] or ""
    assert not detail.startswith("close blocked"), detail
    assert worker.exitcode == EXIT_CODES[StopKind.SUBSTRATE]
    assert _values(broker, out) == [b"relayed:first"]
