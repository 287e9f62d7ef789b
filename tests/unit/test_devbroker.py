"""parsley-devbroker without a broker: settings, state file, tool table, missing prerequisites."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from devtools import devbroker, devbroker_cli, kafka_jars


def _props(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


def test_one_node_settings(tmp_path: Path) -> None:
    props = _props(devbroker._server_properties(tmp_path, 19092, 19093))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["process.roles"] == "broker,controller"
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "transaction.state.log.min.isr", "min.insync.replicas"):
        assert props[key] == "1", key
    assert props["group.initial.rebalance.delay.ms"] == "0"
    assert int(props["group.min.session.timeout.ms"]) <= 1000
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == str(tmp_path / "data")


def test_state_file_round_trip(tmp_path: Path) -> None:
    state = devbroker.BrokerState(
        pid=4242, port=19092, controller_port=19093, version=kafka_jars.KAFKA_VERSION,
        data_dir=tmp_path, log_path=tmp_path / "logs" / "server.log", started_at=1.5,
    )
    assert devbroker.BrokerState.from_json(state.to_json()) == state
    assert state.bootstrap == "127.0.0.1:19092"
    with pytest.raises(ValueError):
        devbroker.BrokerState.from_json('{"pid": 1}')


def test_a_dead_pid_is_not_running(tmp_path: Path) -> None:
    state = devbroker.BrokerState(
        pid=2**22 + 12345, port=1, controller_port=2, version="x", data_dir=tmp_path,
        log_path=tmp_path / "server.log", started_at=0.0,
    )
    (tmp_path / devbroker.STATE_FILE).write_text(state.to_json())
    assert devbroker.read_state(tmp_path) == state
    assert devbroker.running(tmp_path) is None


def test_every_runbook_tool_has_a_main_class() -> None:
    runbook_tools = {
        "kafka-topics", "kafka-consumer-groups", "kafka-get-offsets", "kafka-configs",
        "kafka-console-consumer", "kafka-console-producer", "kafka-delete-records",
        "kafka-transactions",
    }
    assert runbook_tools <= set(devbroker.TOOLS)
    with pytest.raises(devbroker.DevBrokerError, match="unknown tool 'kafka-nope'"):
        devbroker.tool_argv("kafka-nope", [], java="/bin/true")


def test_missing_java_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(devbroker.DevBrokerError, match="install a Java 17 runtime"):
        kafka_jars.require_java()
    result = CliRunner().invoke(devbroker_cli.main, ["up", "--dir", "/nonexistent/dir"])
    assert result.exit_code == 1
    assert "java not found on PATH" in result.output


def test_missing_maven_names_what_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(kafka_jars.ENV_LIB_DIR, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    version = kafka_jars.KAFKA_VERSION
    assert kafka_jars.lib_dir() == tmp_path / "parsley" / f"kafka-{version}" / "lib"
    with pytest.raises(devbroker.DevBrokerError, match="install Apache Maven"):
        kafka_jars.fetch_jars()


def test_lib_dir_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(kafka_jars.ENV_LIB_DIR, str(tmp_path))
    assert kafka_jars.lib_dir() == tmp_path
    assert not kafka_jars.jars_present(tmp_path)
    with pytest.raises(devbroker.DevBrokerError, match=r"holds no kafka_2\.13"):
        kafka_jars.fetch_jars()
    (tmp_path / "kafka_2.13-4.3.1.jar").write_bytes(b"")
    assert kafka_jars.fetch_jars() == tmp_path
