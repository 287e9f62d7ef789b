"""A normal start logs no warning about an incomplete assignment.

The tasks of a process join their group one after another, so the first to join is
briefly assigned its siblings' partitions too. That is how every start goes, not a
fault: the worker logs it at INFO and warns only when the assignment stays incomplete
past ``workers.assignment.FIRST_JOIN_GRACE_S``, or at once on a later rebalance
(docs/operations.md, "The consumer group at a start").
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from tests.cli_support import CLI, RELAY_APP

PARTITIONS = 3
RECORDS = 30


@pytest.mark.slow
def test_a_normal_run_logs_no_incomplete_assignment_warning(
        kafka_bootstrap: str, create_topic: Any, tmp_path: Path) -> None:
    src, out = f"fj{uuid.uuid4().hex[:8]}.src", f"fj{uuid.uuid4().hex[:8]}.out"
    create_topic(src, partitions=PARTITIONS)
    create_topic(out, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(RECORDS):
        producer.produce(src, key=f"k{i}".encode(), value=f"v{i}".encode(),
                         partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = dict(os.environ)
    env.update({"CLI_SRC": src, "CLI_OUT": out,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    run = subprocess.Popen(
        [*CLI, "run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap, "--prefix",
         f"fj-{uuid.uuid4().hex[:8]}", "--state-dir", str(tmp_path / "state")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        got: list[Any] = []
        while time.monotonic() < deadline and len(got) < RECORDS:
            assert run.poll() is None, run.communicate()[1][-3000:]
            got = read_committed(kafka_bootstrap, out, range(PARTITIONS))
            time.sleep(0.5)
        assert len(got) == RECORDS
        run.send_signal(signal.SIGTERM)
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == ExitCode.CLEAN, err[-3000:]
    assigned = [ln for ln in err.splitlines() if " assigned " in ln]
    assert assigned, err[-3000:]
    warnings = [ln for ln in err.splitlines()
                if "WARNING" in ln and ("was assigned" in ln or "missing members" in ln)]
    assert not warnings, "\n".join(warnings)
