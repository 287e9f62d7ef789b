"""Blocking client calls off the main thread, and waits on admin answers, each bounded by
the worker itself.

librdkafka's own timeout arguments are not a bound (docs/operations.md, "Bounded client
calls"): after a broker restart a transactional producer keeps a stale group-coordinator
entry and ``send_offsets_to_transaction`` blocks past its timeout (librdkafka issues 5456
and 5511). The main thread hands each such call to :func:`call`, which runs it on a
helper thread and waits at most the call's bound. Past the bound it raises
:class:`CallStalled` and abandons the helper, which stays blocked in C holding the wedged
client: the worker drops that client and recovers in place (docs/operations.md, "The task
timeout"). While it waits, the main thread still serves the heartbeat (status pushes) and
the watchdog's stop grace (:func:`workers.watchdog.bounded`, with a margin over the bound).

An admin call returns futures that the main thread awaits in Python
(:func:`await_future`), often several in a retry loop (:func:`workers.admin.offset_bounds`
awaits two answers of up to 35 s each per attempt). Such a block is bounded with
:func:`awaiting`, not with the watchdog's :func:`workers.watchdog.bounded` alone: it sets
a deadline for this thread, :func:`await_future` and :func:`pause` never wait past it and
raise :class:`CallStalled` once it has passed, and the worker recovers in place with
fresh clients. The watchdog is armed behind it with :data:`WATCHDOG_MARGIN_S` of margin:
past a bound its hard exit is for a main thread blocked in C, never for a wait this module
ends (after a stop is asked, its stop grace still ends any wait; docs/operations.md,
"Bounded client calls").
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, NamedTuple, TypeVar

from workers.kafka_errors import ErrorKind, SubstrateError
from workers.watchdog import bound_of, bounded

__all__ = ["HEARTBEAT_S", "WATCHDOG_MARGIN_S", "CallStalled", "await_future", "awaiting", "call",
           "pause", "set_heartbeat"]

T = TypeVar("T")

WATCHDOG_MARGIN_S: Final = 10.0
"""How far past a call's bound the watchdog's own bound lies, s: the watchdog only acts
when the main thread itself is stuck, never for a call this module gives up on."""
IDLE_CHECK_S: Final = 5.0
"""How often an idle helper thread checks that its calling thread still lives, s."""
HEARTBEAT_S: Final = 0.5
"""How often a waiting main thread calls the heartbeat, s at most."""


class CallStalled(SubstrateError):
    """A client call did not return within its bound; the client that made it is wedged.

    A ``SUBSTRATE_TRANSIENT`` :class:`~workers.kafka_errors.SubstrateError`: the worker
    drops the client and recovers in place (docs/operations.md, "The task timeout").

    Attributes:
        call: the call's name (a key of :data:`workers.watchdog.CALL_BOUNDS_S`).
        bound_s: its bound, s.
    """

    def __init__(self, call: str, bound_s: float) -> None:
        super().__init__(
            ErrorKind.SUBSTRATE_TRANSIENT,
            f"{call} did not return within {bound_s:g} s (broker unreachable or restarted, "
            "or the client wedged)")
        self.call = call
        self.bound_s = bound_s

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.call, self.bound_s))


class _Job:
    __slots__ = ("args", "done", "error", "fn", "kwargs", "result")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> None:
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:  # handed to the waiting thread as it is
            self.error = exc
        finally:
            self.fn = self.args = self.kwargs = None  # type: ignore[assignment]
            self.done.set()


class _Runner:
    """One daemon thread running one calling thread's jobs in turn; abandoned (it ends after
    its job) once a job outlived its bound. Daemon: a thread blocked in C never holds up
    the exit."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self.abandoned = False
        self.owner = threading.current_thread()
        self.thread = threading.Thread(target=self._loop, name="parsley-client-call",
                                       daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while not self.abandoned:
            try:
                job = self.jobs.get(timeout=IDLE_CHECK_S)
            except queue.Empty:
                if self.owner.is_alive():
                    continue
                return  # its calling thread ended: nothing more will come
            job.run()
            del job  # the client goes with the job, not with the idle thread


class _Deadline(NamedTuple):
    """The deadline of an :func:`awaiting` block: when (monotonic s), and the call it bounds."""

    at: float
    call: str
    bound_s: float

    def stalled(self) -> CallStalled:
        return CallStalled(self.call, self.bound_s)


class _Caller(threading.local):
    """What each calling thread keeps: its runner, its heartbeat (calls from several
    threads never queue behind one another's wedged call) and the deadline of its
    innermost :func:`awaiting` block (the earliest of those it is in)."""

    runner: _Runner | None = None
    heartbeat: Callable[[], None] | None = None
    beating = False
    deadline: _Deadline | None = None


_caller = _Caller()


def set_heartbeat(fn: Callable[[], None] | None) -> None:
    """Call ``fn`` on this thread at most every :data:`HEARTBEAT_S` while one of its calls
    waits: the worker pushes its status from it, so a long call never looks like a
    stalled task."""
    _caller.heartbeat = fn


def _beat(caller: _Caller) -> None:
    beat = caller.heartbeat
    if beat is not None and not caller.beating:
        caller.beating = True
        try:
            beat()
        finally:
            caller.beating = False


@contextlib.contextmanager
def awaiting(name: str, bound_s: float | None = None) -> Iterator[None]:
    """Bound the block's waits in Python on admin answers (:func:`await_future`) and its
    retry pauses (:func:`pause`) by ``bound_s`` from now, as call ``name``.

    Inside the block (on this thread) :func:`await_future` and :func:`pause` never wait
    past the deadline, and raise :class:`CallStalled` ``(name, bound)`` once it has passed:
    a ``SUBSTRATE_TRANSIENT`` error from which the worker recovers in place with fresh
    clients (docs/operations.md, "Bounded client calls" and "The task timeout"), where
    the watchdog alone would hard-exit the worker at the bound. Blocks nest: the earliest
    deadline wins (an inner block never extends an outer one's), and each block's exit
    restores the deadline it found. The watchdog is armed too, with
    :data:`WATCHDOG_MARGIN_S` over the bound (:func:`workers.watchdog.bounded`): it acts
    only when the main thread is stuck outside these waits (in C).

    Args:
        name: the call's name, as the watchdog and the errors give it (a key of
            :data:`workers.watchdog.CALL_BOUNDS_S` unless ``bound_s`` is given).
        bound_s: the bound, s; default :func:`workers.watchdog.bound_of` ``(name)``.

    Raises:
        CallStalled: from an await or pause in the block, once the deadline has passed.
    """
    bound = bound_of(name) if bound_s is None else bound_s
    caller = _caller
    outer = caller.deadline
    mine = _Deadline(time.monotonic() + bound, name, bound)
    caller.deadline = mine if outer is None or mine.at < outer.at else outer
    try:
        with bounded(name, bound + WATCHDOG_MARGIN_S):
            yield
    finally:
        caller.deadline = outer


def pause(seconds: float) -> None:
    """Sleep ``seconds``, calling this thread's heartbeat (:func:`set_heartbeat`) at least
    every :data:`HEARTBEAT_S` meanwhile: a retry loop's wait between quick calls is as long
    a silence as one slow call, and a worker silent for ``stale_task_ms`` is killed
    (coordinator/config.py). Without a heartbeat set it is ``time.sleep``.

    Raises:
        CallStalled: inside an :func:`awaiting` block whose deadline passes before the
            sleep ends (raised at the deadline, never later), so that a retry loop in the
            block ends at its bound (docs/operations.md, "Bounded client calls").
    """
    caller = _caller
    limit = caller.deadline
    until = time.monotonic() + seconds
    while True:
        _beat(caller)
        now = time.monotonic()
        if limit is not None and now >= limit.at:
            raise limit.stalled()
        left = until - now
        if left <= 0:
            return
        if limit is not None:
            left = min(left, limit.at - now)
        time.sleep(min(HEARTBEAT_S, left))


def await_future(future: Any, timeout_s: float) -> Any:
    """``future.result(timeout=timeout_s)`` of an admin call, the heartbeat served meanwhile
    (:func:`set_heartbeat`): a describe awaited 11 s never makes the task look stalled.

    Inside an :func:`awaiting` block it never waits past the block's deadline.

    Raises:
        CallStalled: the deadline of the :func:`awaiting` block this thread is in has
            passed (before an answer came, or before this wait began): the block's call
            took longer than its bound, and the worker recovers in place with fresh
            clients (docs/operations.md, "Bounded client calls" and "The task timeout").
        concurrent.futures.TimeoutError: no answer within ``timeout_s`` (ending before
            any such deadline).
        BaseException: what the future raised.
    """
    caller = _caller
    limit = caller.deadline
    own = time.monotonic() + timeout_s
    while True:
        now = time.monotonic()
        if limit is not None and now >= limit.at and limit.at <= own:
            raise limit.stalled()
        end = own if limit is None else min(own, limit.at)
        left = end - now
        try:
            return future.result(timeout=max(0.0, min(HEARTBEAT_S, left)))
        except concurrent.futures.TimeoutError:
            now = time.monotonic()
            if limit is not None and now >= limit.at and limit.at <= own:
                raise limit.stalled() from None
            if now >= own:
                raise
        _beat(caller)


def call(name: str, fn: Callable[..., T], *args: Any, bound_s: float | None = None,
         **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on the helper thread, waited for at most ``bound_s``.

    Args:
        name: the call's name, as the watchdog and the errors give it (a key of
            :data:`workers.watchdog.CALL_BOUNDS_S` unless ``bound_s`` is given).
        fn: the blocking client call.
        bound_s: the bound, s; default :func:`workers.watchdog.bound_of` ``(name)``.

    Returns:
        What ``fn`` returned.

    Raises:
        CallStalled: ``fn`` did not return within the bound; its client must not be
            used again.
        BaseException: whatever ``fn`` raised, as it raised it.
    """
    bound = bound_of(name) if bound_s is None else bound_s
    job = _Job(fn, args, kwargs)
    caller = _caller
    runner = caller.runner
    if runner is None or runner.abandoned or not runner.thread.is_alive():
        runner = caller.runner = _Runner()
    runner.jobs.put(job)
    deadline = time.monotonic() + bound
    with bounded(name, bound + WATCHDOG_MARGIN_S):
        while not job.done.wait(min(HEARTBEAT_S, max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline:
                runner.abandoned = True
                caller.runner = None
                del fn, args, kwargs  # the traceback keeps this frame: not the wedged client
                raise CallStalled(name, bound)
            _beat(caller)
    if job.error is not None:
        error, job.error = job.error, None
        raise error
    return job.result  # type: ignore[no-any-return]
