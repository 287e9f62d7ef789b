"""The last status report: what ``parsley-coordinator run`` leaves behind when it exits.

When ``run`` exits after its bootstrap began, it writes the status it ended with to
``<state_dir>/<prefix>.coordinator.last-status.json`` (:func:`last_status_file`),
atomically, mode 0600; ``parsley-coordinator status`` shows it when no coordinator answers
(docs/operations.md, "Status after exit"). A ``run`` removes the previous report when its
bootstrap begins; a start refused before it neither removes nor writes one. When it is
written and removed, and the file's JSON, are in docs/architecture.md, "The coordinator",
"The last status report".
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

from coordinator.control.status import ProcessStatus, parse_status
from parsley.refusals import Reason

__all__ = [
    "LAST_STATUS_SUFFIX",
    "LastReport",
    "StartFailure",
    "last_status_file",
    "read_last_report",
    "remove_last_report",
    "write_last_report",
]

LAST_STATUS_SUFFIX: Final = ".coordinator.last-status.json"
"""The file name after ``<prefix>``, beside ``<prefix>.coordinator.endpoint``."""


def last_status_file(state_dir: str | os.PathLike[str], prefix: str) -> Path:
    """``<state_dir>/<prefix>.coordinator.last-status.json``."""
    return Path(state_dir) / f"{prefix}{LAST_STATUS_SUFFIX}"


@dataclass(frozen=True, slots=True)
class StartFailure:
    """A start that failed before any process ran.

    Attributes:
        refusal_reason: the refusal that failed it, or ``None`` for a failure
            (a missing prerequisite, a retryable start, a wrong declaration).
        detail: the message the coordinator logged.
    """

    refusal_reason: Reason | None
    detail: str

    def to_json(self) -> dict[str, Any]:
        """``{"refusal_reason": name | None, "detail": str}``."""
        return {"refusal_reason": None if self.refusal_reason is None
                else self.refusal_reason.name, "detail": self.detail}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StartFailure:
        """Parse :meth:`to_json`'s form.

        Raises:
            KeyError, TypeError, ValueError: malformed, or an unknown reason.
        """
        reason = obj.get("refusal_reason")
        return cls(None if reason is None else Reason(reason), str(obj["detail"]))


@dataclass(frozen=True, slots=True)
class LastReport:
    """The status a ``run`` ended with, and how it ended.

    Attributes:
        exited_at_ms: when ``run`` exited, ms since the epoch (UTC).
        exit_code: ``run``'s exit status (``coordinator.cli.ExitCode``).
        exit_name: that code's name (``CLEAN``, ``REFUSAL``, ...).
        pid: the coordinator's OS process id.
        processes: each process's last status (no task entries: they are retired
            when their workers exit).
        start_error: the start's failure when no process ran, else ``None``.
    """

    exited_at_ms: int
    exit_code: int
    exit_name: str
    pid: int
    processes: Mapping[str, ProcessStatus] = field(default_factory=dict)
    start_error: StartFailure | None = None

    @property
    def exited_at(self) -> str:
        """The exit time as ISO 8601 UTC with ms, ``2026-12-01T06:10:03.120Z``."""
        at = datetime.fromtimestamp(self.exited_at_ms / 1000, tz=UTC)
        return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"

    def to_json(self) -> dict[str, Any]:
        """The document of the module docstring."""
        return {
            "running": False,
            "last_report": {"exited_at": self.exited_at, "exited_at_ms": self.exited_at_ms,
                            "exit_code": self.exit_code, "exit": self.exit_name,
                            "pid": self.pid},
            "start_error": None if self.start_error is None else self.start_error.to_json(),
            "processes": {name: s.to_json() for name, s in self.processes.items()},
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> LastReport:
        """Parse :meth:`to_json`'s form.

        Raises:
            KeyError, TypeError, ValueError: a malformed document.
        """
        head = obj["last_report"]
        start = obj.get("start_error")
        return cls(
            exited_at_ms=int(head["exited_at_ms"]), exit_code=int(head["exit_code"]),
            exit_name=str(head.get("exit", "")), pid=int(head.get("pid", 0)),
            processes=parse_status({"processes": obj.get("processes") or {}}),
            start_error=None if start is None else StartFailure.from_json(start),
        )

    @classmethod
    def now(cls, exit_code: int, exit_name: str, processes: Mapping[str, ProcessStatus],
            start_error: StartFailure | None = None) -> LastReport:
        """A report stamped with the current time and this process's pid."""
        return cls(int(time.time() * 1000), int(exit_code), exit_name, os.getpid(),
                   dict(processes), start_error)


def write_last_report(path: Path, report: LastReport) -> None:
    """Write ``report`` to ``path`` atomically: a temporary file (mode 0600) in the same
    directory, flushed and fsynced, then ``os.replace``; a reader sees the old file or
    the new one, never a part.

    Raises:
        OSError: the directory cannot be written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_last_report(path: Path) -> LastReport | None:
    """The report at ``path``, or ``None`` when there is none.

    Raises:
        ValueError: the file exists but is not a report (the message names it).
        OSError: it cannot be read (other than absent).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return LastReport.from_json(orjson.loads(raw))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable last status report "
                         f"({type(exc).__name__}: {exc})") from exc


def remove_last_report(path: Path) -> None:
    """Remove the report at ``path`` if there is one (a new ``run`` started)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
