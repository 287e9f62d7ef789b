"""A chaos run in a child process of its own: :func:`run_chaos_isolated`.

The tests of ``tests/chaos/`` run the harness (:mod:`devtools.chaos.harness`) through it;
``python -m perf.soak`` runs it in its own process already.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback
from typing import Any

import multiprocess  # the coordinator's own process library (spawn; dill pickles ``say``)

from devtools.chaos.harness import ChaosFailure, ChaosResult, ChaosSettings, run_chaos
from devtools.chaos.load import LoadProducer

__all__ = ["ISOLATED_EXIT_S", "START_BOUND_S", "run_bound_s", "run_chaos_isolated"]


ISOLATED_EXIT_S = 30.0
"""Bound on :func:`run_chaos_isolated`'s child exiting once it has sent its result, s
(it is killed past it)."""


START_BOUND_S = 525.0 + LoadProducer.STOP_S
"""What :func:`run_bound_s` allows a run for its brokers' start, its first start, its stop
(the load producer's :attr:`~devtools.chaos.load.LoadProducer.STOP_S` among it) and its
verdict, s."""


def run_bound_s(settings: ChaosSettings) -> float:
    """An outer bound on a run of ``settings``, s: each fault's recovery bound, its longest
    gap and a minute for the fault itself (or the run's minutes), the drain's bound, and
    :data:`START_BOUND_S`. The harness bounds each step itself; this one only catches a
    child that hangs regardless."""
    if settings.faults is None:
        faults_s = (settings.minutes or 0.0) * 60 + settings.recovery_s
    else:
        faults_s = settings.faults * (settings.recovery_s + settings.gap_s[1] + 60.0)
    return START_BOUND_S + faults_s + settings.drain_s


def run_chaos_isolated(settings: ChaosSettings) -> ChaosResult:
    """:func:`devtools.chaos.harness.run_chaos` in a child process of its own
    (``multiprocess``, spawn), returning its result.

    A run leaves Kafka clients behind by design: a call that outlives its bound is given up
    and its helper thread stays blocked in C with the wedged client
    (:func:`devtools.chaos.harness.bounded`), and
    librdkafka has a use-after-free on such paths (docs/operations.md, "A librdkafka abort
    during broker outages"). In a test process they outlive the test, and a later test's
    process can abort. In the child they end with it: the child leaves with ``os._exit``
    as soon as its result is sent.

    Raises:
        ChaosFailure: the child ended without a result (a crash: its exit status, a
            negative signal number, is named), or sent none within :func:`run_bound_s`
            (killed). A child that does not exit within :data:`ISOLATED_EXIT_S` after
            sending its result is killed, and the result returned.
    """
    ctx = multiprocess.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_run_and_send, args=(settings, send), name="chaos-harness")
    child.start()
    send.close()
    result: ChaosResult | None = None
    deadline = time.monotonic() + run_bound_s(settings)
    try:
        # Readable once a result is sent, or once the child is gone (then recv sees EOF).
        while not receive.poll(1.0) and child.is_alive():
            if time.monotonic() > deadline:
                child.kill()
                raise ChaosFailure(
                    f"the chaos harness's process (pid {child.pid}) sent no result within "
                    f"{run_bound_s(settings):.0f} s (its bounds add up to less): killed")
        with contextlib.suppress(EOFError):
            result = receive.recv()
    finally:
        receive.close()
        child.join(ISOLATED_EXIT_S)
        if child.is_alive():
            child.kill()
            child.join(5)
    if result is None:
        raise ChaosFailure(
            f"the chaos harness's process (pid {child.pid}) exited with status "
            f"{child.exitcode} before it sent a result (a negative status is the signal "
            "that ended it; its output is above)")
    return result


def _run_and_send(settings: ChaosSettings, send: Any) -> None:
    """The child of :func:`run_chaos_isolated`: run, send the result, leave at once."""
    try:
        result = run_chaos(settings)
    except BaseException as exc:  # a harness bug: the parent sees it as the failure
        result = ChaosResult(seed=settings.seed,
                             failure=f"the harness raised: {traceback.format_exc()}"
                             if isinstance(exc, Exception) else repr(exc))
    sys.stdout.flush()
    sys.stderr.flush()  # the run's last lines before the parent prints its report
    send.send(result)
    send.close()
    os._exit(0)
