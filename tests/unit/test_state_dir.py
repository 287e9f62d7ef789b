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


OTHER_UID = 4321


def _another_users(path: Path, monkeypatch: pytest.MonkeyPatch) -> int:
    """Make ``path`` another (non-root) user's: chown it when root, else pretend to be
    someone else. Returns the owner the refusal names."""
    me = os.getuid()
    if me == 0:
        os.chown(path, OTHER_UID, OTHER_UID)
        return OTHER_UID
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    return me


def _link_owned_by_another(link: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the symlink ``link`` another user's (lchown when root, else its lstat says so)."""
    if os.getuid() == 0:
        os.lchown(link, OTHER_UID, OTHER_UID)
        return
    real_lstat = os.lstat

    def lstat(p: object, *args: object, **kwargs: object) -> os.stat_result:
        st = real_lstat(p, *args, **kwargs)  # type: ignore[arg-type]
        if Path(str(p)) == link:
            fields = list(st)
            fields[4] = os.getuid() + 1
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(os, "lstat", lstat)


def test_a_state_dir_of_another_user_is_refused(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    me = _another_users(theirs, monkeypatch)
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

    from coordinator.cli import cli
    from coordinator.cli.common import ExitCode

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    me = _another_users(theirs, monkeypatch)
    (tmp_path / "stateapp.py").write_text(
        "from parsley import Channel, Effects, Process\n"
        "from parsley.serdes import BYTES\n"
        "processes = [Process('p').receives(Channel('in', BYTES, BYTES), "
        "lambda d, s: Effects.builder().build())]\n")
    monkeypatch.chdir(tmp_path)
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


def test_a_symlink_of_another_user_is_refused_though_it_points_at_your_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "parsley-link"
    link.symlink_to(mine)
    _link_owned_by_another(link, monkeypatch)
    with pytest.raises(StateDirError, match=r"symlink .*parsley-link, owned by"):
        check_state_dir(link)
    with pytest.raises(StateDirError, match="symlink"):
        ensure_state_dir(link / "sub")
    monkeypatch.undo()
    own = tmp_path / "own-link"
    own.symlink_to(mine)
    assert check_state_dir(own), "your own link to your own dir is accepted"


def test_a_state_dir_that_cannot_be_examined_is_a_refusal_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    def denied(p: object, *args: object, **kwargs: object) -> os.stat_result:
        raise PermissionError(13, "Permission denied", str(p))

    monkeypatch.setattr(os, "lstat", denied)
    with pytest.raises(StateDirError, match=r"cannot check state dir .*Permission denied"):
        check_state_dir(tmp_path / "x")


def test_writable_by_others_needs_the_sticky_bit(tmp_path: Path) -> None:
    """OpenSSH's StrictModes idea (docs/operations.md, "The state dir")."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(StateDirError, match=r"no sticky bit.*--state-dir .*shared/parsley"):
        check_state_dir(shared)
    sub = ensure_state_dir(shared / "parsley")  # the remedy the message gives
    assert stat.S_IMODE(sub.stat().st_mode) == 0o700
    os.chmod(shared, 0o1777)
    assert check_state_dir(shared), "a sticky world-writable dir, as /tmp, is accepted"


def test_an_unusable_xdg_state_home_falls_back_like_an_unwritable_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "file").write_text("")
    assert default_state_dir({"XDG_STATE_HOME": str(tmp_path / "file" / "xdg"),
                              "HOME": str(home)}) == str(home / ".local" / "state" / "parsley")
