"""parsley-devbroker's command line, end to end, on a broker of its own (not the session's).

up (idempotent), status, tool (exit status forwarded), down --keep then up (topics
survive), down (data removed). Runs the console script as a user does.
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from devtools import devbroker

pytestmark = pytest.mark.broker


def _cli(*args: str, timeout_s: float = 180.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "devtools.devbroker_cli", *args],
        capture_output=True, text=True, timeout=timeout_s, check=False,
    )


def _bootstrap(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith(devbroker.BOOTSTRAP_PREFIX), result.stdout
    return last.removeprefix(devbroker.BOOTSTRAP_PREFIX)


def _topics(bootstrap: str) -> set[str]:
    result = _cli("tool", "kafka-topics", "--bootstrap-server", bootstrap, "--list")
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


@pytest.mark.serial  # starts a broker JVM of its own
def test_up_status_tool_down(tmp_path: Path) -> None:
    data_dir = tmp_path / "broker"
    try:
        bootstrap = _bootstrap(_cli("up", "--dir", str(data_dir)))
        host, _port = bootstrap.split(":")
        assert host == "127.0.0.1"
        admin = AdminClient({"bootstrap.servers": bootstrap, **devbroker._QUIET})
        assert admin.describe_cluster(request_timeout=10).result(timeout=15).nodes

        again = _cli("up", "--dir", str(data_dir))
        assert _bootstrap(again) == bootstrap
        assert "already running" in again.stderr

        status = _cli("status", "--dir", str(data_dir))
        assert status.returncode == 0
        assert f"{devbroker.BOOTSTRAP_PREFIX}{bootstrap}" in status.stdout
        assert f"kafka version: {devbroker.KAFKA_VERSION}" in status.stdout
        log_line = next(line for line in status.stdout.splitlines() if line.startswith("log: "))
        assert Path(log_line.removeprefix("log: ")).is_file()

        topic = f"devbroker-{uuid.uuid4().hex[:8]}"
        created = _cli("tool", "kafka-topics", "--bootstrap-server", bootstrap,
                       "--create", "--topic", topic, "--partitions", "2")
        assert created.returncode == 0, created.stderr
        assert topic in _topics(bootstrap)
        missing = _cli("tool", "kafka-topics", "--bootstrap-server", bootstrap,
                       "--describe", "--topic", "no-such-topic")
        assert missing.returncode == 1
        assert "does not exist" in missing.stdout + missing.stderr

        kept = _cli("down", "--dir", str(data_dir), "--keep")
        assert kept.returncode == 0
        assert (data_dir / "data" / "meta.properties").exists()
        assert _cli("status", "--dir", str(data_dir)).returncode == 3

        restarted = _bootstrap(_cli("up", "--dir", str(data_dir)))
        assert topic in _topics(restarted)
    finally:
        _cli("down", "--dir", str(data_dir))
    assert not data_dir.exists()
    assert _cli("status", "--dir", str(data_dir)).returncode == 3


def test_every_tool_main_class_is_in_the_jars() -> None:
    """TOOLS names main classes that exist in the pinned jars (kafka-acls is
    ``org.apache.kafka.tools.AclCommand`` in Kafka 4.x, no longer ``kafka.admin``)."""
    import zipfile

    from devtools import kafka_jars

    classes: set[str] = set()
    for jar in kafka_jars.fetch_jars().glob("*.jar"):
        with zipfile.ZipFile(jar) as archive:
            classes.update(n for n in archive.namelist() if n.endswith(".class"))
    for name, main in devbroker.TOOLS.items():
        assert main.replace(".", "/") + ".class" in classes, f"{name}: {main} not in the jars"
    assert devbroker.TOOLS["kafka-acls"] == "org.apache.kafka.tools.AclCommand"
