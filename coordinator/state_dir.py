"""The state dir: where it is by default, and that it belongs to the user running Parsley.

The state dir holds each task's local state (``<state_dir>/<prefix>-<process>/<task>``),
the coordinator's control socket (``<prefix>.coordinator.ipc``), the record of its
endpoint and its last status report. The control socket has no authentication, so
whoever can write the state dir can stop the processes; the default is therefore a
directory of the user's own, created with mode 0700, and one that another user could
replace is refused (:func:`check_state_dir`; docs/operations.md, "The state dir").

Default (:func:`default_state_dir`), first that applies:

1. ``$XDG_STATE_HOME/parsley`` when ``XDG_STATE_HOME`` is an absolute path and it
   exists or can be created there (the XDG Base Directory Specification's place for
   state that persists between restarts);
2. ``~/.local/state/parsley`` when the home directory exists and it can be created;
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

__all__ = [
    "StateDirError",
    "check_state_dir",
    "default_state_dir",
    "ensure_state_dir",
    "legacy_state_dir",
]

_MODE = 0o700


class StateDirError(ValueError):
    """The state dir cannot be used: owned by another user, not a directory, or not creatable.

    The message names the directory, its owner and what to do.
    """


def _creatable(target: Path) -> bool:
    """Whether ``target`` exists or its nearest existing ancestor is writable."""
    existing = next((p for p in (target, *target.parents) if os.path.exists(p)), None)
    return existing is not None and os.access(existing, os.W_OK | os.X_OK)


def legacy_state_dir() -> str:
    """``<tmp>/parsley``: the default of builds before the per-user one, shared by every
    user of a machine; ``status``, ``stop`` and a start look for a coordinator there too
    when the state dir is the default (docs/operations.md, "The state dir")."""
    return str(Path(tempfile.gettempdir()) / "parsley")


def default_state_dir(environ: Mapping[str, str] | None = None) -> str:
    """The per-user default state dir (module docstring); no I/O beyond ``stat``/``access``.

    Args:
        environ: the environment (``os.environ`` when ``None``); reads
            ``XDG_STATE_HOME`` and ``HOME``.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg) and _creatable(Path(xdg) / "parsley"):
        return str(Path(xdg) / "parsley")
    home = env.get("HOME") or ""
    if not home:
        try:
            home = str(Path.home())
        except (KeyError, RuntimeError):
            home = ""
    if home and os.path.isabs(home) and os.path.isdir(home):
        target = Path(home) / ".local" / "state" / "parsley"
        if _creatable(target):
            return str(target)
    return str(Path(tempfile.gettempdir()) / f"parsley-{os.getuid()}")


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


_MAX_LINKS = 40  # as the kernel's own bound on symlinks in one lookup (MAXSYMLINKS)


def _resolve_trusted(where: Path, uid: int) -> Path | None:
    """``where`` with every symlink on it resolved, each one checked as it is met.

    A symlink owned by another user, other than root, is refused: its owner could point
    it elsewhere at any time (OpenSSH's StrictModes applies the same rule to the
    directories it trusts). Nothing is followed by the kernel, so a link the kernel
    would refuse to follow (``fs.protected_symlinks``) is judged, not an error.

    Returns:
        The resolved path, or ``None`` when a component does not exist.

    Raises:
        StateDirError: a symlink owned by another user, too many links, or an ``OSError``.
    """
    parts = list(Path(os.path.abspath(where)).parts)
    current = Path(parts.pop(0))
    links = 0
    while parts:
        name = parts.pop(0)
        if name == "..":
            current = current.parent
            continue
        step = current / name
        try:
            st = os.lstat(step)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise StateDirError(f"cannot check state dir {where}: {exc}; give another "
                                "--state-dir (or PARSLEY_STATE_DIR)") from exc
        if not stat.S_ISLNK(st.st_mode):
            current = step
            continue
        if st.st_uid not in (uid, 0):
            raise StateDirError(
                f"state dir {where} goes through the symlink {step}, owned by "
                f"{_owner(st.st_uid)}, not by you ({_owner(uid)}) or root: that user could "
                "point it at a directory of theirs. Give a state dir of your own with "
                "--state-dir (or PARSLEY_STATE_DIR, or state_dir in the --config file)")
        links += 1
        if links > _MAX_LINKS:
            raise StateDirError(f"state dir {where}: too many symlinks")
        try:
            target = Path(os.readlink(step))
        except OSError as exc:
            raise StateDirError(f"cannot check state dir {where}: {exc}") from exc
        tail = list(target.parts)
        if target.is_absolute():
            current = Path(tail.pop(0))
        parts = tail + parts
    return current


def _group_has_others(gid: int, uid: int) -> bool:
    """Whether a user other than ``uid`` is in group ``gid`` (unknown: ``True``)."""
    try:
        import grp
        import pwd

        me = pwd.getpwuid(uid).pw_name
        if any(m != me for m in grp.getgrgid(gid).gr_mem):
            return True
        return any(p.pw_gid == gid and p.pw_uid != uid for p in pwd.getpwall())
    except (ImportError, KeyError):
        return True


def check_state_dir(path: str | os.PathLike[str]) -> bool:
    """Check an existing state dir without creating it (docs/operations.md, "The state dir").

    The rule follows OpenSSH's StrictModes: the directory (after its symlinks, each
    of which must be the user's or root's) must be owned by the user or by root, and
    when another user can write it (group-writable with another member, or
    world-writable) it must have the sticky bit, so that no one else can remove or
    replace what Parsley puts there.

    Returns:
        ``True`` when it exists and passes, ``False`` when absent.

    Raises:
        StateDirError: it is not a directory, is owned by another user (not root),
            goes through another user's symlink, is writable by others without the
            sticky bit, or cannot be examined (the ``OSError``'s text is in the message).
    """
    where = Path(path)
    uid = os.getuid()
    real = _resolve_trusted(where, uid)
    if real is None:
        return False
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateDirError(f"cannot check state dir {where}: {exc}; give another "
                            "--state-dir (or PARSLEY_STATE_DIR)") from exc
    if not stat.S_ISDIR(st.st_mode):
        raise StateDirError(f"state dir {where} exists and is not a directory; give "
                            "another --state-dir (or PARSLEY_STATE_DIR)")
    if st.st_uid not in (uid, 0):
        raise StateDirError(
            f"state dir {where} is owned by {_owner(st.st_uid)}, not by you ({_owner(uid)}): "
            "its control socket and local state would be shared with that user. Give a "
            "state dir of your own with --state-dir (or PARSLEY_STATE_DIR, or state_dir in "
            "the --config file)")
    others_write = bool(st.st_mode & stat.S_IWOTH) or (
        bool(st.st_mode & stat.S_IWGRP) and _group_has_others(st.st_gid, uid))
    if others_write and not st.st_mode & stat.S_ISVTX:
        raise StateDirError(
            f"state dir {where} (mode {stat.S_IMODE(st.st_mode):o}) can be written by other "
            "users and has no sticky bit: they could replace its control socket. Give a "
            f"subdirectory of your own, --state-dir {where / 'parsley'} (created with mode "
            "0700), or remove the group/world write permission")
    return True


def ensure_state_dir(path: str | os.PathLike[str]) -> Path:
    """Create the state dir (mode 0700, parents as needed) or check the existing one.

    A directory created here gets mode 0700 whatever the umask; an existing one
    keeps its mode but must pass :func:`check_state_dir`.

    Returns:
        The directory's path.

    Raises:
        StateDirError: refused by :func:`check_state_dir`, or it cannot be created
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
