"""``Parsley.start`` end to end with the real worker (workers/main.py) on the real broker.

A relay process runs through the coordinator: bootstrap, one spawned worker per
task, status over ZeroMQ, a clean bounded close. A real refusal in one task
(an undecodable ``parsley.causes`` header on partition 1) stops every task of
that process while another process keeps running, and the seed's "Log the
status" snippet works. A refused start leaves nothing running.
"""

from __future__ import annotations

import logging
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Producer

from coordinator import Parsley, ParsleyConfig
from coordinator.bootstrap import StartError
from coordinator.control.status import ProcessState
from coordinator.control.status_socket import Outcome, request
from devtools.devbroker import BROKER_MAIN
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Reason
from parsley.serdes import BYTES
from tests.seed_shapes import assert_seed_shape

INTERVAL_MS = 300


def relay(name: str, source: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes],
             headers: list[tuple[str, bytes]] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=partition, headers=headers)
    assert producer.flush(30) == 0


def _config(bootstrap: str, tmp_path: Path) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"e2e-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=INTERVAL_MS)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _children() -> list[psutil.Process]:
    """Live child processes, except multiprocess's shared resource tracker and a Kafka
    broker the session started itself (a plain ``pytest`` with no
    ``KAFKA_BOOTSTRAP_SERVERS`` runs ``parsley-devbroker`` as its child)."""
    return [c for c in psutil.Process().children(recursive=True)
            if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
            and not any("resource_tracker" in part or part == BROKER_MAIN
                        for part in c.cmdline())]


@pytest.mark.slow
def test_relay_runs_through_parsley_start_and_closes_cleanly(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    _produce(kafka_bootstrap, src.name, 0, [b"a0", b"a1"])
    _produce(kafka_bootstrap, src.name, 1, [b"b0"])
    config = _config(kafka_bootstrap, tmp_path)
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) == 3, 90,
              "three relayed records")
        _wait(lambda: parsley.status()["relay"].state is ProcessState.RUNNING
              and len(parsley.status()["relay"].tasks) == 2, 30, "two RUNNING tasks")
        assert parsley.healthy()
        values = sorted(r.value for r in read_committed(kafka_bootstrap, out.name, (0, 1)))
        assert values == [b"relayed:a0", b"relayed:a1", b"relayed:b0"]
        st = parsley.status()["relay"]
        assert [t.task for t in st.tasks] == [0, 1]
        _wait(lambda: all(t.updated_ms_ago <= INTERVAL_MS and not t.stale
                          for t in parsley.status()["relay"].tasks), 10, "fresh task entries")
        assert all(t.budget_bytes == 262144 and t.lag == 0 for t in st.tasks)
        reply = request(parsley.control_endpoint or "", {"op": "status"})
        assert reply["outcome"] == Outcome.OK.value
        assert reply["status"]["processes"]["relay"]["state"] == "RUNNING"
        report = parsley.close(deadline_s=20)
        assert report.clean, report.summary()
    st = parsley.status()["relay"]
    assert st.state is ProcessState.STOPPED
    assert st.refusal_reason is None and st.failure_detail is None, "closed by the application"
    assert _children() == []


@pytest.mark.slow
def test_real_refusal_stops_its_process_others_keep_running_and_status_is_logged(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    bad_src = create_topic(partitions=2)
    bad_out = create_topic(partitions=2)
    good_src = create_topic(partitions=1)
    good_out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path)
    log = logging.getLogger("shipper")
    with Parsley.start(config, relay("bad", bad_src.name, bad_out.name),
                       relay("good", good_src.name, good_out.name)) as parsley:
        _wait(lambda: all(len(parsley.status()[n].tasks) == w for n, w in
                          (("bad", 2), ("good", 1))), 60, "every task reporting")
        # A truncated causes header on partition 1 of bad's input: task 1 refuses.
        _produce(kafka_bootstrap, bad_src.name, 1, [b"x"], headers=[("parsley.causes", b"\x01")])
        assert parsley.await_stopped(timeout=60)
        with caplog.at_level(logging.ERROR, logger="shipper"):
            for name, status in parsley.status().items():  # docs/runbooks.md, "Log the status"
                log.error("%s: %s refusal=%s detail=%s", name, status.state,
                          status.refusal_reason, status.failure_detail)
        bad = parsley.status()["bad"]
        assert bad.state is ProcessState.STOPPED
        assert bad.refusal_reason is Reason.UNDECODABLE_METADATA
        assert bad.failure_detail and f"topic '{bad_src.name}' partition 1 offset 0" in \
            bad.failure_detail
        assert bad.failure_detail.startswith(f"{bad_src.topic_id}-1@0: "), bad.failure_detail
        assert_seed_shape(Reason.UNDECODABLE_METADATA, bad.failure_detail)
        assert bad.tasks == ()
        assert not parsley.healthy()
        _produce(kafka_bootstrap, good_src.name, 0, [b"g"])
        _wait(lambda: [r.value for r in read_committed(kafka_bootstrap, good_out.name)]
              == [b"relayed:g"], 60, "the good process to keep relaying")
        assert parsley.status()["good"].state is ProcessState.RUNNING
    # ProcessState is a str enum: it logs as its JSON string.
    assert "bad: STOPPED refusal=Reason.UNDECODABLE_METADATA" in caplog.text


@pytest.mark.slow
def test_refused_start_leaves_nothing_running(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    with pytest.raises(StartError, match=missing):
        Parsley.start(_config(kafka_bootstrap, tmp_path), relay("ok", src.name, src.name),
                      relay("broken", missing, src.name))
    assert _children() == []
    assert not list(tmp_path.glob("*.coordinator.endpoint"))


def test_a_second_coordinator_on_the_same_control_socket_is_refused(tmp_path: Path) -> None:
    from coordinator.control.status_socket import ControlServer, default_endpoint

    config = ParsleyConfig("127.0.0.1:1", "twin", state_dir=str(tmp_path))
    first = ControlServer(default_endpoint(config), {"ping": lambda req: {"pid": 4242}})
    try:
        with pytest.raises(StartError, match=r"a coordinator \(pid 4242\) already runs prefix "
                           r"'twin'") as refused:
            Parsley.start(config, relay("p", "a", "b"))
        assert "another state" not in str(refused.value), "never advise a harmful step"
        assert request(first.endpoint, {"op": "ping"})["pid"] == 4242, "the first still serves"
    finally:
        first.close()
    assert _children() == []


@pytest.mark.slow
def test_transient_respawns_a_killed_worker_which_resumes_exactly_once(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    import os
    import signal

    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    _produce(kafka_bootstrap, src.name, 0, [b"p0-0"])
    _produce(kafka_bootstrap, src.name, 1, [b"p1-0"])
    with Parsley.start(_config(kafka_bootstrap, tmp_path), relay("relay", src.name, out.name),
                       restart="transient", backoff_s=0.1) as parsley:
        _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) == 2, 90,
              "first records relayed")
        _wait(lambda: len(parsley.status()["relay"].tasks) == 2, 30, "two task entries")
        pids = {t.task: t.pid for t in parsley.status()["relay"].tasks}
        os.kill(pids[0], signal.SIGKILL)
        _wait(lambda: parsley.status()["relay"].restarts == 1, 30, "the killed task respawned")
        _wait(lambda: {t.task for t in parsley.status()["relay"].tasks} == {0, 1}
              and parsley.status()["relay"].state is ProcessState.RUNNING, 60, "running again")
        now = {t.task: t.pid for t in parsley.status()["relay"].tasks}
        assert now[1] == pids[1], "the other task kept running"
        assert now[0] != pids[0]
        _produce(kafka_bootstrap, src.name, 0, [b"p0-1"])
        _produce(kafka_bootstrap, src.name, 1, [b"p1-1"])
        _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) >= 4, 90,
              "later records relayed")
        time.sleep(1.0)
        values = sorted(r.value for r in read_committed(kafka_bootstrap, out.name, (0, 1)))
        assert values == [b"relayed:p0-0", b"relayed:p0-1", b"relayed:p1-0", b"relayed:p1-1"]
        assert parsley.healthy()


def test_a_coordinator_listening_on_tcp_is_found_through_its_recorded_endpoint(
    tmp_path: Path,
) -> None:
    from coordinator.control.status_socket import ControlServer, endpoint_file

    config = ParsleyConfig("127.0.0.1:1", "twin-tcp", state_dir=str(tmp_path))
    first = ControlServer("tcp://127.0.0.1:*", {"ping": lambda req: {"pid": 4343}},
                          record_to=endpoint_file(config))
    try:
        with pytest.raises(StartError, match=r"a coordinator \(pid 4343\) already runs prefix "
                           r"'twin-tcp': it serves tcp://127\.0\.0\.1:"):
            Parsley.start(config, relay("p", "a", "b"))
    finally:
        first.close()
    assert _children() == []
