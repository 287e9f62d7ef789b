"""parsley-devbroker without a broker: settings, state file, tool table, missing prerequisites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from devtools import devbroker, devbroker_cli, devbroker_security, kafka_jars


def _props(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and line[0] != "#")
    return {key: value for key, value in pairs}


def test_one_node_settings(tmp_path: Path) -> None:
    props = _props(devbroker.server_properties(tmp_path, 19092, 19093))
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


def test_cluster_node_settings(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3"
    props = _props(devbroker.server_properties(tmp_path, 19094, 19095, node_id=2,
                                               voters=voters, replicas=3))
    assert props["node.id"] == "2"
    assert props["controller.quorum.voters"] == voters
    for key in ("offsets.topic.replication.factor", "transaction.state.log.replication.factor",
                "default.replication.factor"):
        assert props[key] == "3", key
    for key in ("transaction.state.log.min.isr", "min.insync.replicas"):
        assert props[key] == "2", key
    two = _props(devbroker.server_properties(tmp_path, 1, 2, replicas=2))
    assert two["min.insync.replicas"] == "1", "RF 2 keeps writing with one broker down"


def test_sasl_ssl_settings_and_files(tmp_path: Path) -> None:
    from cryptography import x509

    security = devbroker_security.ensure_security(tmp_path)
    props = _props(devbroker.server_properties(tmp_path, 19092, 19093, security=security))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["authorizer.class.name"] == devbroker_security.AUTHORIZER
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    # The broker's certificate is the CA's and names the loopback address.
    chain = x509.load_pem_x509_certificates(security.keystore_path.read_bytes())
    ca = x509.load_pem_x509_certificate(security.ca_path.read_bytes())
    assert chain[0].issuer == ca.subject
    chain[0].verify_directly_issued_by(ca)
    sans = chain[0].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "127.0.0.1" in {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    for private in (security.keystore_path, tmp_path / "security" / "ca.key",
                    tmp_path / "admin.properties", tmp_path / "admin.client.json"):
        assert private.stat().st_mode & 0o077 == 0, private
    client = json.loads((tmp_path / "admin.client.json").read_text())
    assert client["sasl.username"] == "admin" and "bootstrap.servers" not in client
    assert f"ssl.truststore.location={security.ca_path}" in \
        (tmp_path / "admin.properties").read_text()
    again = devbroker_security.ensure_security(tmp_path)
    assert again.admin_password == security.admin_password, "made once per data dir"


def test_status_json_of_an_empty_dir_lists_no_broker(tmp_path: Path) -> None:
    result = CliRunner().invoke(devbroker_cli.main, ["status", "--dir", str(tmp_path), "--json"])
    assert result.exit_code == 3
    status = json.loads(result.output)
    assert status["brokers"] == [] and status["security"] == "plaintext"


def test_cluster_file_round_trip_and_one_broker_by_id(tmp_path: Path) -> None:
    from devtools import devbroker_cluster

    spec = devbroker_cluster.ClusterSpec(
        tmp_path, (devbroker_cluster.NodeSpec(1, 9001, 9101),
                   devbroker_cluster.NodeSpec(2, 9002, 9102)), "plaintext", "abc")
    (tmp_path / devbroker_cluster.CLUSTER_FILE).write_text(spec.to_json())
    assert devbroker_cluster.read_cluster(tmp_path) == spec
    assert spec.bootstrap == "127.0.0.1:9001,127.0.0.1:9002"
    assert spec.voters == "1@127.0.0.1:9101,2@127.0.0.1:9102"
    assert spec.replicas == 2
    statuses = devbroker_cluster.broker_status(tmp_path)
    assert [(b.id, b.port, b.running) for b in statuses] == [(1, 9001, False), (2, 9002, False)]
    assert devbroker_cluster.stop_broker(tmp_path, 2) is None, "not running: nothing to stop"
    with pytest.raises(devbroker.DevBrokerError, match="no broker 7"):
        devbroker_cluster.stop_broker(tmp_path, 7)
    with pytest.raises(devbroker.DevBrokerError, match="is not running"):
        devbroker_cluster.freeze_broker(tmp_path, 1)
    with pytest.raises(devbroker.DevBrokerError, match="holds a 2-broker cluster, not 3"):
        devbroker_cluster.up_cluster(tmp_path, 3)


def test_a_cluster_has_no_single_port(tmp_path: Path) -> None:
    result = CliRunner().invoke(devbroker_cli.main,
                                ["up", "--dir", str(tmp_path), "--brokers", "3", "--port", "1"])
    assert result.exit_code == 1 and "--port is for a single broker" in result.output


@pytest.mark.parametrize(("text", "expected"), [
    # Java: s.hashCode() through Kafka's Utils.abs (values printed by a JVM).
    ("hello", 99162322), ("hello world and more text", 1588579405),
    ("shop-relay-task-000", 2048898395), ("e2e-abc-relay", 66159473), ("é€x", 483317),
    ("", 0), ("polygenelubricants", 0),  # Integer.MIN_VALUE: Utils.abs gives 0
])
def test_java_string_hash_places_ids_as_kafka_does(text: str, expected: int) -> None:
    from devtools.dev_cluster import java_string_hash

    assert java_string_hash(text) == expected
