"""The metric mapping without a broker: the book's sums across workers, the families,
the exposition as Prometheus parses it, the HTTP server and the settings that turn it on."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from coordinator.bootstrap import StartError
from coordinator.config import ParsleyConfig
from coordinator.control.metrics import (
    CoordinatorState,
    MetricsBook,
    MetricsServer,
    TaskTotals,
    metric_families,
)
from coordinator.control.status import ProcessState, ProcessStatus, task_status_from_report
from parsley.refusals import Reason
from workers.histogram import (
    HANDLER_BUCKETS_S,
    TRANSACTION_BUCKETS_S,
    BucketCounts,
    add_counts,
)
from workers.protocol import StopKind


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _hist(bounds: tuple[float, ...], *values: float) -> dict[str, Any]:
    h = BucketCounts(bounds)
    for v in values:
        h.observe(v)
    return h.to_json()


def _metrics(received: int, delivered: int, commits: int, aborts: int = 0,
             txn: tuple[float, ...] = (), handler: tuple[float, ...] = ()) -> dict[str, Any]:
    return {"received": received, "delivered": delivered, "commits": commits,
            "aborts": aborts,
            "transaction_seconds": _hist(TRANSACTION_BUCKETS_S, *txn),
            "handler_seconds": _hist(HANDLER_BUCKETS_S, *handler)}


def _status(pid: int, metrics: dict[str, Any] | None, held: list[dict[str, Any]] = (),  # type: ignore[assignment]
            lag: int | None = 0, task: int = 0) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "kind": "status", "process": "p", "task": task, "pid": pid, "sent_ms": 0,
        "state": "RUNNING", "held": list(held), "held_total": sum(h["count"] for h in held),
        "frontier_channels": 1, "frontier_bytes": 40, "budget_bytes": 4096, "lag": lag,
        "restore": None, "rss_bytes": 1000, "cpu_percent": 0.0}
    if metrics is not None:
        msg["metrics"] = metrics
    return msg


def _held(head: int, count: int = 1, topic: str = "b", partition: int = 0) -> dict[str, Any]:
    return {"topic": topic, "partition": partition, "count": count, "head": head,
            "blockers": [{"topic": "a", "partition": 0, "required": 5, "settled": None}]}


def test_buckets_are_inclusive_upper_bounds_and_sums_add_up() -> None:
    h = BucketCounts((0.1, 0.5))
    h.observe(0.1)
    h.observe(0.2, 3)
    h.observe(9.0)
    assert h.counts == [1, 3, 1]
    assert h.sum_s == pytest.approx(0.1 + 0.6 + 9.0)
    total = add_counts(h.to_json(), {"counts": [1, 0, 0], "sum": 0.05}, 3)
    assert total == {"counts": [2, 3, 1], "sum": pytest.approx(9.75)}
    assert add_counts({"counts": [1, 2], "sum": 1.0}, None, 3) == {"counts": [0, 0, 0],
                                                                    "sum": 0.0}, \
        "a form with another bucket count is taken as empty"


def test_a_malformed_histogram_is_skipped_not_raised() -> None:
    empty = {"counts": [0, 0, 0], "sum": 0.0}
    for form in ({"counts": ["x", 0, 0], "sum": 1.0}, {"counts": [1, 0, 0], "sum": "soon"},
                 {"counts": [None, 0, 0]}, {"counts": [-1, 0, 0], "sum": 0.0},
                 {"counts": [1, 0, 0], "sum": float("nan")}):
        assert add_counts(form, None, 3) == empty, form
    book = MetricsBook()
    book.spawned("p", 0, 11)
    bad = _metrics(2, 2, 1, handler=(0.001,))
    bad["handler_seconds"] = {"counts": ["many"] * len(bad["handler_seconds"]["counts"]),
                              "sum": 0.0}
    book.reported("p", 0, 11, _status(11, bad))  # raised ValueError inside the observer
    (t,) = book.snapshot()
    assert t.delivered == 2


def test_counters_add_up_across_a_tasks_workers_and_never_decrease() -> None:
    book = MetricsBook()
    book.spawned("p", 0, 11)
    book.reported("p", 0, 11, _status(11, _metrics(5, 4, 2, 1, txn=(0.12,), handler=(0.001,))))
    book.reported("p", 0, 11, _status(11, _metrics(3, 2, 1)))  # overtaken: never lowers
    book.reported("p", 0, 11, {"kind": "final", "process": "p", "task": 0, "pid": 11,
                               "metrics": _metrics(7, 6, 3, 1, txn=(0.12, 0.3),
                                                   handler=(0.001, 0.002))})
    book.exited("p", 0, 11, StopKind.CRASHED, None)
    book.spawned("p", 0, 12)  # the respawn counts from zero again
    book.reported("p", 0, 12, _status(12, _metrics(2, 2, 1, txn=(0.05,))))
    (t,) = book.snapshot()
    assert (t.received, t.delivered, t.commits, t.aborts) == (9, 8, 4, 1)
    assert sum(t.transaction_seconds["counts"]) == 3
    assert t.transaction_seconds["sum"] == pytest.approx(0.47)
    assert sum(t.handler_seconds["counts"]) == 2
    assert t.restarts == 1
    assert t.exits == {"CRASHED": 1} and t.refusals == {}


def test_refusals_are_counted_by_reason_from_classified_exits() -> None:
    book = MetricsBook()
    book.spawned("p", 1, 20)
    book.exited("p", 1, 20, StopKind.REFUSAL, Reason.UNDECODABLE_METADATA)
    book.spawned("p", 1, 21)
    book.exited("p", 1, 21, StopKind.REFUSAL, None)
    book.spawned("p", 0, 22)
    book.exited("p", 0, 22, StopKind.CLEAN, None)
    by_task = {t.task: t for t in book.snapshot()}
    assert by_task[1].refusals == {"UNDECODABLE_METADATA": 1, "UNKNOWN": 1}
    assert by_task[1].exits == {"REFUSAL": 2}
    assert by_task[0].refusals == {} and by_task[0].exits == {"CLEAN": 1}


def test_a_held_heads_age_runs_from_when_it_was_first_seen_held_across_restarts() -> None:
    clock = Clock()
    book = MetricsBook(clock)
    book.spawned("p", 0, 30)
    assert book.snapshot()[0].oldest_held_age_s is None, "no report yet"
    book.reported("p", 0, 30, _status(30, None))
    assert book.snapshot()[0].oldest_held_age_s == 0.0, "nothing held"
    book.reported("p", 0, 30, _status(30, None, held=[_held(7)]))
    clock.now += 4.0
    book.reported("p", 0, 30, _status(30, None, held=[_held(7), _held(2, partition=1)]))
    clock.now += 1.5
    assert book.snapshot()[0].oldest_held_age_s == pytest.approx(5.5)
    book.spawned("p", 0, 31)  # the same head, restored held by the next worker
    book.reported("p", 0, 31, _status(31, None, held=[_held(7), _held(2, partition=1)]))
    assert book.snapshot()[0].oldest_held_age_s == pytest.approx(5.5)
    book.reported("p", 0, 31, _status(31, None, held=[_held(8), _held(2, partition=1)]))
    assert book.snapshot()[0].oldest_held_age_s == pytest.approx(1.5), \
        "b[0]'s head moved on; a[1]'s has waited since the second report"
    book.reported("p", 0, 31, _status(31, None, held=[]))
    assert book.snapshot()[0].oldest_held_age_s == 0.0


def _families(statuses: dict[str, ProcessStatus] | None,
              totals: list[TaskTotals]) -> dict[str, Any]:
    class One(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            yield from metric_families(statuses, totals,
                                       coordinator_state=CoordinatorState.RUNNING,
                                       started_at_s=1700000000.0)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(One())
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], sample: str, **labels: str) -> float:
    family = sample.removesuffix("_total").removesuffix("_bucket").removesuffix(
        "_count").removesuffix("_sum")
    got = [s.value for s in families[family].samples
           if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (sample, labels, families[family].samples)
    return float(got[0])


def test_the_exposition_parses_with_the_documented_names_types_and_labels() -> None:
    clock = Clock()
    book = MetricsBook(clock)
    book.spawned("p", 0, 40)
    book.spawned("p", 1, 41)
    report = _status(40, _metrics(10, 8, 3, 1, txn=(0.12, 0.2, 40.0), handler=(0.0003,)),
                     held=[_held(4, count=2)], lag=6)
    book.reported("p", 0, 40, report)
    clock.now += 3.0
    book.exited("p", 1, 41, StopKind.REFUSAL, Reason.METADATA_BUDGET_EXCEEDED)
    entry = task_status_from_report(report, age_ms=10, status_interval_ms=1000)
    unknown_lag = task_status_from_report(_status(50, None, lag=None, task=0),
                                          age_ms=10, status_interval_ms=1000)
    statuses = {
        "p": ProcessStatus(ProcessState.RUNNING, None, None, (entry,), restarts=2),
        "q": ProcessStatus(ProcessState.STOPPED, Reason.UNDECODABLE_METADATA, "detail"),
        "r": ProcessStatus(ProcessState.STARTING, None, None, (unknown_lag,)),
    }
    fams = _families(statuses, book.snapshot())
    types = {name: f.type for name, f in fams.items()}
    for name in ("parsley_received", "parsley_delivered", "parsley_transactions_committed",
                 "parsley_transactions_aborted", "parsley_task_restarts",
                 "parsley_refusals", "parsley_task_exits", "parsley_process_restarts"):
        assert types[name] == "counter", name
    for name in ("parsley_transaction_duration_seconds", "parsley_handler_latency_seconds"):
        assert types[name] == "histogram", name
    for name in ("parsley_held_messages", "parsley_held_oldest_age_seconds",
                 "parsley_frontier_bytes", "parsley_metadata_budget_bytes",
                 "parsley_lag_offsets", "parsley_coordinator_up", "parsley_coordinator_state",
                 "parsley_process_state", "parsley_process_refusal", "parsley_task_state",
                 "parsley_coordinator_start_time_seconds",
                 "parsley_task_resident_memory_bytes"):
        assert types[name] == "gauge", name

    assert _value(fams, "parsley_coordinator_up") == 1
    assert _value(fams, "parsley_coordinator_state", state="RUNNING") == 1
    assert _value(fams, "parsley_coordinator_state", state="STOPPING") == 0
    assert _value(fams, "parsley_received_total", process="p", task="0") == 10
    assert _value(fams, "parsley_delivered_total", process="p", task="0") == 8
    assert _value(fams, "parsley_delivered_total", process="p", task="1") == 0, \
        "a task's counters exist from its first spawn"
    assert _value(fams, "parsley_transactions_committed_total", process="p", task="0") == 3
    assert _value(fams, "parsley_transactions_aborted_total", process="p", task="0") == 1
    assert _value(fams, "parsley_held_messages", process="p", task="0") == 2
    assert _value(fams, "parsley_held_blockers", process="p", task="0", **{"class": "unknown"}) == 1
    assert _value(fams, "parsley_held_blockers", process="p", task="0", **{"class": "behind"}) == 0
    assert _value(fams, "parsley_held_oldest_age_seconds", process="p", task="0") == 3.0
    assert _value(fams, "parsley_frontier_bytes", process="p", task="0") == 40
    assert _value(fams, "parsley_metadata_budget_bytes", process="p", task="0") == 4096
    assert _value(fams, "parsley_lag_offsets", process="p", task="0") == 6
    assert not [s for s in fams["parsley_lag_offsets"].samples
                if s.labels["process"] == "r"], "an unknown lag is absent, not 0"
    assert _value(fams, "parsley_refusals_total", process="p", task="1",
                  reason="METADATA_BUDGET_EXCEEDED") == 1
    assert _value(fams, "parsley_task_exits_total", process="p", task="1",
                  kind="REFUSAL") == 1
    assert _value(fams, "parsley_process_state", process="q", state="STOPPED") == 1
    assert _value(fams, "parsley_process_state", process="q", state="RUNNING") == 0
    assert _value(fams, "parsley_process_refusal", process="q",
                  reason="UNDECODABLE_METADATA") == 1
    assert _value(fams, "parsley_process_restarts_total", process="p") == 2
    assert _value(fams, "parsley_task_state", process="p", task="0", state="RUNNING") == 1
    assert _value(fams, "parsley_task_state", process="p", task="0", state="STARTING") == 0
    # histograms: cumulative buckets ending in +Inf, count and sum
    assert _value(fams, "parsley_transaction_duration_seconds_bucket", process="p", task="0",
                  le="0.1") == 0
    assert _value(fams, "parsley_transaction_duration_seconds_bucket", process="p", task="0",
                  le="0.2") == 2
    assert _value(fams, "parsley_transaction_duration_seconds_bucket", process="p", task="0",
                  le="30.0") == 2
    assert _value(fams, "parsley_transaction_duration_seconds_bucket", process="p", task="0",
                  le="+Inf") == 3
    assert _value(fams, "parsley_transaction_duration_seconds_count", process="p",
                  task="0") == 3
    assert _value(fams, "parsley_transaction_duration_seconds_sum", process="p",
                  task="0") == pytest.approx(40.32)
    assert _value(fams, "parsley_handler_latency_seconds_bucket", process="p", task="0",
                  le="0.0005") == 1
    # gauges of tasks with no live entry are absent; the dead task 1 has none
    assert not [s for s in fams["parsley_held_messages"].samples if s.labels["task"] == "1"]


def test_held_blockers_are_counted_by_class() -> None:
    held = [{"topic": "b", "partition": 0, "count": 2, "head": 4, "blockers": [
        {"topic": "a", "partition": 0, "required": 5, "settled": 1,
         "class": "open_transaction", "last_stable": 5, "end": 6},
        {"topic": "c", "partition": 0, "required": 9, "settled": None,
         "class": "not_produced", "last_stable": 3, "end": 3}]},
             {"topic": "d", "partition": 0, "count": 1, "head": 0, "blockers": [
        {"topic": "a", "partition": 0, "required": 7, "settled": 1,
         "class": "open_transaction", "last_stable": 5, "end": 8}]}]
    entry = task_status_from_report(_status(40, None, held=held), age_ms=10,
                                    status_interval_ms=1000)
    fams = _families({"p": ProcessStatus(ProcessState.RUNNING, None, None, (entry,))}, [])
    assert fams["parsley_held_blockers"].type == "gauge"
    got = {s.labels["class"]: s.value for s in fams["parsley_held_blockers"].samples}
    assert got == {"behind": 0, "open_transaction": 2, "not_produced": 1, "no_record": 0,
                   "unknown": 0}, got


def test_before_the_start_only_the_coordinator_is_reported() -> None:
    fams = _families(None, [])
    assert _value(fams, "parsley_coordinator_up") == 1
    assert fams["parsley_process_state"].samples == []


def test_the_server_serves_metrics_over_http_and_refuses_a_port_in_use() -> None:
    server = MetricsServer("127.0.0.1", 0)
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert _value(fams, "parsley_coordinator_state", state="STARTING") == 1
        assert "parsley_coordinator_process_resident_memory_bytes" in fams, \
            "the coordinator process's own figures"
        server.book.spawned("p", 0, 1)
        server.attach(lambda: {"p": ProcessStatus(ProcessState.STARTING, None, None)})
        text = urllib.request.urlopen(server.url, timeout=5).read().decode()
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        assert _value(fams, "parsley_coordinator_state", state="RUNNING") == 1
        assert _value(fams, "parsley_process_state", process="p", state="STARTING") == 1
        assert _value(fams, "parsley_delivered_total", process="p", task="0") == 0
        with pytest.raises(StartError, match=f"127.0.0.1:{server.port}.*metrics_port"):
            MetricsServer("127.0.0.1", server.port)
    finally:
        server.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(server.url, timeout=2)


def test_metrics_port_and_host_from_the_file_then_env_then_flags(tmp_path: Path) -> None:
    assert ParsleyConfig("h:1", "p").metrics_port is None, "off by default"
    assert ParsleyConfig("h:1", "p").metrics_host == "127.0.0.1"
    conf = tmp_path / "parsley.toml"
    conf.write_text('bootstrap_servers = "h:1"\napplication_id_prefix = "p"\n'
                    'metrics_port = 9464\nmetrics_host = "0.0.0.0"\n')
    assert ParsleyConfig.load(conf, environ={}).metrics_port == 9464
    loaded = ParsleyConfig.load(conf, environ={"PARSLEY_METRICS_PORT": "9500",
                                               "PARSLEY_METRICS_HOST": "::1"})
    assert (loaded.metrics_port, loaded.metrics_host) == (9500, "::1")
    assert ParsleyConfig.load(conf, environ={"PARSLEY_METRICS_PORT": "9500"},
                              metrics_port=9600).metrics_port == 9600
    with pytest.raises(ValueError, match="PARSLEY_METRICS_PORT='x' is not an integer"):
        ParsleyConfig.load(conf, environ={"PARSLEY_METRICS_PORT": "x"})
    for bad in (-1, 65536, True):
        with pytest.raises(ValueError, match="metrics_port must be a TCP port"):
            ParsleyConfig("h:1", "p", metrics_port=bad)
    with pytest.raises(ValueError, match="metrics_host must be non-blank"):
        ParsleyConfig("h:1", "p", metrics_host=" ")


def _exposed_names() -> set[str]:
    """Every metric name a scrape exposes (counters with ``_total``), from the families."""
    book = MetricsBook()
    book.spawned("p", 0, 1)
    book.exited("p", 0, 1, StopKind.REFUSAL, Reason.UNDECODABLE_METADATA)
    report = _status(1, _metrics(1, 1, 1)) | {
        "recovery": {"stalled_s": 3.0, "attempts": 1, "timeout_s": 300.0, "cause": "c"}}
    entry = task_status_from_report(report, age_ms=0, status_interval_ms=1000)
    statuses = {"p": ProcessStatus(ProcessState.RUNNING, None, None, (entry,)),
                "q": ProcessStatus(ProcessState.STOPPED, Reason.UNDECODABLE_METADATA, "d")}
    book.reported("p", 0, 1, report)
    families = metric_families(statuses, book.snapshot(),
                               coordinator_state=CoordinatorState.RUNNING, started_at_s=0.0)
    assert all(f.samples for f in families), [f.name for f in families if not f.samples]
    return {f.name + ("_total" if f.type == "counter" else "") for f in families}


def test_the_operations_doc_lists_every_metric_exposed_and_no_other() -> None:
    import re

    doc = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("### Metrics", 1)[1].split("\n### ", 1)[0]
    documented = set(re.findall(r"^\| `(parsley_[a-z_]+)` \|", section, re.MULTILINE))
    assert documented == _exposed_names()


def test_the_grafana_dashboard_queries_only_metrics_that_exist() -> None:
    import json
    import re

    path = Path(__file__).parents[2] / "docs" / "grafana-dashboard.json"
    dashboard = json.loads(path.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs, "a dashboard with queries"
    exposed = _exposed_names()
    histograms = {"parsley_transaction_duration_seconds", "parsley_handler_latency_seconds"}
    known = exposed | {h + s for h in histograms for s in ("_bucket", "_sum", "_count")}
    used = {name for e in exprs for name in re.findall(r"\bparsley_[a-z_]+\b", e)
            if not name.startswith("parsley_coordinator_process_")}
    assert used <= known, sorted(used - known)
    assert used >= exposed - {"parsley_coordinator_start_time_seconds"} - histograms, \
        sorted(exposed - used)
