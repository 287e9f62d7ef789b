"""The state dir: a per-user default, created 0700, another user's refused (no broker)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from coordinator.state_dir import (
    StateDirError,
    check_state_dir,
    default_state_dir,
    ensure_state_dir,
)


def test_the_default_is_the_users_own(tmp_path: Path) -> None:
    assert default_state_dir({"XDG_STATE_HOME": str(tmp_path / "xdg"), "HOME": "/x"}) == \
        str(tmp_path / "xdg" / "parsley")
    home = tmp_path / "home"
    home.mkdir()
    assert default_state_dir({"HOME": str(home)}) == str(home / ".local" / "state" / "parsley")
    assert default_state_dir({"XDG_STATE_HOME": "relative", "HOME": str(home)}) == \
        str(home / ".local" / "state" / "parsley"), "a relative XDG path is ignored"
    fallback = str(Path(tempfile.gettempdir()) / f"parsley-{os.getuid()}")
    assert default_state_dir({"HOME": str(tmp_path / "absent")}) == fallback
    assert default_state_dir({"HOME": "/"}) == fallback or os.access("/", os.W_OK)
    assert default_state_dir() != str(Path(tempfile.gettempdir()) / "parsley")


def test_a_new_state_dir_is_0700_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        made = ensure_state_dir(tmp_path / "a" / "parsley")
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert ensure_state_dir(made) == made and check_state_dir(made)
    assert not check_state_dir(tmp_path / "absent")


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)  # the directory is now another's
    with pytest.raises(StateDirError, match=f"is owned by uid {me}") as info:
        ensure_state_dir(theirs)
    assert "--state-dir" in str(info.value) and "PARSLEY_STATE_DIR" in str(info.value)
    (tmp_path / "file").write_text("")
    monkeypatch.undo()
    with pytest.raises(StateDirError, match="not a directory"):
        ensure_state_dir(tmp_path / "file")


def test_run_and_status_refuse_another_users_state_dir_with_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from click.testing import CliRunner

    from coordinator.cli import ExitCode, cli

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (tmp_path / "stateapp.py").write_text(
        "from parsley import Channel, Effects, Process\n"
        "from parsley.serdes import BYTES\n"
        "processes = [Process('p').receives(Channel('in', BYTES, BYTES), "
        "lambda d, s: Effects.builder().build())]\n")
    monkeypatch.chdir(tmp_path)
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    runner = CliRunner()
    status = runner.invoke(cli, ["status", "--prefix", "p", "--state-dir", str(theirs)])
    assert status.exit_code == ExitCode.USAGE, status.output
    assert f"is owned by uid {me}" in status.output
    as_json = runner.invoke(cli, ["status", "--json", "--prefix", "p", "--state-dir",
                                  str(theirs)])
    assert as_json.exit_code == ExitCode.USAGE and '"error"' in as_json.output
    run = runner.invoke(cli, ["run", "stateapp:processes", "--bootstrap-servers", "127.0.0.1:9",
                              "--prefix", "p", "--state-dir", str(theirs)])
    assert run.exit_code == ExitCode.USAGE, run.output
    assert "state dir refused" in caplog.text and f"is owned by uid {me}" in caplog.text
    assert list(theirs.iterdir()) == [], "nothing written into another user's state dir"
