"""``parsley-coordinator`` end to end, in subprocesses, against the real broker.

``run`` a relay app, read ``status --json`` and the table, ``stop`` it (exit 0,
``run`` exits 0), ``inspect`` the stopped process's changelog; a refused start
exits 3; ``status`` with no coordinator exits 7; every command has ``--help``.
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
import pytest
from confluent_kafka import Producer

from coordinator.bootstrap import kafka_topic_id
from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley.declarations import ordering_changelog
from tests.cli_support import CLI, RELAY_APP
from workers.changelog import ensure_changelog_topic


def _env(src: str, out: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"CLI_SRC": src, "CLI_OUT": out,
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    return env


def _cli(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60) -> Any:
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=0)
    assert producer.flush(30) == 0


@pytest.mark.slow
def test_help_explains_each_command(tmp_path: Path) -> None:
    env = dict(os.environ)
    for cmd, phrase in [([], "Exit status"), ([], "`keys` makes the CURVE keys"),
                        ([], "imported from the current directory"), (["run"], "all-or-nothing"),
                        (["status"], "held counts"), (["stop"], "SIGKILL"),
                        (["inspect"], "ordering state from its changelog"),
                        (["reset"], "new causal boundary")]:
        res = _cli([*cmd, "--help"], tmp_path, env)
        assert res.returncode == 0, res.stderr
        assert phrase in " ".join(res.stdout.split()), f"{cmd} --help: {res.stdout}"


def test_status_without_a_coordinator_exits_7(tmp_path: Path) -> None:
    res = _cli(["status", "--prefix", "nobody", "--state-dir", str(tmp_path), "--timeout", "0.5"],
               tmp_path, dict(os.environ))
    assert res.returncode == ExitCode.NO_COORDINATOR, res.stderr
    assert "no coordinator answers" in res.stderr


@pytest.mark.serial  # bounds a second run's refusal in time
def test_run_status_stop_inspect(kafka_bootstrap: str, create_topic: Any, tmp_path: Path) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"one", b"two"])
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "state")]
    run = subprocess.Popen(
        [*CLI, "run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap, *where,
         "--stop-deadline", "15"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        doc: dict[str, Any] = {}
        while time.monotonic() < deadline:
            res = _cli(["status", "--json", *where, "--timeout", "2"], tmp_path, env)
            if res.returncode == 0:
                doc = orjson.loads(res.stdout)
                relay = doc["processes"]["relay"]
                if relay["state"] == "RUNNING" and relay["tasks"]:
                    break
            assert run.poll() is None, f"run exited early: {run.communicate()[1]}"
            time.sleep(0.5)
        relay = doc["processes"]["relay"]
        assert relay["state"] == "RUNNING", doc
        assert set(relay) >= {"state", "refusal_reason", "failure_detail", "tasks"}
        assert relay["tasks"][0]["task"] == 0 and relay["tasks"][0]["budget_bytes"] == 262144
        table = _cli(["status", *where], tmp_path, env)
        assert table.returncode == 0 and "relay" in table.stdout and "RUNNING" in table.stdout
        # A second run under another state dir: the first coordinator is named, at once.
        began = time.monotonic()
        second = _cli(["run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap,
                       "--prefix", prefix, "--state-dir", str(tmp_path / "other")], tmp_path,
                      env, timeout=60)
        took = time.monotonic() - began
        assert second.returncode == ExitCode.FAILURE, second.stderr
        assert f"the workers of another coordinator on this host, pid {run.pid} (" \
            in second.stderr, second.stderr
        assert "Retry this start" not in second.stderr, second.stderr
        assert took < 10, f"{took:.1f} s: the second run waited out the group window"
        assert _cli(["status", *where], tmp_path, env).returncode == 0, "the first runs on"
        got: list[bytes] = []
        while time.monotonic() < deadline and len(got) < 2:
            got = [r.value for r in read_committed(kafka_bootstrap, out.name)]
            time.sleep(0.3)
        assert got == [b"cli:one", b"cli:two"]
        stop = _cli(["stop", *where, "--deadline", "15", "--json"], tmp_path, env)
        assert stop.returncode == ExitCode.CLEAN, stop.stdout + stop.stderr
        assert orjson.loads(stop.stdout)["clean"] is True
        _out, err = run.communicate(timeout=60)
        assert run.returncode == ExitCode.CLEAN, err
        assert "control socket" in err and "relay: STOPPED" in err
        shutdown = [ln for ln in err.splitlines() if "shutdown:" in ln]
        assert len(shutdown) == 1 and "shutdown: 1 worker(s) stopped" in shutdown[0], err
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
            run.communicate(timeout=60)
    inspect = _cli(["inspect", "--process", "relay", "--bootstrap-servers", kafka_bootstrap,
                    "--prefix", prefix, "--json"], tmp_path, env)
    assert inspect.returncode == 0, inspect.stderr
    report = orjson.loads(inspect.stdout)
    assert report["changelog"] == ordering_changelog(prefix, "relay")
    task0 = report["tasks"][0]
    assert task0["bindings"] == {src.name: kafka_topic_id(src.topic_id)}
    assert [(c["topic"], c["partition"], c["covered"]) for c in task0["covered"]] == \
        [(src.name, 0, 1)]
    assert task0["held"] == []
    text = _cli(["inspect", "--process", "relay", "--bootstrap-servers", kafka_bootstrap,
                 "--prefix", prefix], tmp_path, env)
    assert f"covered  {src.name}[0] up to 1" in text.stdout


@pytest.mark.slow
@pytest.mark.parametrize("signal_to_send", [signal.SIGTERM])
def test_refused_start_exits_3_and_sigterm_is_a_clean_stop(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path,
    signal_to_send: signal.Signals,
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    prefix = f"cli-{uuid.uuid4().hex[:8]}"
    changelog = ordering_changelog(prefix, "relay")
    ensure_changelog_topic(kafka_admin, changelog, 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(changelog, key=b"v", value=b"\x07", partition=0)
    assert producer.flush(30) == 0
    res = _cli(["run", "cliapp:processes", "--bootstrap-servers", kafka_bootstrap,
                "--prefix", prefix, "--state-dir", str(tmp_path / "s")], tmp_path, env, 120)
    assert res.returncode == ExitCode.REFUSAL, res.stderr
    assert "UNKNOWN_ORDERING_STATE_FORMAT" in res.stderr and "(failing closed)" in res.stderr
    # A process that starts cleanly stops cleanly on SIGTERM.
    prefix2 = f"cli-{uuid.uuid4().hex[:8]}"
    where = ["--prefix", prefix2, "--state-dir", str(tmp_path / "s2")]
    run = subprocess.Popen([*CLI, "run", "cliapp:processes", "--bootstrap-servers",
                            kafka_bootstrap, *where], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            res = _cli(["status", "--json", *where, "--timeout", "2"], tmp_path, env)
            if res.returncode == 0 and orjson.loads(res.stdout)["processes"]["relay"]["tasks"]:
                break
            time.sleep(0.5)
        run.send_signal(signal_to_send)
        _out, err = run.communicate(timeout=60)
        assert run.returncode == ExitCode.CLEAN, err
        lines = err.strip().splitlines()
        assert "relay: STOPPED" in lines[-2] and "relay: RUNNING" not in err, err
        assert "shutdown: 1 worker(s) stopped within" in lines[-1], err
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("inherited", ["default", "ignored"])
def test_status_watch_refreshes_until_interrupted(tmp_path: Path, inherited: str) -> None:
    """``ignored``: started with SIGINT ignored, as a shell without job control starts a
    background job (``make test &`` in a script): --watch still ends at SIGINT."""
    from coordinator.control.status_socket import ControlServer

    served: list[int] = []

    def status(req: Any) -> dict[str, Any]:
        served.append(1)
        return {"status": {"processes": {"relay": {
            "state": "RUNNING", "refusal_reason": None, "failure_detail": None,
            "tasks": [{"task": 0, "pid": 4242, "held": [{"topic": "b", "partition": 0,
                       "count": 2, "head": 7, "blockers": [{"topic": "a", "partition": 0,
                                                            "required": 9, "settled": None}]}],
                       "frontier_channels": 2, "frontier_bytes": 54, "budget_bytes": 262144,
                       "lag": 3, "updated_ms_ago": 120}]}}}}

    server = ControlServer(f"ipc://{tmp_path}/watch.ipc", {"status": status})
    try:
        table = _cli(["status", "--endpoint", server.endpoint], tmp_path,
                     dict(os.environ, COLUMNS="200"))
        assert table.returncode == 0, table.stderr
        flat = " ".join(table.stdout.split())
        assert "a[0] needs 9 settled -" in flat and "b[0]@7 x2" in flat, table.stdout
        disposition = signal.SIG_IGN if inherited == "ignored" else signal.SIG_DFL

        def ignore() -> None:  # the child's SIGINT, whatever this runner's is
            signal.signal(signal.SIGINT, disposition)

        watch = subprocess.Popen([*CLI, "status", "--watch", "--json", "--interval", "0.2",
                                  "--endpoint", server.endpoint], cwd=tmp_path,
                                 env=dict(os.environ, PYTHONFAULTHANDLER="1"),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 preexec_fn=ignore)
        deadline = time.monotonic() + 30
        while len(served) < 6 and time.monotonic() < deadline:  # 5 refreshes served
            time.sleep(0.1)
        assert len(served) >= 6, f"--watch was served {len(served) - 1} refreshes in 30 s"
        watch.send_signal(signal.SIGINT)
        try:
            out, err = watch.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            # Seen once in CI: say where it stood (faulthandler prints every thread's stack).
            watch.send_signal(signal.SIGABRT)
            try:
                out, err = watch.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                watch.kill()
                out, err = watch.communicate()
            raise AssertionError(f"--watch outlived SIGINT by 30 s after {len(served)} "
                                 f"refreshes; its stacks:\n{err}") from None
        assert watch.returncode == 0, err
        assert out.count('"processes"') >= 3, "--watch refreshes"
    finally:
        server.close()


@pytest.mark.slow
def test_refusal_after_start_exits_3_and_status_is_logged(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = _env(src.name, out.name)
    where = ["--prefix", f"cli-{uuid.uuid4().hex[:8]}", "--state-dir", str(tmp_path / "s")]
    run = subprocess.Popen([*CLI, "run", "cliapp:processes", "--bootstrap-servers",
                            kafka_bootstrap, *where, "--log-status-every", "0.5"],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            res = _cli(["status", "--json", *where, "--timeout", "2"], tmp_path, env)
            if res.returncode == 0 and \
                    orjson.loads(res.stdout)["processes"]["relay"]["state"] == "RUNNING":
                break
            time.sleep(0.5)
        time.sleep(1.0)  # two status log periods
        producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
        producer.produce(src.name, key=b"k", value=b"v", partition=0,
                         headers=[("parsley.causes", b"\x01")])
        assert producer.flush(30) == 0
        _out, err = run.communicate(timeout=90)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
    assert run.returncode == ExitCode.REFUSAL, err
    assert "refusal=UNDECODABLE_METADATA" in err and "(failing closed)" in err
    assert "status relay: RUNNING refusal=None" in err, "the status is logged on a timer"


def test_unreachable_cluster_is_one_short_message_not_a_flood(tmp_path: Path) -> None:
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    res = _cli(["run", "cliapp:processes", "--bootstrap-servers", "127.0.0.1:9", "--prefix",
                "nobody", "--state-dir", str(tmp_path)], tmp_path,
               _env("cli-unreach-src", "cli-unreach-out"), timeout=60)
    assert res.returncode == ExitCode.FAILURE, res.stderr
    assert "could not reach the Kafka cluster at 127.0.0.1:9" in res.stderr, res.stderr
    assert "grant Describe" not in res.stderr
    connect_lines = [ln for ln in res.stderr.splitlines() if "Connect to" in ln]
    assert len(connect_lines) <= 2, res.stderr  # none when the probe answers first


@pytest.mark.serial  # bounds a time
def test_a_port_that_does_not_speak_kafka_is_named_at_once(tmp_path: Path) -> None:
    """An HTTP server on the bootstrap port (python's own http.server, as an operator might
    have one on a neighbouring port): "not a Kafka broker" within seconds, not _TRANSPORT
    after the 10 s metadata wait."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    try:
        port = server.server_address[1]
        began = time.monotonic()
        res = _cli(["run", "cliapp:processes", "--bootstrap-servers", f"127.0.0.1:{port}",
                    "--prefix", "nobody", "--state-dir", str(tmp_path)], tmp_path,
                   _env("cli-http-src", "cli-http-out"), timeout=60)
        took = time.monotonic() - began
    finally:
        server.shutdown()
        server.server_close()
    assert res.returncode == ExitCode.FAILURE, res.stderr
    # The request line has no HTTP version, so http.server answers as HTTP/0.9: a bare body.
    assert f"127.0.0.1:{port}: not a Kafka broker: it answered the Kafka handshake with " \
        "'<!DOCTYPE HTML>" in res.stderr, res.stderr
    # The probe's "not a Kafka broker" (and no _TRANSPORT) shows the metadata wait did not
    # run; the time, mostly the interpreter's start, is printed (liveness bound only: an
    # interpreter start alone took 9.5 s on a loaded CI machine).
    assert "_TRANSPORT" not in res.stderr, res.stderr
    print(f"run against an HTTP server exited after {took:.2f} s")
    assert took < 45, f"took {took:.1f} s"


@pytest.mark.slow
def test_unknown_kafka_property_is_a_usage_error_naming_where_it_was_set(
    kafka_bootstrap: str, tmp_path: Path,
) -> None:
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    (tmp_path / "bad.toml").write_text(
        f'bootstrap_servers = "{kafka_bootstrap}"\napplication_id_prefix = "cli-badprop"\n'
        '[kafka_properties]\n"linger.msx" = 5\n')
    env = _env("cli-badprop-src", "cli-badprop-out")
    res = _cli(["run", "cliapp:processes", "--config", "bad.toml", "--state-dir",
                str(tmp_path)], tmp_path, env)
    assert res.returncode == ExitCode.USAGE, res.stderr
    assert "kafka property 'linger.msx' is not a librdkafka property" in res.stderr
    assert "config file bad.toml" in res.stderr and "Traceback" not in res.stderr
    env["PARSLEY_KAFKA_LINGER_MSX"] = "3"
    res = _cli(["inspect", "--process", "relay", "--bootstrap-servers", kafka_bootstrap,
                "--prefix", "cli-badprop"], tmp_path, env)
    assert res.returncode == ExitCode.USAGE, res.stderr
    assert "check the name in PARSLEY_KAFKA_LINGER_MSX" in res.stderr, res.stderr


def test_stop_without_a_coordinator_says_so_within_seconds(tmp_path: Path) -> None:
    started = time.monotonic()
    res = _cli(["stop", "--prefix", "nobody", "--state-dir", str(tmp_path)], tmp_path,
               dict(os.environ))
    took = time.monotonic() - started
    assert res.returncode == ExitCode.NO_COORDINATOR, res.stderr
    assert f"no coordinator answers at ipc://{tmp_path}/nobody.coordinator.ipc" in res.stderr
    # Seconds, not the minute a client's default timeouts would take: 30 s leaves room
    # for a loaded machine's interpreter start (10.6 s was seen with the load average at 20).
    assert took < 30, f"stop took {took:.1f} s"


def test_the_operations_doc_commands_table_uses_real_flags_and_names_the_prefix() -> None:
    import re

    from coordinator.cli import cli

    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    rows = re.findall(r"^\| `parsley-coordinator (\w+) ([^`]*)`", doc, re.MULTILINE)
    assert sorted(name for name, _ in rows) == ["acls", "inspect", "reset", "run", "status", "stop"]
    for name, usage in rows:
        real = {opt for p in cli.commands[name].params for opt in getattr(p, "opts", [])}
        documented = set(re.findall(r"--[a-z-]+", usage))
        assert "--prefix" in documented, name
        assert documented <= real, f"{name}: {sorted(documented - real)} are not flags"
