"""The state dir: where it is by default, and that it belongs to the user running Parsley.

The state dir holds each task's local state (``<state_dir>/<prefix>-<process>/<task>``),
the coordinator's control socket (``<prefix>.coordinator.ipc``), the record of its
endpoint and its last status report. The control socket has no authentication, so
whoever can write the state dir can stop the processes; the default is therefore a
directory of the user's own, created with mode 0700, and a state dir owned by another
user is refused (docs/operations.md, "The state dir").

Default (:func:`default_state_dir`), first that applies:

1. ``$XDG_STATE_HOME/parsley`` when ``XDG_STATE_HOME`` is an absolute path (the XDG
   Base Directory Specification's place for state that persists between restarts);
2. ``~/.local/state/parsley`` when the home directory exists and is writable;
3. ``<tmp>/parsley-<uid>`` otherwise (``tempfile.gettempdir()``).

The Java implementation's default, ``/tmp/kafka-streams``, is shared by every user of
a machine; so was this package's earlier ``<tmp>/parsley``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path

__all__ = ["StateDirError", "check_state_dir", "default_state_dir", "ensure_state_dir"]

_MODE = 0o700


class StateDirError(ValueError):
    """The state dir cannot be used: owned by another user, not a directory, or not creatable.

    The message names the directory, its owner and what to do.
    """


def default_state_dir(environ: Mapping[str, str] | None = None) -> str:
    """The per-user default state dir (module docstring); no I/O beyond ``stat``/``access``.

    Args:
        environ: the environment (``os.environ`` when ``None``); reads
            ``XDG_STATE_HOME`` and ``HOME``.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):
        return str(Path(xdg) / "parsley")
    home = env.get("HOME") or ""
    if not home:
        try:
            home = str(Path.home())
        except (KeyError, RuntimeError):
            home = ""
    if home and os.path.isabs(home) and os.path.isdir(home):
        target = Path(home) / ".local" / "state" / "parsley"
        existing = next(p for p in (target, *target.parents) if p.exists())
        if os.access(existing, os.W_OK | os.X_OK):
            return str(target)
    return str(Path(tempfile.gettempdir()) / f"parsley-{os.getuid()}")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_state_dir(path: str | os.PathLike[str]) -> bool:
    """Check an existing state dir without creating it.

    Returns:
        ``True`` when it exists (a directory owned by this user), ``False`` when absent.

    Raises:
        StateDirError: it exists and is not a directory, or is owned by another user.
    """
    where = Path(path)
    try:
        st = where.stat()
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"state dir {where} exists and is not a directory; give "
                            "another --state-dir (or PARSLEY_STATE_DIR)")
    uid = os.getuid()
    if st.st_uid != uid:
        raise StateDirError(
            f"state dir {where} is owned by {_owner(st.st_uid)}, not by you ({_owner(uid)}): "
            "its control socket and local state would be shared with that user. Give a "
            "state dir of your own with --state-dir (or PARSLEY_STATE_DIR, or state_dir in "
            "the --config file)")
    return True


def ensure_state_dir(path: str | os.PathLike[str]) -> Path:
    """Create the state dir (mode 0700, parents as needed) or check the existing one.

    A directory created here gets mode 0700 whatever the umask; an existing one
    keeps its mode (an operator may share one with a group on purpose) but must be
    owned by this user.

    Returns:
        The directory's path.

    Raises:
        StateDirError: owned by another user, not a directory, or it cannot be created
            (the ``OSError``'s text is in the message).
    """
    where = Path(path)
    if check_state_dir(where):
        return where
    try:
        where.mkdir(mode=_MODE, parents=True, exist_ok=True)
        if where.stat().st_uid == os.getuid():
            os.chmod(where, _MODE)  # mkdir's mode is masked by the umask
    except OSError as exc:
        raise StateDirError(f"cannot create state dir {where}: {exc}; give another "
                            "--state-dir (or PARSLEY_STATE_DIR)") from exc
    check_state_dir(where)
    return where
