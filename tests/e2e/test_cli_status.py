"""``parsley-coordinator status`` and ``inspect`` from an operator's side, on the real broker.

- after ``run`` exits (stopped, refused in flight, or a refused start) ``status`` shows the
  last report kept in the state dir: marked, with the exit time and code, the refusal
  reason and detail; ``--json`` prints it as JSON;
- with nothing running ``status`` answers at once (no ZeroMQ wait) and ``--json`` is JSON
  on every path, a usage error included;
- a running task that has delivered everything is ``caught up`` in the JSON and the table;
  the table fits 100 columns, one line per task; ``--wide`` has the detail;
- ``inspect`` on a running process warns on stderr; with its stdout closed it exits 0.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley.declarations import ordering_changelog
from tests.cli_support import CLI, RELAY_APP
from workers.changelog import ensure_changelog_topic


def _env(src: str, out: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CLI_SRC": src, "CLI_OUT": out,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")]),
                **extra})
    return env


def _cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> Any:
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _produce(bootstrap: str, topic: str, values: list[bytes],
             headers: list[tuple[str, bytes]] | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=0, headers=headers or [])
    assert producer.flush(30) == 0


def _start(bootstrap: str, where: list[str], cwd: Path, env: dict[str, str]) -> Any:
    return subprocess.Popen([*CLI, "run", "cliapp:processes", "--bootstrap-servers", bootstrap,
                             *where, "--stop-deadline", "15"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_status(where: list[str], cwd: Path, env: dict[str, str], run: Any,
                 ok: Any, what: str, within_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        res = _cli(["status", "--json", *where, "--timeout", "2"], cwd, env)
        if res.returncode == 0:
            doc = orjson.loads(res.stdout)
            if ok(doc):
                return doc
        assert run.poll() is None, f"run exited early: {run.communicate()[1]}"
        time.sleep(0.5)
    raise AssertionError(f"not {what} within {within_s} s: {doc}")


def _stop_run(run: Any) -> None:
    if run.poll() is None:
        run.send_signal(signal.SIGTERM)
        run.communicate(timeout=60)


@pytest.mark.slow
def test_a_run_reports_caught_up_fits_100_columns_and_keeps_its_last_report(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"one", b"two"])
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    state = tmp_path / "state"
    where = ["--prefix", prefix, "--state-dir", str(state)]
    run = _start(kafka_bootstrap, where, tmp_path, env)
    try:
        doc = _wait_status(where, tmp_path, env, run,
                           lambda d: d["processes"]["relay"]["caught_up"], "caught up")
        assert doc["running"] is True and doc["last_report"] is None
        relay = doc["processes"]["relay"]
        task = relay["tasks"][0]
        assert relay["state"] == "RUNNING" and task["state"] == "RUNNING"
        assert task["lag"] == 0 and task["held"] == [] and task["caught_up"] is True
        assert [r.value for r in read_committed(kafka_bootstrap, out.name)] == \
            [b"cli:one", b"cli:two"], "caught up means delivered"
        table = _cli(["status", *where], tmp_path, dict(env, COLUMNS="100"))
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        assert max(len(ln) for ln in lines) <= 100, table.stdout
        rows = [ln for ln in lines if "relay" in ln]
        assert len(rows) == 1 and "RUNNING" in rows[0] and " yes " in rows[0], table.stdout
        assert "caught up" in table.stdout
        wide = _cli(["status", "--wide", *where], tmp_path, env)
        assert wide.returncode == 0 and str(task["pid"]) in wide.stdout, wide.stdout
        # inspect while the process runs: the state may move, and stderr says so.
        inspect = _cli(["inspect", "--process", "relay", "--bootstrap-servers",
                        kafka_bootstrap, "--prefix", prefix, "--json"], tmp_path, env)
        assert inspect.returncode == 0, inspect.stderr
        assert "may be running" in inspect.stderr and f"'{prefix}-relay'" in inspect.stderr
        assert len(orjson.loads(inspect.stdout)["group_members"]) == 1
        assert not (state / f"{prefix}.coordinator.last-status.json").exists()
        stop = _cli(["stop", *where], tmp_path, env)
        assert stop.returncode == ExitCode.CLEAN, stop.stdout + stop.stderr
        assert stop.stdout.startswith("stopped: ") and "worker(s) stopped within" \
            in stop.stdout, stop.stdout
        _out, err = run.communicate(timeout=60)
        assert run.returncode == ExitCode.CLEAN, err
    finally:
        _stop_run(run)
    kept = state / f"{prefix}.coordinator.last-status.json"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert [p.name for p in state.iterdir() if p.name.endswith(".tmp")] == []
    started = time.monotonic()
    last = _cli(["status", "--json", "--timeout", "120", *where], tmp_path, env)
    took = time.monotonic() - started
    assert last.returncode == ExitCode.NO_COORDINATOR, last.stderr
    doc = orjson.loads(last.stdout)
    assert doc["running"] is False and doc["last_report"]["exit_code"] == 0
    assert doc["last_report"]["exit"] == "CLEAN" and doc["last_report"]["pid"] == run.pid
    assert doc["processes"]["relay"]["state"] == "STOPPED"
    assert "showing the last report" in last.stderr
    assert took < 60, f"status with nothing running took {took:.1f} s: it waited on its " \
        "120 s --timeout instead of seeing that nothing listens"
    text = _cli(["status", *where], tmp_path, dict(env, COLUMNS="100"))
    assert text.returncode == ExitCode.NO_COORDINATOR
    assert "last report" in text.stdout and "exit code 0 (CLEAN)" in " ".join(text.stdout.split())
    # inspect of the stopped process, its reader gone at once (`inspect ... | head -0`).
    closed = subprocess.Popen([*CLI, "inspect", "--process", "relay", "--bootstrap-servers",
                               kafka_bootstrap, "--prefix", prefix], cwd=tmp_path, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert closed.stdout is not None
    closed.stdout.close()
    _none, err_bytes = closed.communicate(timeout=60)
    assert closed.returncode == 0, err_bytes.decode()
    assert b"Traceback" not in err_bytes and b"BrokenPipe" not in err_bytes, err_bytes.decode()


@pytest.mark.slow
def test_a_refusal_in_flight_stays_readable_after_run_exits(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "s")]
    run = _start(kafka_bootstrap, where, tmp_path, env)
    try:
        _wait_status(where, tmp_path, env, run,
                     lambda d: d["processes"]["relay"]["state"] == "RUNNING", "RUNNING")
        _produce(kafka_bootstrap, src.name, [b"v"], headers=[("parsley.causes", b"\x01")])
        _out, err = run.communicate(timeout=90)
    finally:
        _stop_run(run)
    assert run.returncode == ExitCode.REFUSAL, err
    res = _cli(["status", "--json", *where], tmp_path, env)
    assert res.returncode == ExitCode.NO_COORDINATOR, res.stderr
    doc = orjson.loads(res.stdout)
    assert doc["last_report"]["exit_code"] == ExitCode.REFUSAL
    assert doc["last_report"]["exit"] == "REFUSAL" and doc["last_report"]["exited_at"]
    relay = doc["processes"]["relay"]
    assert relay["state"] == "STOPPED" and relay["refusal_reason"] == "UNDECODABLE_METADATA"
    assert relay["failure_detail"] and relay["failure_detail"] in err
    table = _cli(["status", *where], tmp_path, dict(env, COLUMNS="100"))
    flat = " ".join(table.stdout.split())
    assert "last report" in flat and "exit code 3 (REFUSAL)" in flat, table.stdout
    assert "relay: UNDECODABLE_METADATA:" in flat, table.stdout


@pytest.mark.slow
def test_a_refused_start_keeps_its_reason_for_status(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path,
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    changelog = ordering_changelog(prefix, "relay")
    ensure_changelog_topic(kafka_admin, changelog, 1)
    _produce(kafka_bootstrap, changelog, [b"\x07"])
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "s")]
    res = _cli(["run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap, *where],
               tmp_path, env, 120)
    assert res.returncode == ExitCode.REFUSAL, res.stderr
    got = _cli(["status", "--json", *where], tmp_path, env)
    assert got.returncode == ExitCode.NO_COORDINATOR, got.stderr
    doc = orjson.loads(got.stdout)
    assert doc["last_report"]["exit_code"] == ExitCode.REFUSAL and doc["processes"] == {}
    assert doc["start_error"]["refusal_reason"] == "UNKNOWN_ORDERING_STATE_FORMAT"
    assert doc["start_error"]["detail"] in res.stderr
    table = _cli(["status", *where], tmp_path, env)
    flat = " ".join(table.stdout.split())
    assert "start refused: UNKNOWN_ORDERING_STATE_FORMAT:" in flat, table.stdout


@pytest.mark.slow
def test_a_start_refused_before_its_bootstrap_keeps_the_previous_report(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path,
) -> None:
    """A usage/configuration error (exit 2) runs nothing: the previous run's refusal,
    kept as the last report, must stay what ``status`` shows (docs/operations.md,
    "Status after exit")."""
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    changelog = ordering_changelog(prefix, "relay")
    ensure_changelog_topic(kafka_admin, changelog, 1)
    _produce(kafka_bootstrap, changelog, [b"\x07"])
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "s")]
    run = ["run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap, *where]
    refused = _cli(run, tmp_path, env, 120)
    assert refused.returncode == ExitCode.REFUSAL, refused.stderr
    before = _cli(["status", "--json", *where], tmp_path, env).stdout
    assert orjson.loads(before)["start_error"]["refusal_reason"] == \
        "UNKNOWN_ORDERING_STATE_FORMAT"
    (tmp_path / "bad.toml").write_text(
        '[process_kafka_properties.relay]\n"consumer.fetch.max.bytez" = 1\n')
    typo = _cli([*run, "--config", "bad.toml"], tmp_path, env, 60)
    assert typo.returncode == ExitCode.USAGE, typo.stderr
    assert "last status kept" not in typo.stderr, typo.stderr
    wrong = _cli(["run", "cliapp:nothing_here", "--bootstrap-servers", kafka_bootstrap,
                  *where], tmp_path, env, 60)
    assert wrong.returncode == ExitCode.USAGE, wrong.stderr
    after = _cli(["status", "--json", *where], tmp_path, env)
    assert after.returncode == ExitCode.NO_COORDINATOR, after.stderr
    assert orjson.loads(after.stdout) == orjson.loads(before)


@pytest.mark.slow
def test_status_with_nothing_running_answers_at_once_and_json_is_always_json(
    tmp_path: Path,
) -> None:
    env = dict(os.environ)
    # A coordinator killed with SIGKILL leaves its socket file and endpoint record behind.
    dead = tmp_path / "dead.coordinator.ipc"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(dead))
    (tmp_path / "dead.coordinator.endpoint").write_text(f"ipc://{dead}\n")
    for prefix in ("dead", "never"):
        started = time.monotonic()
        res = _cli(["status", "--json", "--timeout", "120", "--prefix", prefix,
                    "--state-dir", str(tmp_path)], tmp_path, env)
        took = time.monotonic() - started
        assert res.returncode == ExitCode.NO_COORDINATOR, res.stderr
        doc = orjson.loads(res.stdout)
        assert doc["running"] is False and doc["last_report"] is None
        assert "nothing listens there" in doc["error"] and "no last report" in doc["error"]
        assert took < 60, f"{prefix}: took {took:.1f} s: it waited on the 120 s --timeout"
        text = _cli(["status", "--prefix", prefix, "--state-dir", str(tmp_path)], tmp_path, env)
        assert text.returncode == ExitCode.NO_COORDINATOR and text.stdout == ""
        assert "no coordinator answers" in text.stderr
    usage = _cli(["status", "--json", "--state-dir", str(tmp_path)], tmp_path,
                 {k: v for k, v in env.items() if k != "PARSLEY_APPLICATION_ID_PREFIX"})
    assert usage.returncode == ExitCode.USAGE
    assert "give --prefix" in orjson.loads(usage.stdout)["error"]
    bad = _cli(["status", "--json", "--interval", "soon", "--prefix", "p"], tmp_path, env)
    assert bad.returncode == ExitCode.USAGE and "soon" in orjson.loads(bad.stdout)["error"]


@pytest.mark.slow
def test_help_marks_required_flags_shows_defaults_and_h_works_everywhere(
    tmp_path: Path,
) -> None:
    import sys

    from coordinator.config import default_state_dir

    env = dict(os.environ)
    res = _cli(["run", "--help"], tmp_path, env)
    assert res.returncode == 0, res.stderr
    flat = " ".join(res.stdout.split())
    entries: dict[str, str] = {}  # each option's help text, by its flag
    for line in res.stdout.splitlines():
        if line.startswith("  -"):
            flag = line.split()[0]
            entries[flag] = line
        elif entries and line.startswith("   "):
            entries[flag] += line
    entries = {k: " ".join(v.split()) for k, v in entries.items()}
    for flag in ("--bootstrap-servers", "--prefix"):
        assert "[required:" in entries[flag], entries[flag]
    for flag, default in (("--stop-deadline", "10.0"), ("--restart", "never"),
                          ("--state-dir", default_state_dir()), ("--max-restarts", "5"),
                          ("--metrics-host", "127.0.0.1")):
        assert f"[default: {default}" in entries[flag], entries[flag]
    assert "[default: (" not in flat, "a default shown in parentheses"
    tool = subprocess.run([sys.executable, "-m", "devtools.devbroker_cli", "tool", "-h"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert "kafka-delete-records" in tool.stdout, "a tool name split at its hyphen"
    assert "APP (module:attribute, required)" in flat
    for argv in ([*CLI, "-h"], [*CLI, "status", "-h"],
                 [sys.executable, "-m", "devtools.devbroker_cli", "-h"],
                 [sys.executable, "-m", "devtools.devbroker_cli", "up", "-h"]):
        got = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=60)
        assert got.returncode == 0 and "Usage:" in got.stdout, (argv, got.stderr)
