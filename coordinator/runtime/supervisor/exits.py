"""How a worker stopped, read from its final report or its exit code (pure).

Decisions key on the
:class:`~workers.protocol.StopKind` a worker reports (or its exit code), never on message text
(docs/operations.md, "Supervision").
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Mapping
from typing import Any, Final

from parsley.refusals import Reason
from workers.protocol import StopKind, exit_verdict

__all__ = ["SUCCESSOR_FENCED", "classify_exit", "describe_exit", "fenced_by_successor"]


def describe_exit(exitcode: int | None) -> str:
    """``"exited with code N"`` or ``"was killed by signal N (SIGNAME)"``."""
    if exitcode is None:
        return "has not exited"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = "unknown signal"
        return f"was killed by signal {-exitcode} ({name})"
    return f"exited with code {exitcode}"


SUCCESSOR_FENCED: Final = "fenced by a live successor:"
"""How a worker's ``failure_detail`` begins when a live successor holds its task's
``group.instance.id`` (KIP-345; ``workers.verdicts.successor_stop``)."""


def fenced_by_successor(kind: StopKind, detail: str | None) -> bool:
    """Whether a worker's stop is the task moving to a live successor (pure).

    Only a ``FATAL`` stop whose final report says a live successor holds the task's
    ``group.instance.id`` (:data:`SUCCESSOR_FENCED`) counts; every other ``FATAL`` (an
    unexpected exception, a native panic, a fatal client error) is a failure that stops
    the process, with ``--join`` as without (docs/operations.md, "Several coordinators").
    """
    return kind is StopKind.FATAL and detail is not None \
        and detail.startswith(SUCCESSOR_FENCED)


def classify_exit(final: Mapping[str, Any], code: int | None
                  ) -> tuple[StopKind, Reason | None, str | None]:
    """How a worker stopped, from its final report or, when that was lost, its exit code (pure).

    Never reads message text (docs/operations.md, "Supervision": classified by the stop kind).

    Args:
        final: the worker's ``"final"`` message (``workers.protocol``), or ``{}``
            when none arrived.
        code: its exit status (``multiprocess.Process.exitcode``).

    Returns:
        ``(kind, reason, detail)``. With a report: its stop kind, refusal reason
        and ``failure_detail``; an unreadable kind falls back to the exit code's,
        a missing reason to the code's reason. Without one: the exit code's
        :class:`workers.protocol.ExitVerdict` and a detail saying the final report
        was lost: ``"refusal <REASON> (final report lost)"``, or ``"refusal, reason
        unknown (final report lost)"`` for exit code 10. The detail is ``None`` for
        a crash; the caller describes the exit.
    """
    verdict = exit_verdict(code)
    if not final:
        if verdict.kind is StopKind.CRASHED:
            return verdict.kind, None, None
        if verdict.kind is StopKind.REFUSAL:
            what = (f"refusal {verdict.reason.name}" if verdict.reason is not None
                    else "refusal, reason unknown")
        else:
            what = f"stop {verdict.kind.value}"
        return verdict.kind, verdict.reason, f"{what} (final report lost)"
    try:
        kind = StopKind(final["stop_kind"])
    except (KeyError, ValueError, TypeError):
        kind = verdict.kind
    reason: Reason | None = None
    if kind is StopKind.REFUSAL:
        if final.get("refusal_reason"):
            with contextlib.suppress(ValueError, TypeError):
                reason = Reason(final["refusal_reason"])
        if reason is None:
            reason = verdict.reason
    raw = final.get("failure_detail")
    return kind, reason, raw if isinstance(raw, str) and raw else None

