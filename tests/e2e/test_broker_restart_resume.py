"""After a broker restart, every task of a process resumes by itself, exactly once.

A private broker (the shared one is never restarted) carries an idle 2-task relay run
through ``Parsley.start`` under ``--restart transient``. The broker is stopped (data
kept) and started again about 3 s later on the same port; then 20 inputs are produced.
Every blocking client call of a worker is bounded by the worker itself
(docs/operations.md, "Bounded client calls"), so a call the client never returns from
after the restart ends the worker as a SUBSTRATE stop naming the call, and the process
is restarted through its bootstrap. Verdict: every task RUNNING again, the 20 inputs
relayed exactly once (an independent ``read_committed`` reader), within a generous
liveness bound of the broker answering.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET, create_topic, unique_name
from devtools.private_broker import PrivateBroker, bounce
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

RESUME_BOUND_S = 90.0
"""Generous liveness bound on "relayed everything after the broker answered", s."""


def relay(name: str, source: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _running(parsley: Parsley, name: str, width: int) -> bool:
    st = parsley.status()[name]
    return (st.state is ProcessState.RUNNING and len(st.tasks) == width
            and all(t.state == "RUNNING" and not t.stale for t in st.tasks))


def test_tasks_resume_by_themselves_after_a_broker_restart(
        private_kafka: PrivateBroker, tmp_path: Path) -> None:
    data_dir, state = private_kafka.data_dir, private_kafka.state
    bs = state.bootstrap
    admin = AdminClient({"bootstrap.servers": bs, **QUIET})
    src = create_topic(admin, unique_name("src", "restart-resume"), partitions=2)
    out = create_topic(admin, unique_name("out", "restart-resume"), partitions=2)
    config = ParsleyConfig(bs, f"rr-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path / "s"),
                           status_interval_ms=300)
    with Parsley.start(config, relay("relay", src.name, out.name), restart="transient",
                       backoff_s=0.5, control=None) as parsley:
        _wait(lambda: _running(parsley, "relay", 2), 90, "two RUNNING tasks")
        producer = Producer({"bootstrap.servers": bs, **QUIET})
        expected = []
        for i in range(4):  # each task commits before the restart
            value = b"before%d" % i
            producer.produce(src.name, key=b"k", value=value, partition=i % 2)
            expected.append(b"relayed:" + value)
        assert producer.flush(30) == 0
        _wait(lambda: len(read_committed(bs, out.name, (0, 1))) >= 4, 60, "4 relayed")
        time.sleep(2.0)  # idle
        answered = bounce(data_dir, state, down_s=3.0)
        for i in range(20):
            value = b"v%02d" % i
            producer.produce(src.name, key=b"k", value=value, partition=i % 2)
            expected.append(b"relayed:" + value)
        assert producer.flush(60) == 0
        _wait(lambda: len(read_committed(bs, out.name, (0, 1))) >= 24
              and _running(parsley, "relay", 2), RESUME_BOUND_S + 30,
              "20 relayed and every task RUNNING")
        resumed_s = time.monotonic() - answered
        st = parsley.status()["relay"]
        print(f"resumed {resumed_s:.1f} s after the broker answered; "
              f"restarts {st.restarts}")
        assert resumed_s < RESUME_BOUND_S
        time.sleep(1.0)
        values = sorted(r.value for r in read_committed(bs, out.name, (0, 1)))
        assert values == sorted(expected), "exactly once"
        assert parsley.healthy()
