"""Prometheus metrics of a coordinator and its tasks, served on ``/metrics``.

``parsley-coordinator run --metrics-port N`` (or ``metrics_port``, ``PARSLEY_METRICS_PORT``;
:mod:`coordinator.config`) serves the Prometheus text exposition format from the
coordinator process, on ``metrics_host`` (``127.0.0.1`` by default), with
``prometheus-client``, the Prometheus project's own client. Every metric is listed in
docs/operations.md, "Metrics"; where the figures come from (the workers' reports, added up
per task across restarts by :class:`MetricsBook`; the supervisor's events through
:class:`coordinator.runtime.supervisor.state.TaskObserver`; ``status()`` at scrape time) is
in docs/architecture.md, "The coordinator", "Metrics".

:func:`metric_families` is the pure mapping from those to metric families;
:class:`MetricsServer` binds the port and serves them.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from coordinator.bootstrap import StartError
from coordinator.control.status import ProcessState, ProcessStatus
from parsley.refusals import Reason
from workers.histogram import HANDLER_BUCKETS_S, TRANSACTION_BUCKETS_S, add_counts
from workers.protocol import STATUS, StopKind, TaskState

__all__ = [
    "CoordinatorState",
    "MetricsBook",
    "MetricsServer",
    "TaskTotals",
    "metric_families",
]

_COUNTERS: Final = ("received", "delivered", "commits", "aborts")
_HISTOGRAMS: Final = {"transaction_seconds": TRANSACTION_BUCKETS_S,
                      "handler_seconds": HANDLER_BUCKETS_S}


class CoordinatorState(enum.Enum):
    """The coordinator's own state, as ``parsley_coordinator_state`` shows it."""

    STARTING = "STARTING"
    """``/metrics`` is served; the bootstrap has not finished."""
    RUNNING = "RUNNING"
    """The processes were started; the coordinator supervises them."""
    STOPPING = "STOPPING"
    """A shutdown is under way (SIGTERM, ``stop``, or every process stopped)."""


@dataclass(frozen=True, slots=True)
class TaskTotals:
    """What the coordinator counted for one task over all of its workers.

    Attributes:
        process: the process name.
        task: the task index.
        received: records fed to the engine in transactions that committed.
        delivered: messages delivered in transactions that committed.
        commits: transactions committed.
        aborts: transactions aborted.
        transaction_seconds: ``{"counts": [per bucket], "sum": s}`` over
            :data:`workers.histogram.TRANSACTION_BUCKETS_S` (+Inf last).
        handler_seconds: the same over :data:`workers.histogram.HANDLER_BUCKETS_S`.
        restarts: workers spawned for the task after its first.
        refusals: refusal reason name -> exits of the task's workers with it
            (``UNKNOWN`` when neither the final report nor the exit code named it).
        exits: :class:`workers.protocol.StopKind` value -> exits of the task's workers.
        oldest_held_age_s: how long the longest-waiting head among the channels
            the last report listed as holding messages has been seen held, s
            (0.0 with nothing held; ``None`` before a report).
    """

    process: str
    task: int
    received: int = 0
    delivered: int = 0
    commits: int = 0
    aborts: int = 0
    transaction_seconds: Mapping[str, Any] = field(default_factory=dict)
    handler_seconds: Mapping[str, Any] = field(default_factory=dict)
    restarts: int = 0
    refusals: Mapping[str, int] = field(default_factory=dict)
    exits: Mapping[str, int] = field(default_factory=dict)
    oldest_held_age_s: float | None = None


@dataclass
class _Account:
    """One task's running account (guarded by the book's lock)."""

    base: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    current: dict[str, Any] = field(default_factory=dict)
    spawns: int = 0
    refusals: Counter[str] = field(default_factory=Counter)
    exits: Counter[str] = field(default_factory=Counter)
    held_since: dict[tuple[str, int], tuple[int, float]] = field(default_factory=dict)
    reported: bool = False


def _merge(total: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """Two workers' metrics added up (pure)."""
    out: dict[str, Any] = {k: int(total.get(k, 0)) + int(more.get(k, 0)) for k in _COUNTERS}
    for name, bounds in _HISTOGRAMS.items():
        out[name] = add_counts(total.get(name), more.get(name), len(bounds) + 1)
    return out


def _newest(last: Mapping[str, Any], report: Mapping[str, Any]) -> dict[str, Any]:
    """One worker's metrics after a further report: the larger of each figure (pure).

    A worker's counts never decrease; taking the larger keeps a report that was
    overtaken (or a malformed one) from ever lowering a counter.
    """
    out: dict[str, Any] = {}
    for k in _COUNTERS:
        value = report.get(k)
        new = int(value) if isinstance(value, int) and not isinstance(value, bool) else 0
        out[k] = max(int(last.get(k, 0)), new)
    for name, bounds in _HISTOGRAMS.items():
        size = len(bounds) + 1
        old = add_counts(last.get(name), None, size)
        got = add_counts(report.get(name), None, size)
        out[name] = got if sum(got["counts"]) >= sum(old["counts"]) else old
    return out


class MetricsBook:
    """The per-task account of counters, restarts, exits and held heads.

    Implements :class:`coordinator.runtime.supervisor.state.TaskObserver`: the supervisor
    calls it (under its own lock) when it spawns a worker, accepts a worker's
    report, and classifies a worker's exit. It never calls back into the
    supervisor, and its own lock is held only briefly.

    Args:
        clock: monotonic seconds (for held heads' ages); ``time.monotonic`` by default.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._accounts: dict[tuple[str, int], _Account] = {}

    def _account(self, process: str, task: int) -> _Account:
        key = (process, task)
        acc = self._accounts.get(key)
        if acc is None:
            acc = self._accounts[key] = _Account()
        return acc

    @staticmethod
    def _switch(acc: _Account, pid: int) -> None:
        if acc.pid != pid:
            if acc.current:
                acc.base = _merge(acc.base, acc.current)
            acc.pid, acc.current = pid, {}

    def spawned(self, process: str, task: int, pid: int) -> None:
        """A worker for ``process``/``task`` was spawned as ``pid``."""
        with self._lock:
            acc = self._account(process, task)
            self._switch(acc, pid)
            acc.spawns += 1

    def reported(self, process: str, task: int, pid: int, message: Mapping[str, Any]) -> None:
        """A worker's ``status`` or ``final`` message (:mod:`workers.protocol`) was accepted.

        Its ``metrics`` field updates the worker's counts; a status message's
        ``held`` list updates when each channel's head was first seen held.
        Malformed fields are skipped (the status entry reports those).
        """
        now = self._clock()
        with self._lock:
            acc = self._account(process, task)
            self._switch(acc, pid)
            metrics = message.get("metrics")
            if isinstance(metrics, Mapping):
                acc.current = _newest(acc.current, metrics)
            if message.get("kind") != STATUS:
                return
            held = message.get("held")
            if not isinstance(held, list):
                return
            seen: dict[tuple[str, int], tuple[int, float]] = {}
            for entry in held:
                try:
                    key = (str(entry["topic"]), int(entry["partition"]))
                    head = int(entry["head"])
                except (KeyError, TypeError, ValueError):
                    continue
                before = acc.held_since.get(key)
                seen[key] = before if before is not None and before[0] == head else (head, now)
            acc.held_since = seen
            acc.reported = True

    def exited(self, process: str, task: int, pid: int, kind: StopKind,
               reason: Reason | None) -> None:
        """A worker's exit was classified: its stop kind and, for a refusal, its reason."""
        with self._lock:
            acc = self._account(process, task)
            acc.exits[kind.value] += 1
            if kind is StopKind.REFUSAL:
                acc.refusals["UNKNOWN" if reason is None else reason.name] += 1

    def snapshot(self) -> list[TaskTotals]:
        """Every task's :class:`TaskTotals` now, ordered by process and task."""
        now = self._clock()
        out: list[TaskTotals] = []
        with self._lock:
            for (process, task), acc in sorted(self._accounts.items()):
                total = _merge(acc.base, acc.current)
                age: float | None = None
                if acc.reported:
                    age = max((now - since for _head, since in acc.held_since.values()),
                              default=0.0)
                out.append(TaskTotals(
                    process=process, task=task,
                    received=total["received"], delivered=total["delivered"],
                    commits=total["commits"], aborts=total["aborts"],
                    transaction_seconds=total["transaction_seconds"],
                    handler_seconds=total["handler_seconds"],
                    restarts=max(0, acc.spawns - 1),
                    refusals=dict(acc.refusals), exits=dict(acc.exits),
                    oldest_held_age_s=age,
                ))
        return out


def _histogram(family: HistogramMetricFamily, labels: list[str], form: Mapping[str, Any],
               bounds: tuple[float, ...]) -> None:
    counts = add_counts(form, None, len(bounds) + 1)
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*bounds, float("inf")), counts["counts"], strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
    family.add_metric(labels, buckets, counts["sum"])


def _state_name(state: object) -> str:
    """A state's name, whether an enum or its string value."""
    value = getattr(state, "value", state)
    return str(value)


def metric_families(
    statuses: Mapping[str, ProcessStatus] | None,
    totals: Iterable[TaskTotals],
    *,
    coordinator_state: CoordinatorState,
    started_at_s: float,
) -> list[Metric]:
    """Every Parsley metric family for one scrape (pure).

    Args:
        statuses: ``status()`` now (``{process: ProcessStatus}``), or ``None``
            before the processes were started.
        totals: :meth:`MetricsBook.snapshot`.
        coordinator_state: the coordinator's own state.
        started_at_s: when the coordinator started, s since the epoch.

    Returns:
        The families of docs/operations.md, "Metrics": counters and histograms
        for every task the coordinator ever spawned, gauges for each live task
        with a report, states for every process.
    """
    pt = ["process", "task"]
    up = GaugeMetricFamily("parsley_coordinator_up",
                           "1 while the coordinator serves metrics.", value=1)
    started = GaugeMetricFamily("parsley_coordinator_start_time_seconds",
                                "When the coordinator started, s since the epoch.",
                                value=started_at_s)
    cstate = GaugeMetricFamily("parsley_coordinator_state",
                               "1 for the coordinator's current state, 0 for the others.",
                               labels=["state"])
    for s in CoordinatorState:
        cstate.add_metric([s.value], 1.0 if s is coordinator_state else 0.0)

    pstate = GaugeMetricFamily("parsley_process_state",
                               "1 for the process's current state, 0 for the others.",
                               labels=["process", "state"])
    prefused = GaugeMetricFamily(
        "parsley_process_refusal",
        "1 while the process is STOPPED by this refusal reason (docs/failing-closed.md).",
        labels=["process", "reason"])
    prestarts = CounterMetricFamily(
        "parsley_process_restarts_total",
        "Restarts the supervisor's policy made for the process (task respawns and "
        "process restarts through the bootstrap).", labels=["process"])
    for name, st in sorted((statuses or {}).items()):
        for ps in ProcessState:
            pstate.add_metric([name, ps.value], 1.0 if st.state is ps else 0.0)
        if st.state is ProcessState.STOPPED and st.refusal_reason is not None:
            prefused.add_metric([name, st.refusal_reason.name], 1.0)
        prestarts.add_metric([name], float(st.restarts))

    received = CounterMetricFamily(
        "parsley_received_total",
        "Records read from the received topics and fed to the engine, in transactions "
        "that committed.", labels=pt)
    delivered = CounterMetricFamily(
        "parsley_delivered_total",
        "Messages delivered to the handler, in transactions that committed.", labels=pt)
    committed = CounterMetricFamily("parsley_transactions_committed_total",
                                    "Transactions committed.", labels=pt)
    aborted = CounterMetricFamily("parsley_transactions_aborted_total",
                                  "Transactions aborted.", labels=pt)
    txn = HistogramMetricFamily(
        "parsley_transaction_duration_seconds",
        "Committed transactions' duration, from their begin to their commit's return.",
        labels=pt)
    handler = HistogramMetricFamily(
        "parsley_handler_latency_seconds",
        "Time per delivered message of each drain pass (handler, store writes, sends "
        "handed to the producer), counted once per message.", labels=pt)
    trestarts = CounterMetricFamily("parsley_task_restarts_total",
                                    "Workers spawned for the task after its first.", labels=pt)
    refusals = CounterMetricFamily(
        "parsley_refusals_total",
        "Exits of the task's workers with a refusal, by reason (docs/failing-closed.md).",
        labels=[*pt, "reason"])
    exits = CounterMetricFamily("parsley_task_exits_total",
                                "Exits of the task's workers, by stop kind.",
                                labels=[*pt, "kind"])
    oldest = GaugeMetricFamily(
        "parsley_held_oldest_age_seconds",
        "How long the longest-waiting held head of the task has been seen held, s "
        "(resolution: one status interval).", labels=pt)
    live = {(name, t.task): t for name, st in (statuses or {}).items() for t in st.tasks}
    for t in totals:
        labels = [t.process, str(t.task)]
        received.add_metric(labels, float(t.received))
        delivered.add_metric(labels, float(t.delivered))
        committed.add_metric(labels, float(t.commits))
        aborted.add_metric(labels, float(t.aborts))
        _histogram(txn, labels, t.transaction_seconds, TRANSACTION_BUCKETS_S)
        _histogram(handler, labels, t.handler_seconds, HANDLER_BUCKETS_S)
        trestarts.add_metric(labels, float(t.restarts))
        for reason, n in sorted(t.refusals.items()):
            refusals.add_metric([*labels, reason], float(n))
        for kind, n in sorted(t.exits.items()):
            exits.add_metric([*labels, kind], float(n))
        if (t.process, t.task) in live and t.oldest_held_age_s is not None:
            oldest.add_metric(labels, t.oldest_held_age_s)

    held = GaugeMetricFamily("parsley_held_messages",
                             "Messages the task holds, waiting for a cause.", labels=pt)
    frontier = GaugeMetricFamily(
        "parsley_frontier_bytes",
        "The encoded size of the task's frontier (its parsley.causes header), bytes.",
        labels=pt)
    budget = GaugeMetricFamily("parsley_metadata_budget_bytes",
                               "The metadata budget the frontier must fit, bytes.", labels=pt)
    lag = GaugeMetricFamily(
        "parsley_lag_offsets",
        "Offsets between the task's read positions and the log end of its partitions "
        "(absent while unknown).", labels=pt)
    tstate = GaugeMetricFamily("parsley_task_state",
                               "1 for the task's reported state, 0 for the others.",
                               labels=[*pt, "state"])
    rss = GaugeMetricFamily("parsley_task_resident_memory_bytes",
                            "The task's worker's resident memory, bytes.", labels=pt)
    recoveries = CounterMetricFamily(
        "parsley_task_recoveries_total",
        "In-place recoveries the task's current worker completed (fresh clients, state "
        "rebuilt, positions rewound: docs/operations.md, \"The task timeout\").", labels=pt)
    stalled = GaugeMetricFamily(
        "parsley_task_stalled_seconds",
        "While the task recovers in place: s since its first failure not followed by "
        "progress (it stops SUBSTRATE at the task timeout); absent otherwise.", labels=pt)
    for (name, index), entry in sorted(live.items()):
        labels = [name, str(index)]
        held.add_metric(labels, float(entry.held_count))
        frontier.add_metric(labels, float(entry.frontier_bytes))
        budget.add_metric(labels, float(entry.budget_bytes))
        if entry.lag is not None:
            lag.add_metric(labels, float(entry.lag))
        state = _state_name(entry.state)
        for ts in TaskState:
            tstate.add_metric([*labels, ts.value], 1.0 if state == ts.value else 0.0)
        if entry.rss_bytes is not None:
            rss.add_metric(labels, float(entry.rss_bytes))
        recoveries.add_metric(labels, float(entry.recoveries))
        if entry.recovery is not None:
            stalled.add_metric(labels, float(entry.recovery.stalled_s))

    return [up, started, cstate, pstate, prefused, prestarts, received, delivered, held,
            oldest, frontier, budget, lag, committed, aborted, txn, handler, trestarts,
            refusals, exits, tstate, rss, recoveries, stalled]


class _Collector(Collector):
    def __init__(self, server: MetricsServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Metric]:
        yield from self._server.families()


class MetricsServer:
    """``/metrics`` over HTTP for one coordinator (a daemon thread of prometheus-client).

    Binds at construction, so that a port in use stops the start before
    anything runs. Serves the coordinator's own metrics at once and the
    processes' once :meth:`attach` gives it their status.

    Args:
        host: the address to bind (``127.0.0.1``: this machine only).
        port: the TCP port (0: any free port; :attr:`port` says which).

    Attributes:
        book: the :class:`MetricsBook` to hand the supervisor as its observer.

    Raises:
        StartError: the address cannot be bound (in use, or not this machine's).
    """

    def __init__(self, host: str, port: int) -> None:
        self.book = MetricsBook()
        self._status: Callable[[], Mapping[str, ProcessStatus]] | None = None
        self._state = CoordinatorState.STARTING
        self._started_at_s = time.time()
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_Collector(self))
        ProcessCollector(namespace="parsley_coordinator", registry=self._registry)
        try:
            self._httpd, self._thread = start_http_server(port, addr=host,
                                                          registry=self._registry)
        except OSError as exc:
            raise StartError(f"cannot serve metrics on {host}:{port}: {exc} (metrics_port / "
                             "--metrics-port; give a free port, or 0 for any)") from exc
        self.host = host
        self.port = int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://HOST:PORT/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def attach(self, status: Callable[[], Mapping[str, ProcessStatus]]) -> None:
        """Serve the processes' metrics from ``status`` (``Parsley.status``); now RUNNING."""
        self._status = status
        self._state = CoordinatorState.RUNNING

    def stopping(self) -> None:
        """Mark the coordinator STOPPING (its shutdown began)."""
        self._state = CoordinatorState.STOPPING

    def families(self) -> list[Metric]:
        """The metric families of one scrape (:func:`metric_families`)."""
        status = self._status
        return metric_families(None if status is None else status(), self.book.snapshot(),
                               coordinator_state=self._state,
                               started_at_s=self._started_at_s)

    def close(self) -> None:
        """Stop serving and release the port."""
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
