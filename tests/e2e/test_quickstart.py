"""The README's quickstart (``examples/quickstart.py``) runs as the README says.

``parsley-coordinator run`` over the two processes on the real broker: every
order produced yields exactly one ``paid <order>`` line on the ledger topic and
never a ``VIOLATION`` (a payment handled before its order), then ``stop`` is clean.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Producer

from coordinator.cli import ExitCode
from tests.kafka_support import QUIET
from tests.worker_support import read_committed

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "coordinator.cli"]
ORDERS = 40
PARTITIONS = 2


def test_quickstart_pays_every_order_after_it(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    topics = f"qs{uuid.uuid4().hex[:8]}"
    for suffix in ("orders", "payments", "ledger"):
        create_topic(f"{topics}.{suffix}", partitions=PARTITIONS)
    (tmp_path / "qsapp.py").write_text(
        f"from examples.quickstart import build\nPROCESSES = build({topics!r})\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO), env.get("PYTHONPATH", "")])
    where = ["--prefix", f"qs-{uuid.uuid4().hex[:8]}", "--state-dir", str(tmp_path / "state")]

    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random",
                         **QUIET})
    for i in range(ORDERS):
        order = {"id": f"o{i}", "amount": i * 10}
        producer.produce(f"{topics}.orders", key=f"customer-{i % 7}", value=orjson.dumps(order))
    assert producer.flush(30) == 0

    run = subprocess.Popen(
        [*CLI, "run", "qsapp:PROCESSES", "--bootstrap-servers", kafka_bootstrap, *where],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        lines: list[str] = []
        while time.monotonic() < deadline and len(lines) < ORDERS:
            assert run.poll() is None, f"run exited early: {run.communicate()[1]}"
            records = read_committed(kafka_bootstrap, f"{topics}.ledger", range(PARTITIONS))
            lines = [r.value.decode() for r in records]
            time.sleep(0.5)
        assert sorted(lines) == sorted(f"paid o{i}" for i in range(ORDERS)), lines
        stop = subprocess.run([*CLI, "stop", *where, "--deadline", "15"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert stop.returncode == ExitCode.CLEAN, stop.stdout + stop.stderr
        _out, err = run.communicate(timeout=60)
        assert run.returncode == ExitCode.CLEAN, err
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.communicate(timeout=60)
