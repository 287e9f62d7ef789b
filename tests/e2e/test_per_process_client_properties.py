"""Kafka client properties per process: from the declaration and from the config file.

Three processes receive one topic. ``small`` declares its consumer's ``client.id`` and a
small fetch size (``Process(..., kafka_properties=...)``); ``tabled`` gets its consumer's
``client.id`` from the TOML table ``[process_kafka_properties.tabled]``; ``plain`` has
neither. The group of each, described on the broker, shows that each setting reached
that process's worker's consumer and no other's (docs/operations.md, "Client properties
for one process").
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from tests.cli_support import CLI

APP = '''
import os
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

SRC = Channel(os.environ["CLI_SRC"], BYTES, BYTES)


def handle(delivery, state):
    return Effects.builder().build()


processes = [
    Process("small", kafka_properties={"consumer.client.id": "small-fetcher",
                                       "consumer.max.partition.fetch.bytes": 1024})
    .receives(SRC, handle),
    Process("tabled").receives(SRC, handle),
    Process("plain").receives(SRC, handle),
]
'''


def _client_ids(admin: AdminClient, group: str) -> list[str]:
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
    return sorted(str(m.client_id) for m in desc.members)


@pytest.mark.slow
def test_per_process_properties_reach_that_process_s_consumer_only(
        kafka_bootstrap: str, create_topic: Any, tmp_path: Path) -> None:
    src = f"ppk{uuid.uuid4().hex[:8]}"
    create_topic(src, partitions=1)
    prefix = f"ppk-{uuid.uuid4().hex[:8]}"
    (tmp_path / "ppkapp.py").write_text(APP)
    (tmp_path / "parsley.toml").write_text(
        f'bootstrap_servers = "{kafka_bootstrap}"\napplication_id_prefix = "{prefix}"\n'
        '[process_kafka_properties.tabled]\n"consumer.client.id" = "tabled-by-file"\n')
    env = dict(os.environ)
    env.update({"CLI_SRC": src,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    run = subprocess.Popen(
        [*CLI, "run", "ppkapp:processes", "--config", "parsley.toml", "--state-dir",
         str(tmp_path / "state")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, **QUIET})
    seen: dict[str, list[str]] = {}
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert run.poll() is None, run.communicate()[1][-3000:]
            seen = {p: _client_ids(admin, f"{prefix}-{p}") for p in ("small", "tabled", "plain")}
            if all(seen.values()):
                break
            time.sleep(0.5)
        run.send_signal(signal.SIGTERM)
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == ExitCode.CLEAN, err[-3000:]
    # Parsley's own client id names the spawning coordinator (operations.md, "Names on
    # the cluster").
    assert seen == {"small": ["small-fetcher"], "tabled": ["tabled-by-file"],
                    "plain": [f"{prefix}-plain-task-000|{socket.gethostname()}|{run.pid}"]}, \
        seen
