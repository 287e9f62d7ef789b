"""A process under load resumes by itself after a broker outage, exactly once.

A private broker (fixture ``private_kafka``; the shared one is never stopped) carries a
2-task relay started through ``Parsley.start`` with ``restart="transient"``. A producer
writes numbered inputs throughout. The broker is stopped for about 20 s and started again
on the same port and data. The workers stop (a substrate failure) and the coordinator
restarts the process through its bootstrap; every restart attempt uses fresh Kafka clients
and bounds each admin call itself, so a client wedged by the outage cannot time every
attempt out (docs/operations.md, "Broker outage"). Verdict by an independent
``read_committed`` consumer: every input relayed exactly once, and the process RUNNING
again within a generous bound of the broker answering.
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools import broker_log, devbroker
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import PrivateBroker
from devtools.worker_support import read_committed
from tests.e2e.test_coordinator_relay import relay

RESUME_BOUND_S = 90.0
"""Liveness bound: the process is RUNNING and caught up this long after the broker answers."""


class _Load:
    """Numbered inputs to both partitions at ~40/s from a thread, riding through the outage."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                                   "linger.ms": 5, "message.timeout.ms": 300_000, **QUIET})
        self._topic = topic
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            n = self.sent
            self._producer.produce(self._topic, key=b"p%d" % (n % 2), value=b"v%d" % n,
                                   partition=n % 2)
            self.sent += 1
            self._producer.poll(0)
            time.sleep(0.025)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        assert self._producer.flush(120) == 0, "inputs not all delivered"


def _relayed(bootstrap: str, topic: str) -> int:
    """Records committed on ``topic`` now; -1 while a read cannot reach its end."""
    try:
        return len(read_committed(bootstrap, topic, (0, 1), timeout_s=20))
    except AssertionError:
        return -1


def _wait(pred: Any, timeout_s: float, what: str,
          explain: Any = lambda: "") -> None:
    """Poll ``pred`` until true; on timeout fail with ``explain()`` appended."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() >= deadline:
            try:
                why = explain()
            except Exception as exc:  # a sick broker: the timeout is still the failure
                why = f"\n(what holds it could not be read: {type(exc).__name__}: {exc})"
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}{why}")
        time.sleep(0.2)


def _tool(bootstrap: str, *args: str) -> str:
    """One ``kafka-transactions`` command's output (the runbooks' tool), or why it failed."""
    argv = devbroker.tool_argv("kafka-transactions", ["--bootstrap-server", bootstrap, *args])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        return "(timed out after 30 s)"
    return (out.stdout + out.stderr).strip() or f"(no output, exit {out.returncode})"


def _open_transactions(bootstrap: str, prefix: str, log: Path, status: Any) -> str:
    """What holds a stalled resume, for the failure message: each task's status, the
    application's transactions (``kafka-transactions list``), the producers with an open
    transaction on each of the application's internal topics' partitions
    (``describe-producers``, the runbooks' "restore makes no progress"), and the broker
    log's errors."""
    listed = _tool(bootstrap, "list").splitlines()
    lines = ["", "status:", *(f"  {t}" for t in status.tasks),
             "kafka-transactions list (this application's):",
             *(line for n, line in enumerate(listed) if n == 0 or prefix in line)]
    admin = AdminClient({"bootstrap.servers": bootstrap, **QUIET})
    topics = admin.list_topics(timeout=20).topics
    for name in sorted(t for t in topics if t.startswith(prefix)):
        for p in sorted(topics[name].partitions):
            lines += [f"describe-producers {name}[{p}]:",
                      _tool(bootstrap, "describe-producers", "--topic", name,
                            "--partition", str(p))]
    # Kafka's transaction coordinator completes a transaction without writing its marker
    # to a partition that has no leader at that moment ("likely deleted already", its
    # TransactionMarkerChannelManager), which leaves that partition's transaction open.
    lines += ["broker log errors:", broker_log.log_errors(log),
              "broker log, transaction markers skipped for a partition without a leader:",
              broker_log.log_matching(log, "likely deleted already")]
    return "\n".join(lines)


def test_a_relay_under_load_resumes_by_itself_after_a_broker_outage(
        private_kafka: PrivateBroker, tmp_path: Path) -> None:
    data_dir, state = private_kafka.data_dir, private_kafka.state
    handle: Parsley | None = None
    load: _Load | None = None
    try:
        bs = state.bootstrap
        admin = AdminClient({"bootstrap.servers": bs, **QUIET})
        src = create_topic(admin, unique_name("src", "outage"), partitions=2)
        out = create_topic(admin, unique_name("out", "outage"), partitions=2)
        del admin
        config = ParsleyConfig(bs, f"outage-{uuid.uuid4().hex[:6]}",
                               state_dir=str(tmp_path / "state"), status_interval_ms=300)
        handle = Parsley.start(config, relay("relay", src.name, out.name),
                               restart="transient", control=None)
        load = _Load(bs, src.name)
        _wait(lambda: _relayed(bs, out.name) >= 40, 90,
              "the relay to run under load")

        devbroker.down(data_dir, keep=True)
        time.sleep(20.0)
        state2, _ = devbroker.up(data_dir, port=state.port, warm=True)
        answered = time.monotonic()
        assert state2.bootstrap == bs
        time.sleep(5.0)  # some load after the outage too
        load.stop()
        sent = load.sent

        def caught_up() -> bool:
            st = handle.status()["relay"]
            if st.state is ProcessState.STOPPED:
                raise AssertionError(f"the process stopped for good: {st.refusal_reason} "
                                     f"{st.failure_detail}")
            return (st.state is ProcessState.RUNNING and len(st.tasks) == 2
                    and _relayed(bs, out.name) >= sent)

        _wait(caught_up, RESUME_BOUND_S, "the process to resume and relay every input",
              lambda: _open_transactions(bs, config.application_id_prefix, state2.log_path,
                                         handle.status()["relay"]))
        resumed_s = time.monotonic() - answered
        assert resumed_s < RESUME_BOUND_S
        time.sleep(1.0)
        inputs = [r.value for r in read_committed(bs, src.name, (0, 1))]
        outputs = [r.value for r in read_committed(bs, out.name, (0, 1))]
        assert len(inputs) == sent == len(set(inputs))
        counts = Counter(outputs)
        missing = [v for v in inputs if counts[b"relayed:" + v] == 0]
        duplicated = [v for v, c in counts.items() if c > 1]
        assert not missing and not duplicated and len(outputs) == len(inputs), (
            f"{len(missing)} lost, {len(duplicated)} duplicated of {len(inputs)}")
        # Input partition p carries key p<p>; its outputs keep its order on their partition.
        out_records = read_committed(bs, out.name, (0, 1))
        for p in (0, 1):
            ins = [r.value for r in read_committed(bs, src.name, (p,))]
            outs = [r.value.split(b":", 1)[1] for r in out_records if r.key == b"p%d" % p]
            assert outs == ins, f"input partition {p}'s outputs are out of order"
        print(f"resumed {resumed_s:.1f} s after the broker answered; {sent} inputs, "
              f"restarts {handle.status()['relay'].restarts}")
    finally:
        if load is not None:
            load._stop.set()
        if handle is not None:
            handle.close(deadline_s=20)
