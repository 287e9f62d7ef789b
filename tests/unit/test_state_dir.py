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
