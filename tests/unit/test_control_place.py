"""Finding the coordinator: abstract ipc endpoints, the pre-upgrade default state dir, the
last report a start replaces, and an ipc path too long to bind (docs/operations.md, "The
state dir", "Status after exit"). No broker: a refused bootstrap address (127.0.0.1:9)
and ZeroMQ sockets of the test's own."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
import zmq
from click.testing import CliRunner

from coordinator.bootstrap import StartError
from coordinator.cli import cli
from coordinator.cli.common import ExitCode
from coordinator.config import ParsleyConfig
from coordinator.control.last_status import LastReport, last_status_file, write_last_report
from coordinator.control.status_socket import ControlServer, listening
from coordinator.runtime.api import CoordinatorRunningError, Parsley
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

NOWHERE = "127.0.0.1:9"  # refused at once


def _process() -> Process:
    return Process("p").receives(Channel("in", BYTES, BYTES),
                                 lambda d, s: Effects.builder().build())


def test_an_abstract_ipc_endpoint_is_probed_not_taken_for_absent() -> None:
    ep = f"ipc://@parsley-test-{uuid.uuid4().hex[:12]}"
    assert listening(ep) is False, "nothing bound yet"
    sock = zmq.Context.instance().socket(zmq.REP)
    try:
        sock.bind(ep)
        assert listening(ep) is True
    finally:
        sock.close(0)


def test_a_start_replaces_the_previous_runs_last_report_even_when_it_fails(
    tmp_path: Path,
) -> None:
    config = ParsleyConfig(NOWHERE, f"lr{uuid.uuid4().hex[:6]}", state_dir=str(tmp_path))
    last = last_status_file(config.state_dir, config.application_id_prefix)
    write_last_report(last, LastReport.now(3, "REFUSAL", {}))
    assert last.exists()
    with pytest.raises(StartError):
        Parsley.start(config, _process())
    assert not last.exists(), "an older run's refusal must not read as this start's"


def test_an_ipc_path_too_long_is_a_start_error_before_the_bootstrap(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)
    config = ParsleyConfig(NOWHERE, "p", state_dir=str(deep))
    with pytest.raises(StartError, match=r"bytes long, over the 107 .*--listen tcp"):
        Parsley.start(config, _process())


@pytest.fixture
def pre_upgrade(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A coordinator of an earlier build: serving under ``<tmp>/parsley``, while the
    default state dir is now the user's own. The directory is short (not pytest's
    ``tmp_path``, longer under xdist) so its ipc path fits the 107 bytes ipc:// allows."""
    tmp_path = Path(tempfile.mkdtemp(prefix="pcp-"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for name in ("XDG_STATE_HOME", "PARSLEY_STATE_DIR", "PARSLEY_APPLICATION_ID_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    old = tmp_path / "tmp" / "parsley"
    old.mkdir(parents=True)
    stopped: list[Any] = []
    server = ControlServer(f"ipc://{old}/p.coordinator.ipc", {
        "ping": lambda req: {"pid": 4242},
        "status": lambda req: {"status": {"processes": {}}},
        "stop": lambda req: stopped.append(req) or {"shutdown": {"clean": True,
                                                                  "workers": []}},
    })
    try:
        yield stopped
    finally:
        server.close()
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_status_and_stop_find_a_coordinator_under_the_pre_upgrade_state_dir(
    pre_upgrade: list[Any], tmp_path: Path,
) -> None:
    runner = CliRunner()
    status = runner.invoke(cli, ["status", "--json", "--prefix", "p", "--timeout", "60"])
    assert status.exit_code == ExitCode.CLEAN, status.output
    assert orjson.loads(status.stdout)["running"] is True
    assert "default state dir of earlier builds" in status.stderr
    stop = runner.invoke(cli, ["stop", "--prefix", "p"])
    assert stop.exit_code == ExitCode.CLEAN, stop.output
    assert len(pre_upgrade) == 1
    given = runner.invoke(cli, ["status", "--prefix", "p", "--state-dir",
                                str(tmp_path / "given")])
    assert given.exit_code == ExitCode.NO_COORDINATOR, "a state dir given is the only place"


def test_a_start_refuses_a_second_coordinator_under_the_pre_upgrade_state_dir(
    pre_upgrade: list[Any],
) -> None:
    config = ParsleyConfig(NOWHERE, "p")
    assert config.state_dir == str(Path(os.environ["HOME"]) / ".local" / "state" / "parsley")
    with pytest.raises(CoordinatorRunningError, match="pid 4242"):
        Parsley.start(config, _process())
