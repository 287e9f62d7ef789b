"""The worker's watchdog: bounds every blocking client call; outlives no stop or coordinator.

librdkafka's own ``timeout`` arguments are not a bound the worker can rely on (a
``send_offsets_to_transaction(timeout=30)`` was seen blocked for minutes after a broker
restart, and a worker blocked in C never runs its SIGTERM handler), so the main thread
wraps each blocking call in :func:`bounded` (a call name and a bound, s; calls may nest)
and a daemon thread (:class:`Watchdog`) acts on the pure :func:`decide` every
:data:`TICK_S` and on every signal:

* a call past its bound, or blocked :data:`STOP_GRACE_S` after a stop was asked: the
  final report (``SUBSTRATE``, naming the call, how long it was blocked and its bound) is
  pushed on the watchdog's own socket and the process hard-exits with the SUBSTRATE exit
  code, committing nothing more;
* the coordinator gone (the parent changed, :data:`PARENT_DEATH_SIGNAL`): exit at once,
  with no report and no commit.

The hard exit is for a main thread blocked in C (``consume``, closing a client), where
nothing else can end the call. A wait in Python is ended by the worker itself and raises
:class:`workers.calls.CallStalled`, from which it recovers in place: a call on a helper
thread (:func:`workers.calls.call`) and every wait on admin answers
(:func:`workers.calls.awaiting`, around :func:`workers.calls.await_future` and its retry
pauses) arm this watchdog only with :data:`workers.calls.WATCHDOG_MARGIN_S` over their
bound, so past a bound it acts only when the main thread is stuck outside those waits
(its stop grace after a stop was asked still applies to them). Never wrap a
block that awaits admin futures in :func:`bounded` alone: its waits (an attempt's two
answers of 35 s, retried) sum past the bound and the worker would exit where it could
recover (``list_offsets blocked 40.0 s``, seen under the 3-broker chaos test).

How it learns of signals and of the parent's death, and why: docs/architecture.md, "The
worker", "The watchdog"; the rule: docs/operations.md, "Bounded client calls".
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import enum
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "CALL_BOUNDS_S",
    "IN_FLIGHT",
    "PARENT_DEATH_SIGNAL",
    "STOP_GRACE_S",
    "TICK_S",
    "Action",
    "ActionKind",
    "Armed",
    "Watchdog",
    "bound_of",
    "bounded",
    "decide",
    "install",
    "set_parent_death_signal",
]

log = logging.getLogger("parsley.worker.watchdog")

TICK_S: Final = 0.25
"""How often the watchdog looks, s (a parent death is seen within this where prctl is missing)."""
STOP_GRACE_S: Final = 5.0
"""After a stop is asked, how long the main thread may stay blocked in one call, s
(below the coordinator's default 10 s stop deadline)."""
PARENT_DEATH_SIGNAL: Final = signal.SIGUSR1
"""The signal ``prctl(PR_SET_PDEATHSIG)`` asks for: a wake-up only (see the module doc)."""

CALL_BOUNDS_S: Final = {
    "init_transactions": 35.0,
    "send_offsets_to_transaction": 25.0,
    "flush": 25.0,
    "commit_transaction": 25.0,
    "abort_transaction": 25.0,
    "consume": 30.0,
    "committed": 35.0,
    "list_topics": 10.0,
    "describe_topics": 30.0,
    "describe_consumer_groups": 15.0,
    "list_offsets": 40.0,
    "restore consume": 10.0,
    "offset reset check": 40.0,
    "close": 10.0,
}
"""The bound of each named blocking call, s: the client's own timeout argument plus
5 s (20 s on the commit path, 30 s for ``init_transactions`` and the group's
committed offsets), all well below the coordinator's 60 s stale-report backstop
(docs/operations.md, "Bounded client calls")."""


def bound_of(call: str) -> float:
    """The bound of ``call`` in :data:`CALL_BOUNDS_S`, s.

    Raises:
        KeyError: an unknown call name (every bounded call is named in the table).
    """
    return CALL_BOUNDS_S[call]


@dataclass(frozen=True, slots=True)
class Armed:
    """One blocking call under way: its name, when it began and its bound (monotonic s)."""

    call: str
    started: float
    bound_s: float


class ActionKind(enum.Enum):
    """What the watchdog does (:func:`decide`)."""

    CALL_EXPIRED = "call_expired"
    """A call passed its bound: report SUBSTRATE naming it, hard-exit."""
    STOP_BLOCKED = "stop_blocked"
    """A stop was asked and the main thread stayed blocked in a call: report, hard-exit."""
    PARENT_GONE = "parent_gone"
    """The coordinator died: exit at once, committing nothing more."""


@dataclass(frozen=True, slots=True)
class Action:
    """The watchdog's verdict: its kind and the final report's detail."""

    kind: ActionKind
    detail: str


def decide(
    now: float,
    armed: Sequence[Armed],
    *,
    stop_asked_at: float | None,
    parent_alive: bool,
    stop_grace_s: float = STOP_GRACE_S,
) -> Action | None:
    """What the watchdog must do now, if anything (pure).

    Args:
        now: monotonic time, s.
        armed: the calls under way, outermost first.
        stop_asked_at: when a stop was asked (monotonic s), or ``None``.
        parent_alive: whether the coordinator that spawned the worker is its parent still.
        stop_grace_s: how long a stop waits for a blocked call, s.

    Returns:
        ``PARENT_GONE`` first; then ``CALL_EXPIRED`` for the innermost call past its
        bound; then ``STOP_BLOCKED`` when a stop was asked and the innermost call under
        way has been blocked ``stop_grace_s`` since the later of the stop and its start
        (docs/operations.md, "Bounded client calls": "still blocked in a bounded call
        5 s after SIGTERM"); else ``None``.
    """
    if not parent_alive:
        return Action(ActionKind.PARENT_GONE,
                      "the coordinator that spawned this worker is gone; exiting without "
                      "committing the open transaction")
    for a in reversed(armed):
        blocked = now - a.started
        if blocked > a.bound_s:
            return Action(ActionKind.CALL_EXPIRED,
                          f"{a.call} blocked {blocked:.1f} s (bound {a.bound_s:g} s); broker "
                          "unreachable or restarted: the worker gave up on the call and "
                          f"exited{IN_FLIGHT}")
    if stop_asked_at is not None and armed:
        a = armed[-1]
        since = max(stop_asked_at, a.started)
        if now - since >= stop_grace_s:
            return Action(ActionKind.STOP_BLOCKED,
                          f"asked to stop while blocked in {a.call} for "
                          f"{now - a.started:.1f} s; exited {now - since:.1f} s after the stop "
                          f"reached the call (grace {stop_grace_s:g} s){IN_FLIGHT}")
    return None


IN_FLIGHT: Final = ("; it may have committed the transaction in flight, or not (a restart "
                    "resumes from the last commit)")
"""The end of a ``CALL_EXPIRED`` or ``STOP_BLOCKED`` detail. The call runs on in C while
the final report is pushed (its linger up to 2 s) and the process exits: a commit in
flight may complete on the broker meanwhile, so the detail never claims that nothing was
committed."""

_PR_SET_PDEATHSIG: Final = 1


def set_parent_death_signal(signum: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, signum)`` on Linux; ``False`` where unavailable.

    The signal comes when the thread that spawned this process ends (prctl(2)),
    so the receiver must check :func:`os.getppid` before acting on it.
    """
    name = ctypes.util.find_library("c")
    if not name:
        return False
    try:
        libc = ctypes.CDLL(name, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


class Watchdog:
    """The daemon thread that bounds the main thread's calls (see the module doc).

    Args:
        on_fatal: called from the watchdog thread with the :class:`Action`; pushes the
            final report and hard-exits (it must not return; if it does, the thread
            calls ``os._exit`` itself with ``exit_code``).
        exit_code: the exit status after ``on_fatal`` (the SUBSTRATE code; ``on_fatal`` may
            change :attr:`exit_code`).
        parent_pid: the coordinator's pid, or ``None`` for no parent watch.
        clock: monotonic clock, s.
    """

    def __init__(
        self,
        on_fatal: Callable[[Action], None],
        exit_code: int,
        parent_pid: int | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_fatal = on_fatal
        self.exit_code = exit_code
        self.outcome: Any = None
        """How the worker decided to stop, once it has (set by the main thread): ``on_fatal``
        reports that rather than the call that then blocked its closing."""
        self._parent_pid = parent_pid
        self._clock = clock
        self._lock = threading.RLock()
        self._armed: list[Armed] = []
        self._stop_asked_at: float | None = None
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self._thread = threading.Thread(target=self._loop, name="parsley-watchdog", daemon=True)

    def start(self, *, signals: bool = True) -> None:
        """Start the thread; with ``signals`` (main thread only) route signals to it through
        :func:`signal.set_wakeup_fd`, and ask for :data:`PARENT_DEATH_SIGNAL` on parent death.

        A Python handler must be installed for each signal to be seen (SIGTERM's is the
        worker's clean-stop flag; this installs a no-op one for the parent-death signal).
        """
        if signals:
            signal.signal(PARENT_DEATH_SIGNAL, lambda signum, frame: None)
            signal.set_wakeup_fd(self._write_fd, warn_on_full_buffer=False)
            if self._parent_pid is not None:
                set_parent_death_signal(PARENT_DEATH_SIGNAL)
        self._thread.start()
        # The race: the parent may have died before prctl was set.
        self._check()

    def parent_alive(self) -> bool:
        """Whether the coordinator is still this process's parent (``True`` without a watch)."""
        return self._parent_pid is None or os.getppid() == self._parent_pid

    def stop_asked(self) -> None:
        """Record a stop request (also learnt from SIGTERM through the wakeup fd)."""
        with self._lock:
            if self._stop_asked_at is None:
                self._stop_asked_at = self._clock()

    @contextlib.contextmanager
    def bounded(self, call: str, bound_s: float | None = None) -> Iterator[None]:
        """Run the block as blocking call ``call``, bounded by ``bound_s`` (default
        :func:`bound_of`). Refuses to begin a call once the coordinator is gone."""
        if not self.parent_alive():
            self._fatal(decide(self._clock(), (), stop_asked_at=None, parent_alive=False))
        entry = Armed(call, self._clock(), bound_of(call) if bound_s is None else bound_s)
        with self._lock:
            self._armed.append(entry)
        try:
            yield
        finally:
            with self._lock:  # held by the watchdog while it exits: no call returns then
                self._armed.remove(entry)

    def _check(self) -> None:
        with self._lock:
            action = decide(self._clock(), tuple(self._armed),
                            stop_asked_at=self._stop_asked_at,
                            parent_alive=self.parent_alive())
            if action is not None:
                self._fatal(action)

    def _fatal(self, action: Action | None) -> None:
        assert action is not None
        try:
            self._on_fatal(action)
        finally:
            os._exit(self.exit_code)

    def _loop(self) -> None:
        while True:
            try:
                ready, _, _ = select.select([self._read_fd], [], [], TICK_S)
            except InterruptedError:
                ready = []
            if ready:
                with contextlib.suppress(BlockingIOError):
                    data = os.read(self._read_fd, 64)
                    if signal.SIGTERM in data:
                        self.stop_asked()
            self._check()


_current: Watchdog | None = None


def install(watchdog: Watchdog | None) -> None:
    """Make ``watchdog`` the one :func:`bounded` uses (``None``: calls run unbounded,
    for a worker run in-process by tests)."""
    global _current
    _current = watchdog


@contextlib.contextmanager
def bounded(call: str, bound_s: float | None = None) -> Iterator[None]:
    """:meth:`Watchdog.bounded` on the installed watchdog; a plain block without one.

    For a call blocked in C on the main thread: past the bound the worker hard-exits. A
    block that waits in Python on admin answers uses :func:`workers.calls.awaiting`
    instead, which ends it with :class:`workers.calls.CallStalled` (see the module doc).

    Args:
        call: the call's name (a key of :data:`CALL_BOUNDS_S`), named in the report.
        bound_s: the bound, s; default :func:`bound_of`.
    """
    dog = _current
    if dog is None:
        yield
        return
    with dog.bounded(call, bound_s):
        yield
