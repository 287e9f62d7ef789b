"""Reading a dev broker's log (``server.log``) for what explains a failure: its errors, and
INFO lines picked by their text.

Used by :mod:`devtools.devbroker` when a broker does not come up, and by tests whose
failure reports quote the broker's side.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["log_errors", "log_matching"]


def log_errors(path: Path, lines: int = 12) -> str:
    """The last ``lines`` ERROR and FATAL lines of a broker log, each with the line after
    it (an exception's first line), or ``(none)``: why a broker exited is logged before
    the shutdown's own lines, which fill a tail."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    picked: list[str] = []
    for line, after in zip(text, [*text[1:], "["], strict=True):
        if "] ERROR " in line or "] FATAL " in line:
            picked.append(line if after.startswith("[") else f"{line}\n{after}")
    return "\n".join(picked[-lines:]) or "(none)"


def log_matching(path: Path, needle: str, lines: int = 12) -> str:
    """The last ``lines`` lines of a broker log that contain ``needle``, or ``(none)``
    (``(no log)`` when the file is missing): an INFO line that explains a failure, such as
    the transaction coordinator skipping a partition's marker."""
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join([line for line in text if needle in line][-lines:]) or "(none)"
