"""The ``parsley-coordinator status`` table: a status document rendered for a terminal.

Two layouts (docs/operations.md, "Reading the `status` table"):

- the default fits 100 columns with one line per task: process, state, task,
  held, lag, caught up, the first held channel's head blockers (``+N more`` when
  several channels hold messages), frontier bytes, entry age. A cell too long for
  the terminal (a process name past 20 characters, the blockers) ends in an
  ellipsis rather than wrapping the row.
- ``--wide`` shows every detail: every held channel's blockers on its own line, the
  task's own state and pid, frontier channels and bytes against the budget, restore
  progress, memory, CPU, restarts and cross-partition causes. Rendered without a
  width limit.

The document is a live one (``{"processes": ...}``) or a last report
(:mod:`coordinator.control.last_status`), which gets a header line with the exit time and code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from coordinator.control.last_status import LastReport
from coordinator.control.status import (
    ProcessState,
    ProcessStatus,
    RecoveryStatus,
    TaskStatus,
    parse_status,
)
from parsley.status import HeldChannel

__all__ = ["FIT_COLUMNS", "held_line", "recovery_line", "render", "report_header"]

FIT_COLUMNS: Final = 100
"""The width the default layout fits in, characters."""


def held_line(h: HeldChannel) -> str:
    """One held channel and its head's blockers, e.g. ``b[0]@7 x2: a[0] needs 9 settled -``
    (docs/operations.md, "Reading the `status` table")."""
    waits = ", ".join(
        f"{b.topic}[{b.partition}] needs {b.required} settled "
        f"{'-' if b.settled is None else b.settled}" for b in h.blockers
    ) or "deliverable"
    return f"{h.topic}[{h.partition}]@{h.head} x{h.count}: {waits}"


def _age(t: TaskStatus) -> str:
    ms = t.updated_ms_ago
    text = f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.0f} s"
    return text + (" STALE" if t.stale else "")


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _no_tasks_caught_up(st: ProcessStatus) -> str:
    """The caught-up cell of a process with no task entry: ``-`` once it has stopped
    (nothing runs to be caught up), ``no`` while it is starting or rebalancing."""
    return "-" if st.state is ProcessState.STOPPED else _yes(False)


def report_header(report: LastReport) -> str:
    """The lines that mark a last report: pid, exit time (UTC) and exit code, broken
    before "exited" so that each fits 80 columns and the time is never split."""
    when = report.exited_at.replace("T", " ").removesuffix("Z")
    return (f"last report: no coordinator is running; the one that ran (pid {report.pid})\n"
            f"exited at {when} UTC with exit code {report.exit_code}"
            + (f" ({report.exit_name})" if report.exit_name else ""))


_PROCESS_MAX: Final = 20
"""The widest the process column gets in the default layout, characters."""


def recovery_line(r: RecoveryStatus) -> str:
    """A task recovering in place, e.g. ``recovering 12 s of 300 s (attempt 3): <cause>``
    (docs/operations.md, "The task timeout")."""
    return (f"recovering {r.stalled_s:.0f} s of {r.timeout_s:g} s (attempt {r.attempts})"
            + (f": {r.cause}" if r.cause else ""))


def _compact(statuses: Mapping[str, ProcessStatus], width: int) -> Table:
    heads = ("process", "state", "task", "held", "lag", "caught up", "head blockers",
             "frontier", "age")
    blockers_at = heads.index("head blockers")
    rows: list[list[str]] = []
    more: list[str] = []  # per row: the "(+N more)" kept when the blockers are shortened
    for name, st in statuses.items():
        if not st.tasks:
            rows.append([name, st.state.value, "-", "-", "-", _no_tasks_caught_up(st), "-",
                         "-", "-"])
            more.append("")
        for t in st.tasks:
            first = held_line(t.held[0]) if t.held else "-"
            if t.recovery is not None:
                first = recovery_line(t.recovery) + ("" if first == "-" else f"; {first}")
            more.append(f" (+{len(t.held) - 1} more)" if len(t.held) > 1 else "")
            rows.append([name, st.state.value, str(t.task), str(t.held_count),
                         "-" if t.lag is None else str(t.lag), _yes(t.caught_up),
                         first + more[-1], _bytes(t.frontier_bytes), _age(t)])
    natural = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(heads)]
    natural[0] = min(natural[0], _PROCESS_MAX)
    # SIMPLE_HEAD with collapsed padding and no edge padding: 2 spaces between columns
    # and 1 at each edge. The blockers column gets what the others leave of the width.
    rest = sum(n for i, n in enumerate(natural) if i != blockers_at) + 2 * len(heads)
    blockers_width = max(len("head blockers"), min(natural[blockers_at], width - rest))
    table = Table(title="parsley processes", box=box.SIMPLE_HEAD, pad_edge=False,
                  collapse_padding=True)
    for i, col in enumerate(heads):
        table.add_column(col, justify="right" if col in ("task", "held", "lag", "frontier",
                                                         "age") else "left",
                         no_wrap=True, overflow="ellipsis",
                         max_width=_PROCESS_MAX if i == 0 else blockers_width
                         if i == blockers_at else None)
    for r, tail in zip(rows, more, strict=True):
        if len(r[blockers_at]) > blockers_width and tail:
            keep = max(0, blockers_width - len(tail) - 1)
            r[blockers_at] = r[blockers_at][:keep] + "…" + tail
        table.add_row(*r)
    return table


def _wide(statuses: Mapping[str, ProcessStatus]) -> Table:
    table = Table(title="parsley processes")
    for col in ("process", "state", "restarts", "task", "task state", "pid", "held",
                "waited", "head blockers", "frontier", "lag", "caught up", "restore", "rss",
                "cpu", "cross-partition causes", "age"):
        table.add_column(col, no_wrap=True)
    for name, st in statuses.items():
        if not st.tasks:
            table.add_row(name, st.state.value, str(st.restarts), *["-"] * 8,
                          _no_tasks_caught_up(st), *["-"] * 5)
        for t in st.tasks:
            restore = "-" if t.restore is None else (
                f"{t.restore.records} rec, {t.restore.position}/{t.restore.end}"
                + (" done" if t.restore.done else ""))
            table.add_row(
                name, st.state.value, str(st.restarts), str(t.task), t.state.value, str(t.pid),
                str(t.held_count), str(t.waited),
                "\n".join([*([recovery_line(t.recovery)] if t.recovery else []),
                           *(held_line(h) for h in t.held)]) or "-",
                f"{t.frontier_channels} ch / {t.frontier_bytes} of {t.budget_bytes} B",
                "-" if t.lag is None else str(t.lag), _yes(t.caught_up), restore,
                _bytes(t.rss_bytes),
                "-" if t.cpu_percent is None else f"{t.cpu_percent:.1f}%",
                str(t.cross_partition_causes), _age(t))
    return table


def render(doc: Mapping[str, Any], *, wide: bool = False,
           width: int = FIT_COLUMNS) -> RenderableType:
    """The table (and notes) for a status document.

    Args:
        doc: a live status document (``{"processes": ...}``, coordinator.control.status) or a
            last report's (``{"running": false, "last_report": {...}, ...}``).
        wide: the ``--wide`` layout (module docstring).
        width: the terminal's width, characters: the default layout shortens the
            head blockers (ending them in an ellipsis) to fit it.

    Raises:
        KeyError, TypeError, ValueError: a malformed document.
    """
    parts: list[RenderableType] = []
    report = LastReport.from_json(doc) if doc.get("last_report") else None
    if report is not None:
        parts.append(Text(report_header(report), style="bold"))
        statuses: Mapping[str, ProcessStatus] = report.processes
    else:
        statuses = parse_status(doc)
    if statuses or report is None:  # a start that failed ran no process: no empty table
        parts.append(_wide(statuses) if wide else _compact(statuses, width))
    if report is not None and report.start_error is not None:
        err = report.start_error
        what = "refused" if err.refusal_reason is not None else "failed"
        reason = f"{err.refusal_reason.name}: " if err.refusal_reason is not None else ""
        parts.append(Text(f"start {what}: {reason}{err.detail}", style="bold red"))
    # --join: who runs which task (coordinator.runtime.peers)
    for c in doc.get("coordinators") or ():
        tasks = "; ".join(f"{p} tasks {list(t)}" for p, t in c.get("tasks", {}).items())
        parts.append(Text(
            f"coordinator {c['host']} pid {c['pid']} {c['endpoint']}"
            f"{' (this one)' if c.get('self') else ''}"
            f"{'' if c.get('answered') else ' (no answer)'}: {tasks or 'no task'}"))
    for name, st in statuses.items():
        if st.refusal_reason is not None or st.failure_detail is not None:
            reason = st.refusal_reason.name if st.refusal_reason else "no refusal reason"
            parts.append(Text(f"{name}: {reason}: {st.failure_detail}", style="bold red"))
    return Group(*parts)
