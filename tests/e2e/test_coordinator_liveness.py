"""Supervision's liveness on the real broker with the real worker (workers/main.py).

* A worker that sends no report within the stale bound (here a SIGSTOPped one)
  is SIGKILLed by PID and treated as a transient stop: respawned under
  ``transient`` (the process keeps relaying exactly once), or the process
  stopped under ``never`` with a detail naming the task, how long it was
  silent and its last reported state.
* A silent worker still alive after the coordinator's SIGKILL (as one in uninterruptible
  sleep is) is reported and its process stopped, its task never respawned meanwhile.
* The restart budget resets after a healthy period: occasional crashes with
  healthy running between them never exhaust it; crashes in quick succession
  beyond it still stop the process CRASHED.
* A blast-radius stop reports the siblings it stopped, and no worker that
  exited as "not stopped".
* A second ``run`` on a prefix that a coordinator already runs is refused with
  a message that advises nothing harmful.

The verdict is an independent read_committed consumer: every input relayed
once, in partition order.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka import Producer

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES
from tests.cli_support import RELAY_APP

# 6 s stale bounds and 3 s healthy periods: a loaded machine misses them.
pytestmark = pytest.mark.serial

INTERVAL_MS = 300


def relay(name: str, source: str, out_name: str, crash_marks: Path | None = None) -> Process:
    """A relay; with ``crash_marks``, a record ``crash-*`` SIGKILLs its own worker the
    first time it is handled (a marker file remembers it), and is relayed after."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        value = delivery.value
        if crash_marks is not None and value.startswith(b"crash"):
            mark = crash_marks / value.decode()
            if not mark.exists():
                mark.write_text("x")
                os.kill(os.getpid(), signal.SIGKILL)
        return Effects.builder().send(out, delivery.key, b"relayed:" + value).build()

    return Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=partition)
    assert producer.flush(30) == 0


def _config(bootstrap: str, tmp_path: Path, **supervision: Any) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"live-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=INTERVAL_MS, **supervision)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _pids(parsley: Parsley, name: str) -> dict[int, int]:
    return {t.task: t.pid for t in parsley.status()[name].tasks}


def _running(parsley: Parsley, name: str, tasks: int) -> bool:
    st = parsley.status()[name]
    return st.state is ProcessState.RUNNING and len(st.tasks) == tasks


def _kill_if_our_child(pid: int) -> None:
    """Test cleanup: a SIGSTOPped worker left behind by a failed assertion."""
    try:
        proc = psutil.Process(pid)
        if proc.ppid() == os.getpid():
            os.kill(pid, signal.SIGKILL)
    except (psutil.Error, OSError):
        pass


def _exactly_once(bootstrap: str, topic: str, expected: dict[int, list[bytes]],
                  partitions: tuple[int, ...] = (0, 1)) -> None:
    """Every input relayed once, each input partition's records in their order (one key,
    so the output is one partition's sequence)."""
    got = [r.value for r in read_committed(bootstrap, topic, partitions)]
    assert sorted(got) == sorted(b"relayed:" + v for want in expected.values() for v in want), got
    for p, want in expected.items():
        mine = {b"relayed:" + v for v in want}
        assert [v for v in got if v in mine] == [b"relayed:" + v for v in want], (p, got)


# --- stale-task detection --------------------------------------------------------


def test_a_silent_worker_is_killed_and_respawned_under_transient(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    _produce(kafka_bootstrap, src.name, 0, [b"p0-0"])
    _produce(kafka_bootstrap, src.name, 1, [b"p1-0"])
    config = _config(kafka_bootstrap, tmp_path, stale_task_ms=6000, restart_backoff_ms=100)
    stopped_pid = 0
    with Parsley.start(config, relay("relay", src.name, out.name),
                       restart="transient") as parsley:
        try:
            _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) == 2, 90,
                  "first records relayed")
            _wait(lambda: _running(parsley, "relay", 2), 60, "two RUNNING tasks")
            pids = _pids(parsley, "relay")
            # A worker whose start outlasted the bound was respawned too: count from here.
            before = parsley.status()["relay"].restarts
            stopped_pid = pids[0]
            os.kill(stopped_pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            _wait(lambda: parsley.status()["relay"].restarts == before + 1, 60,
                  "the silent task killed and respawned")
            killed_after = time.monotonic() - stopped_at
            # Silence counts from the last report, up to one status interval before SIGSTOP.
            assert 6.0 - INTERVAL_MS / 1000 - 0.1 <= killed_after < 60, \
                f"killed {killed_after:.1f} s after SIGSTOP"
            assert not psutil.pid_exists(stopped_pid), "the silent worker was killed and reaped"
            _wait(lambda: _running(parsley, "relay", 2), 60, "running again")
            now = _pids(parsley, "relay")
            assert now[1] == pids[1], "the other task kept running"
            assert now[0] != pids[0]
            _produce(kafka_bootstrap, src.name, 0, [b"p0-1"])
            _produce(kafka_bootstrap, src.name, 1, [b"p1-1"])
            _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) >= 4, 90,
                  "later records relayed")
            time.sleep(1.0)
            _exactly_once(kafka_bootstrap, out.name, {0: [b"p0-0", b"p0-1"],
                                                      1: [b"p1-0", b"p1-1"]})
            assert parsley.healthy()
        finally:
            _kill_if_our_child(stopped_pid)


def test_a_silent_worker_stops_the_process_under_never_naming_it(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    _produce(kafka_bootstrap, src.name, 1, [b"p1-0"])
    config = _config(kafka_bootstrap, tmp_path, stale_task_ms=6000)
    stopped_pid = 0
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        try:
            _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) == 1, 90,
                  "a record relayed")
            _wait(lambda: _running(parsley, "relay", 2), 60, "two RUNNING tasks")
            pids = _pids(parsley, "relay")
            stopped_pid = pids[1]
            os.kill(stopped_pid, signal.SIGSTOP)
            assert parsley.await_stopped(timeout=60), "the silent task stops its process"
            st = parsley.status()["relay"]
            assert st.state is ProcessState.STOPPED and st.refusal_reason is None
            detail = st.failure_detail or ""
            assert f"task 1 of 'relay' (pid {stopped_pid})" in detail, detail
            assert "sent no report for" in detail and "last reported state RUNNING" in detail
            assert st.restarts == 0
            _wait(lambda: not any(psutil.pid_exists(p) for p in pids.values()), 30,
                  "both workers gone")
        finally:
            _kill_if_our_child(stopped_pid)


def test_a_silent_worker_that_outlives_its_sigkill_is_reported_and_stops_its_process(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker in uninterruptible sleep (state D) outlives SIGKILL until the kernel call
    # returns. Here the worker is SIGSTOPped and the coordinator's SIGKILL to it is
    # swallowed, which is what the coordinator sees of such a worker: sent, and still alive.
    from coordinator.runtime.supervisor.reap import Reaping
    from coordinator.runtime.supervisor.restarts import UNKILLABLE_AFTER_S

    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    _produce(kafka_bootstrap, src.name, 1, [b"p1-0"])
    config = _config(kafka_bootstrap, tmp_path, stale_task_ms=8000)
    stopped_pid = 0
    real_signal = Reaping._signal

    def swallowing(self: Any, t: Any, sig: signal.Signals) -> bool:
        if sig == signal.SIGKILL and t.pid == stopped_pid:
            return True
        return real_signal(self, t, sig)

    monkeypatch.setattr(Reaping, "_signal", swallowing)
    with Parsley.start(config, relay("relay", src.name, out.name),
                       restart="transient", stop_deadline_s=2) as parsley:
        try:
            _wait(lambda: len(read_committed(kafka_bootstrap, out.name, (0, 1))) == 1, 90,
                  "a record relayed")
            _wait(lambda: _running(parsley, "relay", 2), 60, "two RUNNING tasks")
            stopped_pid = _pids(parsley, "relay")[1]
            os.kill(stopped_pid, signal.SIGSTOP)
            stopped_at = time.monotonic()
            assert parsley.await_stopped(timeout=60), "an unkillable worker stops its process"
            took = time.monotonic() - stopped_at
            st = parsley.status()["relay"]
            detail = st.failure_detail or ""
            assert st.state is ProcessState.STOPPED and st.refusal_reason is None
            assert f"task 1 of 'relay' (pid {stopped_pid}) sent no report for" in detail, detail
            assert "after the coordinator's SIGKILL (process state stopped)" in detail, detail
            assert "not respawned while it lives" in detail, detail
            assert st.restarts == 0, "never respawned while the old worker lives"
            assert took >= UNKILLABLE_AFTER_S
            assert psutil.pid_exists(stopped_pid)
        finally:
            _kill_if_our_child(stopped_pid)


# --- the restart budget --------------------------------------------------------------


def test_occasional_crashes_with_healthy_running_between_never_exhaust_the_budget(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    marks = tmp_path / "marks"
    marks.mkdir()
    config = _config(kafka_bootstrap, tmp_path / "state", max_restarts=2,
                     restart_backoff_ms=100, restart_reset_ms=3000)
    sent: list[bytes] = []
    with Parsley.start(config, relay("relay", src.name, out.name, marks),
                       restart="transient") as parsley:
        _wait(lambda: _running(parsley, "relay", 1), 60, "RUNNING")
        for i in range(4):  # twice the budget, each after a healthy period
            time.sleep(4.5)  # past the 3 s reset
            batch = [f"ok-{i}".encode(), f"crash-{i}".encode()]
            _produce(kafka_bootstrap, src.name, 0, batch)
            sent += batch
            _wait(lambda i=i: parsley.status()["relay"].restarts == i + 1
                  or parsley.status()["relay"].state is ProcessState.STOPPED, 60,
                  f"crash {i} respawned")
            assert parsley.healthy(), parsley.status()["relay"].failure_detail
            _wait(lambda: _running(parsley, "relay", 1), 60, f"RUNNING after crash {i}")
        _produce(kafka_bootstrap, src.name, 0, [b"last"])
        sent.append(b"last")
        _wait(lambda: len(read_committed(kafka_bootstrap, out.name)) >= len(sent), 90,
              "every record relayed")
        time.sleep(1.0)
        _exactly_once(kafka_bootstrap, out.name, {0: sent}, (0,))
        assert parsley.healthy() and parsley.status()["relay"].restarts == 4


def test_crashes_in_quick_succession_beyond_the_budget_stop_it_crashed(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    marks = tmp_path / "marks"
    marks.mkdir()
    config = _config(kafka_bootstrap, tmp_path / "state", max_restarts=2,
                     restart_backoff_ms=100, restart_reset_ms=3000)
    with Parsley.start(config, relay("relay", src.name, out.name, marks),
                       restart="transient") as parsley:
        _wait(lambda: _running(parsley, "relay", 1), 60, "RUNNING")
        _produce(kafka_bootstrap, src.name, 0, [f"crash-{i}".encode() for i in range(4)])
        assert parsley.await_stopped(timeout=90), "three quick crashes exceed a budget of 2"
        st = parsley.status()["relay"]
        assert st.refusal_reason is None and st.restarts == 2
        assert "was killed by signal 9 (SIGKILL) without a final report" in \
            (st.failure_detail or "")


HANG_AFTER_S = 3.0


def hanging_relay(name: str, source: str, out_name: str) -> Process:
    """A relay whose handler, once its worker has run ``HANG_AFTER_S`` s, blocks forever
    on the next record (a hang that recurs in every incarnation after it has reported
    RUNNING: its worker sends no report while it blocks)."""
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        if time.time() - psutil.Process().create_time() >= HANG_AFTER_S:
            threading.Event().wait()
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)


def test_a_task_that_hangs_each_time_spends_the_budget_and_stops_naming_it(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    # Each incarnation reports RUNNING, then hangs on a record. The healthy period (5 s)
    # ends before the stale bound (6 s after its last report) kills it: a task counted
    # healthy from its first RUNNING report alone has its budget reset before each kill,
    # and is killed and respawned as "attempt 1" forever.
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path, max_restarts=2, restart_backoff_ms=100,
                     restart_reset_ms=5000, stale_task_ms=6000)
    feeding = threading.Event()
    sent: list[bytes] = []

    def feed() -> None:  # one record every 0.5 s: a record is always there to hang on
        producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
        while not feeding.is_set():
            sent.append(f"r-{len(sent)}".encode())
            producer.produce(src.name, key=b"k", value=sent[-1], partition=0)
            producer.flush(10)
            feeding.wait(0.5)

    feeder = threading.Thread(target=feed, daemon=True)
    with Parsley.start(config, hanging_relay("relay", src.name, out.name),
                       restart="transient") as parsley:
        _wait(lambda: _running(parsley, "relay", 1), 60, "RUNNING")
        feeder.start()
        try:
            stopped = parsley.await_stopped(timeout=90)
        finally:
            feeding.set()
            feeder.join(15)
        st = parsley.status()["relay"]
        detail = st.failure_detail or ""
        assert stopped, f"still respawning a hung task after 90 s: {st.restarts} respawns"
        assert st.refusal_reason is None and st.restarts == 2, (st.restarts, detail)
        assert "task 0 of 'relay'" in detail and "sent no report for" in detail, detail
        assert "stale bound of 6 s" in detail and "the restart budget" in detail, detail
    got = [r.value for r in read_committed(kafka_bootstrap, out.name, (0,))]
    assert got == [b"relayed:" + v for v in sent[:len(got)]], got  # once each, in order


# --- the shutdown report ---------------------------------------------------------------


def test_a_blast_radius_stop_reports_its_siblings_stopped_and_nothing_false(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="parsley.coordinator")
    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    config = _config(kafka_bootstrap, tmp_path)
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: _running(parsley, "relay", 2), 60, "two RUNNING tasks")
        pids = _pids(parsley, "relay")
        producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
        producer.produce(src.name, key=b"k", value=b"x", partition=1,
                         headers=[("parsley.causes", b"\x01")])  # task 1 refuses
        assert producer.flush(30) == 0
        assert parsley.await_stopped(timeout=60)
        _wait(lambda: not any(psutil.pid_exists(p) for p in pids.values()), 30,
              "both workers gone")
        _wait(lambda: "stopped its other tasks" in caplog.text, 20, "the sibling stop's report")
        report = parsley.close()
        assert report.clean, report.summary()
    text = caplog.text
    assert "did not stop" not in text and "not stopped" not in text, text
    line = next(r.getMessage() for r in caplog.records
                if "stopped its other tasks" in r.getMessage())
    assert f"relay/0 (pid {pids[0]})" in line, line


# --- a second coordinator on one prefix --------------------------------------------------




def test_a_second_run_on_a_prefix_is_refused_advising_nothing_harmful(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path / "state")
    prefix = config.application_id_prefix
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = dict(os.environ)
    env.update({"CLI_SRC": src.name, "CLI_OUT": out.name,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    with Parsley.start(config, relay("relay", src.name, out.name)) as first:
        _wait(lambda: _running(first, "relay", 1), 60, "the first coordinator RUNNING")
        res = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "run", "cliapp:processes",
             "--bootstrap-servers", kafka_bootstrap, "--prefix", prefix,
             "--state-dir", config.state_dir],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert res.returncode == 4, res.stderr
        message = " ".join(res.stderr.split())
        assert f"a coordinator (pid {os.getpid()}) already runs prefix '{prefix}'" in message
        assert "not supported" in message
        assert f"parsley-coordinator stop --prefix {prefix} --state-dir {config.state_dir}" \
            in message
        assert "another state" not in message and "state_dir or" not in message, message
        _produce(kafka_bootstrap, src.name, 0, [b"after"])
        _wait(lambda: [r.value for r in read_committed(kafka_bootstrap, out.name)]
              == [b"relayed:after"], 60, "the first coordinator to keep relaying")
        assert first.healthy()
