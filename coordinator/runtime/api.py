"""The Python API: ``Parsley.start(config, *processes)`` and the handle it returns.

Mirrors the Java API (docs/runbooks.md, "Before an incident")::

    with Parsley.start(config, shipper) as parsley:
        parsley.await_stopped()
        for name, status in parsley.status().items():
            log.error("%s: %s refusal=%s detail=%s", name, status.state,
                      status.refusal_reason, status.failure_detail)

``start`` is all-or-nothing (docs/runbooks.md, "If `start` raised"): it runs the
bootstrap for every process (:mod:`coordinator.bootstrap`), then spawns one
worker per task (:mod:`coordinator.runtime.supervisor`) and serves the control socket
(:mod:`coordinator.control.status_socket`), and with ``config.metrics_port`` set,
Prometheus ``/metrics`` (:mod:`coordinator.control.metrics`). An exception from it means
nothing is running.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Final

import zmq

from coordinator.bootstrap import ProcessPlan, StartError, bootstrap, restart_bootstrap
from coordinator.config import ParsleyConfig
from coordinator.control.last_status import last_status_file, remove_last_report
from coordinator.control.metrics import MetricsServer
from coordinator.control.status import ProcessState, ProcessStatus, status_to_json
from coordinator.control.status_socket import (
    BadRequest,
    ControlServer,
    NoReplyError,
    check_ipc_length,
    endpoint_file,
    listening,
    pre_upgrade_endpoints,
    request,
    resolve_endpoint,
)
from coordinator.log_setup import ensure_log_handler
from coordinator.runtime.client_check import check_process_clients
from coordinator.runtime.main_guard import check_main_guard
from coordinator.runtime.membership import Membership, start_joined
from coordinator.runtime.peers import (
    application_status,
    coordinator_client_id,
    stop_peers,
    this_coordinator,
)
from coordinator.runtime.supervisor import Supervisor
from coordinator.runtime.supervisor.restarts import RestartPolicy
from coordinator.runtime.supervisor.shutdown import DEFAULT_STOP_DEADLINE_S, ShutdownReport
from coordinator.runtime.supervisor.spawn import WorkerTarget
from coordinator.state_dir import default_state_dir, ensure_state_dir
from parsley.declarations import Process

__all__ = [
    "MAX_CONTROL_STOP_DEADLINE_S",
    "CoordinatorRunningError",
    "Parsley",
    "control_stop_deadline",
]

log = logging.getLogger("parsley.coordinator")


class CoordinatorRunningError(StartError):
    """A coordinator already runs this prefix under this state dir (docs/operations.md,
    "One coordinator per prefix"); the message says how to stop it."""


def _refuse_a_second_coordinator(endpoint: str, config: ParsleyConfig) -> None:
    """Refuse to start beside a coordinator that already runs this prefix here.

    Asks the endpoint this start would bind and the one a running coordinator
    recorded under the state dir, ``--listen tcp`` included. When the state dir is
    the default, it also asks those under earlier builds' default, ``<tmp>/parsley``
    (docs/operations.md, "The state dir"). Two coordinators on one prefix share the
    transactional ids and the consumer group, so they fence each other's workers.
    The message therefore says how to stop the first, and never advises another
    state dir or endpoint: that would only hide the first from this check
    (docs/operations.md, "One coordinator per prefix").

    Raises:
        CoordinatorRunningError: a coordinator answers on either endpoint.
    """
    candidates = [endpoint]
    with contextlib.suppress(OSError):
        recorded = endpoint_file(config).read_text().strip()
        if recorded and recorded not in candidates:
            candidates.append(recorded)
    if config.state_dir == default_state_dir():  # and where an older build's default was
        candidates += [e for e in pre_upgrade_endpoints(config.application_id_prefix)
                       if e not in candidates]
    for where in candidates:
        if listening(where) is False:
            continue
        try:
            reply = request(where, {"op": "ping"}, timeout_s=0.5)
        except (NoReplyError, zmq.ZMQError):
            continue  # a stale socket or record from a coordinator that died
        prefix = config.application_id_prefix
        raise CoordinatorRunningError(
            f"a coordinator (pid {reply.get('pid')}) already runs prefix '{prefix}': it "
            f"serves {where}. Running two coordinators on one prefix is not supported: they "
            "would fence each other's workers (running a prefix's processes across several "
            "coordinators is future work). To stop the first: parsley-coordinator stop "
            f"--prefix {prefix} --state-dir {config.state_dir} (or --endpoint {where}), "
            "then start this one"
        )



MEMBERSHIP_CLOSE_MARGIN_S: Final = 15.0
"""s a ``join`` coordinator's leaving may take beyond the workers' stop deadline (the
SIGKILL wait and the group's LeaveGroup)."""

MAX_CONTROL_STOP_DEADLINE_S: Final = 300.0
"""The longest deadline a control ``stop`` request may ask for, s: the control
thread answers nothing else while a stop runs, so an unbounded one would block it."""


def control_stop_deadline(raw: object) -> tuple[float | None, str | None]:
    """The deadline a control ``stop`` request runs with (pure).

    Args:
        raw: the request's ``deadline_s``: absent (``None``) or a number of
            seconds >= 0.

    Returns:
        ``(deadline_s, note)``: ``None`` for the supervisor's default; a
        request over :data:`MAX_CONTROL_STOP_DEADLINE_S` is capped to it and
        ``note`` says so (the reply carries it); otherwise ``note`` is ``None``.

    Raises:
        BadRequest: ``raw`` is not a finite number >= 0 (a bool included);
            the reply is ``MALFORMED_REQUEST``.
    """
    if raw is None:
        return None, None
    if (isinstance(raw, bool) or not isinstance(raw, int | float)
            or not math.isfinite(raw) or raw < 0):
        raise BadRequest(f"deadline_s must be a number >= 0, got {raw!r}")
    if raw > MAX_CONTROL_STOP_DEADLINE_S:
        return MAX_CONTROL_STOP_DEADLINE_S, (
            f"deadline_s {raw:g} capped to {MAX_CONTROL_STOP_DEADLINE_S:g} s, the longest a "
            "control stop may take")
    return float(raw), None


class Parsley:
    """A running set of processes: the handle :meth:`start` returns (a context manager).

    Not constructed directly; use :meth:`Parsley.start`.
    """

    def __init__(self, config: ParsleyConfig, supervisor: Supervisor,
                 control: ControlServer | None, metrics: MetricsServer | None = None,
                 membership: Membership | None = None) -> None:
        self._config = config
        self._supervisor = supervisor
        self._control = control
        self._metrics = metrics
        self._membership = membership
        self._me = this_coordinator(None)
        self._closed: ShutdownReport | None = None
        self._stop_report: ShutdownReport | None = None

    @classmethod
    def start(
        cls,
        config: ParsleyConfig,
        *processes: Process,
        restart: RestartPolicy | str = RestartPolicy.NEVER,
        control: str | bool | None = "ipc",
        worker_target: WorkerTarget | None = None,
        stop_deadline_s: float = DEFAULT_STOP_DEADLINE_S,
        group_window_s: float | None = None,
        max_attempts: int | None = None,
        backoff_s: float | None = None,
        join: bool = False,
        on_bootstrap: Callable[[], None] | None = None,
    ) -> Parsley:
        """Bootstrap every process, spawn one worker per task, serve the control socket.

        Args:
            config: the :class:`~coordinator.config.ParsleyConfig`.
            *processes: the declared processes, each its own application
                ``<prefix>-<process>``.
            restart: ``"never"`` (default) or ``"transient"`` (:class:`RestartPolicy`).
            control: the control socket: ``"ipc"`` (default path under the state
                dir), ``"tcp"``, ``"tcp:<port>"``, a full endpoint, or
                ``None``/``False`` for none.
            worker_target: the worker entry point (``workers.main.run`` by default).
            stop_deadline_s: SIGTERM-to-SIGKILL deadline, s.
            group_window_s: how long a start waits for the group's previous
                members to leave before it refuses, s; ``None`` (default) for
                twice the consumer ``session.timeout.ms``.
            max_attempts: bounded restarts under ``transient``;
                ``config.max_restarts`` if ``None``.
            backoff_s: first restart delay under ``transient``, s;
                ``config.restart_backoff_ms`` if ``None``.
            join: share the tasks with the other coordinators of the prefix started with
                ``join`` (docs/operations.md, "Several coordinators"): this start joins
                each process's coordinators' group and bootstraps and spawns only the
                tasks assigned to it, as they are assigned (a refusal then stops the
                process and shows in :meth:`status`, it is not raised here).
            on_bootstrap: called once when the start begins its bootstrap, after every
                check that runs nothing (declarations, properties, state dir, control
                socket, metrics port) passed and the previous run's last status report
                was dropped; ``parsley-coordinator run`` keeps a report of a failed start
                only after it (docs/operations.md, "Status after exit").

        Returns:
            The running handle.

        Raises:
            ParsleyFailClosedError: a refusal the bootstrap could see (reason,
                diagnosis and remedy in the message).
            StartRetryableError: a lagging metadata view; the message ends
                "Retry this start.".
            StartError: a missing prerequisite (a topic, connectivity, ACLs), a
                ``metrics_port`` that cannot be bound, or a start at a script's top
                level outside ``if __name__ == "__main__":``
                (:func:`coordinator.runtime.main_guard.check_main_guard`), refused before
                anything runs; :class:`CoordinatorRunningError` for a coordinator
                already running this prefix under this state dir; an ``ipc://``
                control path longer than ZeroMQ binds.
            StateDirError: the state dir is owned by another user, or cannot be
                created (a ``ValueError``; :mod:`coordinator.state_dir`).
            ValueError: a wrong declaration or argument, a per-process Kafka
                property Parsley owns (:meth:`ParsleyConfig.check_processes`) or
                librdkafka refuses (:func:`coordinator.runtime.client_check.check_process_clients`).
        """
        ensure_log_handler()
        check_main_guard()
        ensure_state_dir(config.state_dir)
        policy = RestartPolicy(restart)
        procs = list(processes)
        config.check_processes(procs)
        check_process_clients(config, procs)
        endpoint = None
        if control not in (None, False):
            endpoint = resolve_endpoint(None if control is True else str(control), config)
            try:
                check_ipc_length(endpoint)
            except ValueError as exc:
                raise StartError(str(exc)) from exc
            _refuse_a_second_coordinator(endpoint, config)
        # Bound first, so that a port in use stops the start before anything runs.
        metrics = None if config.metrics_port is None else \
            MetricsServer(config.metrics_host, config.metrics_port)
        membership: Membership | None = None
        try:
            # The bootstrap begins: this start's status is now the one to show, not an
            # earlier run's last report. A start refused before this point (a usage or
            # configuration error) leaves that report in place (docs/operations.md,
            # "Status after exit").
            last = last_status_file(config.state_dir, config.application_id_prefix)
            try:
                remove_last_report(last)
            except OSError as exc:
                log.warning("could not remove the previous last status report %s: %s",
                            last, exc)
            if on_bootstrap is not None:
                on_bootstrap()
            if join:
                def factory(plans: Mapping[str, ProcessPlan], **kw: Any) -> Supervisor:
                    return Supervisor(config, plans, restart=policy, target=worker_target,
                                      stop_deadline_s=stop_deadline_s,
                                      max_attempts=max_attempts, backoff_s=backoff_s,
                                      observer=None if metrics is None else metrics.book, **kw)
                supervisor, membership = start_joined(
                    config, procs, supervisor_factory=factory, stop_deadline_s=stop_deadline_s,
                    group_window_s=group_window_s,
                    client_id=coordinator_client_id(this_coordinator(endpoint)))
            else:
                # Fresh clients for the start and for each restart attempt (never one
                # long-lived AdminClient, which a broker outage can leave wedged).
                plans = bootstrap(config, procs, group_window_s=group_window_s)
                by_name = {p.name: p for p in procs}

                def rebootstrap(name: str) -> ProcessPlan:
                    return restart_bootstrap(config, by_name[name], group_window_s=group_window_s)

                supervisor = Supervisor(config, plans, restart=policy, target=worker_target,
                                        rebootstrap=rebootstrap, stop_deadline_s=stop_deadline_s,
                                        max_attempts=max_attempts, backoff_s=backoff_s,
                                        observer=None if metrics is None else metrics.book)
                supervisor.start()
        except BaseException:
            if metrics is not None:
                metrics.close()
            raise
        handle = cls(config, supervisor, None, metrics, membership)
        handle._me = this_coordinator(endpoint)
        if metrics is not None:
            metrics.attach(handle.status)
            log.info("metrics on %s", metrics.url)
        if endpoint is not None:
            try:
                handle._control = ControlServer(endpoint, handle._handlers(),
                                                record_to=endpoint_file(config))
            except BaseException:
                if membership is not None:
                    membership.close(stop_deadline_s + MEMBERSHIP_CLOSE_MARGIN_S)
                supervisor.close(stop_deadline_s)
                if metrics is not None:
                    metrics.close()
                raise
            log.info("control socket on %s", handle._control.endpoint)
        return handle

    # --- the Java API ------------------------------------------------------

    def status(self) -> dict[str, ProcessStatus]:
        """``{process name: ProcessStatus}`` now (docs/failing-closed.md, "Diagnosis")."""
        return self._supervisor.status()

    def healthy(self) -> bool:
        """``True`` while no process has stopped (docs/runbooks.md, "Triage")."""
        return all(s.state is not ProcessState.STOPPED for s in self.status().values())

    def await_stopped(self, timeout: float | None = None) -> bool:
        """Block until the first process stops (or ``timeout`` s pass).

        Returns:
            ``True`` when a process has stopped, ``False`` on timeout.
        """
        return self._supervisor.wait_any_stopped(timeout)

    def await_all_stopped(self, timeout: float | None = None) -> bool:
        """Block until every process has stopped; ``False`` on timeout."""
        return self._supervisor.wait_all_stopped(timeout)

    def stop(self, deadline_s: float | None = None) -> ShutdownReport:
        """Stop every worker (bounded), keeping the handle's status readable.

        The report is kept: :meth:`close` after it returns this stop's workers
        together with any the close itself stopped (so the last word on the
        shutdown names the workers that stopped, not the nothing left to stop).
        """
        self._leave(deadline_s)
        if self._metrics is not None:
            self._metrics.stopping()
        report = self._supervisor.stop(deadline_s)
        self._stop_report = report if self._stop_report is None \
            else self._stop_report.merge(report)
        return report

    def close(self, deadline_s: float | None = None) -> ShutdownReport:
        """Stop every worker (SIGTERM, deadline, SIGKILL) and the control socket.

        Idempotent: a second call returns the first call's report.

        Returns:
            The :class:`ShutdownReport`, naming any worker that did not stop in time.
        """
        if self._closed is not None:
            return self._closed
        self._leave(deadline_s)
        if self._metrics is not None:
            self._metrics.stopping()
        report = self._supervisor.close(deadline_s)
        if self._stop_report is not None:
            report = self._stop_report.merge(report)
        if self._control is not None:
            self._control.close()
        if self._metrics is not None:
            self._metrics.close()
        self._closed = report
        if not report.clean:
            log.error("shutdown: %s", report.summary())
        return report

    def _leave(self, deadline_s: float | None) -> None:
        """With ``join``: stop the owned tasks and leave the coordinators' groups (bounded),
        so the peers take the tasks."""
        if self._membership is not None:
            deadline = DEFAULT_STOP_DEADLINE_S if deadline_s is None else deadline_s
            self._membership.close(deadline + MEMBERSHIP_CLOSE_MARGIN_S)

    @property
    def control_endpoint(self) -> str | None:
        """The control socket's endpoint, or ``None`` when none is served."""
        return None if self._control is None else self._control.endpoint

    @property
    def metrics_url(self) -> str | None:
        """``http://HOST:PORT/metrics`` when ``config.metrics_port`` is set, else ``None``."""
        return None if self._metrics is None else self._metrics.url

    @property
    def config(self) -> ParsleyConfig:
        """The configuration the handle runs with."""
        return self._config

    def __enter__(self) -> Parsley:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # --- control socket -----------------------------------------------------

    def _handlers(self) -> dict[str, Any]:
        def ping(req: Mapping[str, Any]) -> dict[str, Any]:
            return {"pid": os.getpid(), "prefix": self._config.application_id_prefix}

        def status(req: Mapping[str, Any]) -> dict[str, Any]:
            local = status_to_json(self.status())
            if self._membership is None or req.get("local"):
                return {"status": local}
            return {"status": application_status(self._config, self._me, local,
                                                 self._membership.task_counts)}

        def stop(req: Mapping[str, Any]) -> dict[str, Any]:
            if req.get("all") and self._membership is not None:
                return stop_peers(self._config, self._me, list(self._membership.task_counts),
                                  control_stop_deadline(req.get("deadline_s"))[0]
                                  or DEFAULT_STOP_DEADLINE_S,
                                  lambda: stop_here({**req, "all": False}))
            return stop_here(req)

        def stop_here(req: Mapping[str, Any]) -> dict[str, Any]:
            deadline, note = control_stop_deadline(req.get("deadline_s"))
            report = self.stop(deadline)
            reply: dict[str, Any] = {"shutdown": report.to_json(),
                                     "status": status_to_json(self.status()),
                                     "deadline_s": deadline}
            if note is not None:
                reply["note"] = note
            return reply

        return {"ping": ping, "status": status, "stop": stop}
