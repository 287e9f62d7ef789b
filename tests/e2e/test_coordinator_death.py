"""Workers do not outlive their coordinator (docs/runbooks.md, "The coordinator died").

A 2-task relay runs under ``parsley-coordinator run``. Only the coordinator is
SIGKILLed: both workers exit within seconds (a Linux parent-death signal, and a
parent-watch where that is missing), without committing anything further, and their
static members leave the consumer group when their sessions time out. Inputs produced
meanwhile are not relayed. A fresh coordinator on the same prefix then resumes from the
last commit: every input relayed exactly once (an independent ``read_committed`` reader).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from tests.cli_support import CLI, RELAY_APP

EXIT_BOUND_S = 5.0
"""Generous bound on "both workers gone after the coordinator's death", s (promised: 2 s)."""


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for i, v in enumerate(values):
        producer.produce(topic, key=b"k", value=v, partition=i % 2)
    assert producer.flush(30) == 0


def _start(bootstrap: str, where: list[str], cwd: Path, env: dict[str, str]) -> Any:
    # A log file, not a pipe: workers that outlived the coordinator would hold a pipe open.
    with open(cwd / f"run-{time.monotonic_ns()}.log", "w") as log:
        return subprocess.Popen([*CLI, "run", "cliapp:processes", "--bootstrap-servers",
                                 bootstrap, *where], cwd=cwd, env=env,
                                stdout=subprocess.DEVNULL, stderr=log, text=True)


def _task_pids(where: list[str], cwd: Path, env: dict[str, str], run: Any) -> dict[int, int]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        res = subprocess.run([*CLI, "status", "--json", *where, "--timeout", "2"], cwd=cwd,
                             env=env, capture_output=True, text=True, timeout=30)
        if res.returncode == 0:
            relay = orjson.loads(res.stdout)["processes"]["relay"]
            tasks = relay["tasks"]
            if relay["state"] == "RUNNING" and len(tasks) == 2:
                return {t["task"]: t["pid"] for t in tasks}
        assert run.poll() is None, f"run exited early with {run.returncode}"
        time.sleep(0.5)
    raise AssertionError("two RUNNING tasks never reported")


def _members(admin: AdminClient, group: str) -> int:
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return len(desc.members)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_workers_exit_when_their_coordinator_is_killed(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=2)
    out = create_topic(partitions=2)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = dict(os.environ)
    env.update({"CLI_SRC": src.name, "CLI_OUT": out.name,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    prefix = f"death-{uuid.uuid4().hex[:8]}"
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "state")]
    first = [b"a%d" % i for i in range(10)]
    later = [b"b%d" % i for i in range(10)]
    _produce(kafka_bootstrap, src.name, first)
    run = _start(kafka_bootstrap, where, tmp_path, env)
    second = None
    pids: dict[int, int] = {}
    try:
        pids = _task_pids(where, tmp_path, env, run)
        deadline = time.monotonic() + 60
        while len(read_committed(kafka_bootstrap, out.name, (0, 1))) < 10:
            assert time.monotonic() < deadline, "the first inputs were not relayed"
            time.sleep(0.3)
        run.kill()  # SIGKILL: no handler runs, no stop is sent to the workers
        killed = time.monotonic()
        run.wait(timeout=30)
        while any(_alive(p) for p in pids.values()):
            assert time.monotonic() - killed < EXIT_BOUND_S, \
                f"workers {pids} outlived their coordinator by {EXIT_BOUND_S} s"
            time.sleep(0.05)
        gone_s = time.monotonic() - killed
        _produce(kafka_bootstrap, src.name, later)
        group = f"{prefix}-relay"
        while _members(kafka_admin, group):
            assert time.monotonic() - killed < 30, "the dead workers stayed in the group"
            time.sleep(0.5)
        left_s = time.monotonic() - killed
        print(f"workers gone {gone_s:.2f} s after the coordinator's SIGKILL; "
              f"group empty after {left_s:.1f} s")
        got = sorted(r.value for r in read_committed(kafka_bootstrap, out.name, (0, 1)))
        assert got == sorted(b"cli:" + v for v in first), "nothing relayed after the death"

        second = _start(kafka_bootstrap, where, tmp_path, env)
        _task_pids(where, tmp_path, env, second)
        deadline = time.monotonic() + 90
        while len(read_committed(kafka_bootstrap, out.name, (0, 1))) < 20:
            assert time.monotonic() < deadline, "the fresh coordinator did not resume"
            time.sleep(0.3)
        time.sleep(1.0)
        got = sorted(r.value for r in read_committed(kafka_bootstrap, out.name, (0, 1)))
        assert got == sorted(b"cli:" + v for v in first + later), "exactly once"
    finally:
        for proc in (run, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
        for pid in pids.values():
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
