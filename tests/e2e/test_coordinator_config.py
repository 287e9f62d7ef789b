"""ParsleyConfig: defaults, refusal of Parsley-owned properties, TOML, environment, overrides."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from coordinator.config import OWNED_KAFKA_PROPERTIES, ParsleyConfig
from coordinator.control.status_socket import ControlServer, request, resolve_endpoint
from workers.kafka_config import OWNED_PROPERTIES

ISSUE_OWNED = [
    "group.id", "group.instance.id", "group.protocol", "partition.assignment.strategy",
    "transactional.id", "isolation.level", "auto.offset.reset", "enable.auto.commit",
    "partitioner", "bootstrap.servers",
]


def test_defaults() -> None:
    c = ParsleyConfig("h:1", "shop")
    assert c.metadata_budget_bytes == 262144
    assert (c.status_interval_ms, c.commit_interval_ms) == (1000, 100)
    assert c.status_interval_s == 1.0
    assert dict(c.kafka_properties) == {}


@pytest.mark.parametrize("key", ISSUE_OWNED)
def test_owned_property_refused_naming_it(key: str) -> None:
    assert key in OWNED_KAFKA_PROPERTIES
    with pytest.raises(ValueError, match=f"'{key}' is owned by Parsley"):
        ParsleyConfig("h:1", "shop", kafka_properties={key: "x"})
    with pytest.raises(ValueError, match=f"'consumer.{key}' is owned by Parsley"):
        ParsleyConfig("h:1", "shop", kafka_properties={f"consumer.{key}": "x"})


@pytest.mark.parametrize("key", sorted(OWNED_KAFKA_PROPERTIES))
def test_every_owned_property_is_refused_the_workers_set_included(key: str) -> None:
    assert OWNED_PROPERTIES <= OWNED_KAFKA_PROPERTIES, "one source: the worker's set"
    with pytest.raises(ValueError, match=f"'producer.{key}' is owned by Parsley"):
        ParsleyConfig("h:1", "shop", kafka_properties={f"producer.{key}": "x"})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"bootstrap_servers": " "}, "bootstrap_servers"),
        ({"application_id_prefix": ""}, "application_id_prefix"),
        ({"application_id_prefix": "a__parsley.b"}, "__parsley."),
        ({"metadata_budget_bytes": 0}, "metadata_budget_bytes"),
        ({"status_interval_ms": -1}, "status_interval_ms"),
        ({"commit_interval_ms": 0}, "commit_interval_ms"),
        ({"kafka_properties": {"linger.ms": None}}, "has no value"),
    ],
)
def test_invalid_settings(kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    base = {"bootstrap_servers": "h:1", "application_id_prefix": "shop"}
    with pytest.raises(ValueError, match=message):
        ParsleyConfig(**{**base, **kwargs})


def test_kafka_properties_are_read_only() -> None:
    c = ParsleyConfig("h:1", "shop", kafka_properties={"linger.ms": 5})
    with pytest.raises(TypeError):
        c.kafka_properties["linger.ms"] = 6  # type: ignore[index]


def test_load_file_then_env_then_overrides(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "parsley.toml"
    path.write_text(
        'bootstrap_servers = "file:1"\napplication_id_prefix = "filep"\n'
        'status_interval_ms = 500\n[kafka_properties]\n"linger.ms" = 5\n"acks" = "all"\n'
    )
    env = {"PARSLEY_APPLICATION_ID_PREFIX": "envp", "PARSLEY_COMMIT_INTERVAL_MS": "250",
           "PARSLEY_KAFKA_LINGER_MS": "7", "UNRELATED": "x"}
    c = ParsleyConfig.load(path, environ=env, bootstrap_servers="flag:1", state_dir=None)
    assert c.bootstrap_servers == "flag:1"
    assert c.application_id_prefix == "envp"
    assert (c.status_interval_ms, c.commit_interval_ms) == (500, 250)
    assert dict(c.kafka_properties) == {"linger.ms": "7", "acks": "all"}


def test_load_refuses_unknown_file_keys_owned_env_properties_and_missing_required(
    tmp_path,  # type: ignore[no-untyped-def]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('bootstrap_servers = "h:1"\nprefix = "x"\n')
    with pytest.raises(ValueError, match=r"unknown setting\(s\) \['prefix'\]"):
        ParsleyConfig.load(path, environ={})
    with pytest.raises(ValueError, match=r"'group\.id' is owned by Parsley"):
        ParsleyConfig.load(environ={"PARSLEY_BOOTSTRAP_SERVERS": "h:1",
                                    "PARSLEY_APPLICATION_ID_PREFIX": "p",
                                    "PARSLEY_KAFKA_GROUP_ID": "mine"})
    with pytest.raises(ValueError, match="application_id_prefix is not set"):
        ParsleyConfig.load(environ={"PARSLEY_BOOTSTRAP_SERVERS": "h:1"})
    with pytest.raises(ValueError, match="not an integer"):
        ParsleyConfig.load(environ={"PARSLEY_BOOTSTRAP_SERVERS": "h:1",
                                    "PARSLEY_APPLICATION_ID_PREFIX": "p",
                                    "PARSLEY_STATUS_INTERVAL_MS": "1s"})


def test_control_endpoints_ipc_by_default_tcp_loopback_only_when_asked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    c = ParsleyConfig("h:1", "shop", state_dir=str(tmp_path))
    assert resolve_endpoint(None, c) == f"ipc://{tmp_path}/shop.coordinator.ipc"
    assert resolve_endpoint("ipc", c) == resolve_endpoint(None, c)
    assert resolve_endpoint("tcp", c) == "tcp://127.0.0.1:*"
    assert resolve_endpoint("tcp:7311", c) == "tcp://127.0.0.1:7311"
    assert resolve_endpoint("tcp://0.0.0.0:7311", c) == "tcp://0.0.0.0:7311"
    with pytest.raises(ValueError, match="--listen"):
        resolve_endpoint("udp://x", c)
    server = ControlServer(resolve_endpoint("tcp", c), {"ping": lambda req: {"pid": 1}})
    try:
        assert server.endpoint.startswith("tcp://127.0.0.1:")
        assert request(server.endpoint, {"op": "ping"}) == {"outcome": "OK", "op": "ping", "pid": 1}
    finally:
        server.close()


def test_the_operations_doc_lists_exactly_the_owned_properties() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("<!-- owned-properties -->")[1].split("<!-- /owned-properties -->")[0]
    names = set(re.findall(r"`([a-z][a-z.]*)`", section))
    assert names == set(OWNED_KAFKA_PROPERTIES), (
        f"missing from the doc: {sorted(set(OWNED_KAFKA_PROPERTIES) - names)}; "
        f"not owned: {sorted(names - set(OWNED_KAFKA_PROPERTIES))}")


def test_missing_setting_names_the_real_flag_and_variable() -> None:
    with pytest.raises(ValueError) as info:
        ParsleyConfig.load(environ={"PARSLEY_BOOTSTRAP_SERVERS": "h:1"})
    message = str(info.value)
    assert "--prefix" in message and "--application-id-prefix" not in message
    assert "PARSLEY_APPLICATION_ID_PREFIX" in message
    with pytest.raises(ValueError, match="--bootstrap-servers"):
        ParsleyConfig.load(environ={}, application_id_prefix="p")


def test_owned_property_error_names_its_source(tmp_path: Path) -> None:
    env = {"PARSLEY_BOOTSTRAP_SERVERS": "h:1", "PARSLEY_APPLICATION_ID_PREFIX": "p"}
    with pytest.raises(ValueError, match=r"'enable\.auto\.commit'.*set by "
                       r"PARSLEY_KAFKA_ENABLE_AUTO_COMMIT"):
        ParsleyConfig.load(environ={**env, "PARSLEY_KAFKA_ENABLE_AUTO_COMMIT": "true"})
    path = tmp_path / "owned.toml"
    path.write_text('[kafka_properties]\n"isolation.level" = "read_uncommitted"\n')
    with pytest.raises(ValueError, match=rf"'isolation\.level'.*config file "
                       rf"{re.escape(str(path))}"):
        ParsleyConfig.load(path, environ=env)
    origins = ParsleyConfig.property_origins(path, {"PARSLEY_KAFKA_LINGER_MS": "5"})
    assert origins == {"isolation.level": f"config file {path} [kafka_properties]",
                       "linger.ms": "set by PARSLEY_KAFKA_LINGER_MS"}


@pytest.mark.slow
def test_supervision_settings_layer_file_env_flags_and_show_their_defaults(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    c = ParsleyConfig("h:1", "shop")
    assert (c.stale_task_ms, c.max_restarts, c.restart_backoff_ms, c.restart_reset_ms) == \
        (60_000, 5, 1_000, 60_000)
    path = tmp_path / "sup.toml"
    path.write_text('bootstrap_servers = "h:1"\napplication_id_prefix = "p"\n'
                    "max_restarts = 9\nrestart_backoff_ms = 250\nrestart_reset_ms = 5000\n"
                    "stale_task_ms = 20000\n")
    env = {"PARSLEY_MAX_RESTARTS": "7", "PARSLEY_STALE_TASK_MS": "30000"}
    c = ParsleyConfig.load(path, environ=env, restart_reset_ms=8000)
    assert (c.max_restarts, c.restart_backoff_ms, c.restart_reset_ms, c.stale_task_ms) == \
        (7, 250, 8000, 30000), "file, then environment, then flags"
    assert ParsleyConfig("h:1", "p", max_restarts=0, restart_backoff_ms=0).max_restarts == 0
    for bad, message in [({"max_restarts": -1}, "max_restarts"),
                         ({"restart_reset_ms": 0}, "restart_reset_ms"),
                         ({"stale_task_ms": 1000}, "must exceed status_interval_ms")]:
        with pytest.raises(ValueError, match=message):
            ParsleyConfig("h:1", "p", **bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PARSLEY_MAX_RESTARTS='lots' is not an integer"):
        ParsleyConfig.load(environ={"PARSLEY_BOOTSTRAP_SERVERS": "h:1",
                                    "PARSLEY_APPLICATION_ID_PREFIX": "p",
                                    "PARSLEY_MAX_RESTARTS": "lots"})
    res = subprocess.run([sys.executable, "-m", "coordinator.cli", "run", "--help"],
                         capture_output=True, text=True, timeout=60)
    text = " ".join(res.stdout.split())
    for flag, default in [("--max-restarts", "5"), ("--restart-backoff", "1"),
                          ("--restart-reset", "60"), ("--stale-after", "60")]:
        assert re.search(rf"{flag} .*?\[default: \(?{default}\)?;", text), (flag, text)
    (tmp_path / "noapp.py").write_text("from parsley import Process\nP = Process('p')\n")
    flagged = subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "run", "noapp:P", "--bootstrap-servers",
         "127.0.0.1:1", "--prefix", "p", "--state-dir", str(tmp_path), "--stale-after", "0.5"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
        env={**os.environ, "PARSLEY_STALE_TASK_MS": "90000"})
    assert flagged.returncode == 2, flagged.stderr
    assert "stale_task_ms (500) must exceed status_interval_ms (1000)" in flagged.stderr, \
        "the flag reaches the config and wins over the environment"
