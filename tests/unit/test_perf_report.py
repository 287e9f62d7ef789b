"""The pure code of perf/: percentiles, latency joins, CPU windows, ratios, report shape, docs.

No broker and no timings: every figure here is made up and the assertions check
arithmetic and shapes only (benchmarks print figures, tests never time).
"""

from __future__ import annotations

import json
from uuid import UUID

import pytest

from perf import load
from perf.measure import (
    CpuWindow,
    Received,
    duplicates,
    header_bytes_per_message,
    held_latencies_ms,
    latency_summary,
    percentile,
    throughput,
)
from perf.report import (
    SECTION_BEGIN,
    SECTION_END,
    build_report,
    markdown_section,
    markdown_table,
    replace_section,
    run_key,
)
from perf.rounds import per_round, summarize


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 0) == 1.0
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0  # sorts first
    assert percentile([5.0], 99) == 5.0
    assert percentile([], 50) is None
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 101)


def test_latency_summary_and_throughput() -> None:
    s = latency_summary([10.0, 20.0, 30.0, 40.0])
    assert s == {"count": 4, "p50_ms": 20.0, "p99_ms": 40.0, "max_ms": 40.0}
    assert latency_summary([])["p99_ms"] is None
    assert throughput(5000, 1000.0, 3000.0) == 2500.0
    assert throughput(0, 0.0, 1.0) is None
    assert throughput(10, 5.0, 5.0) is None


def _rec(kind: int, seq: int, sent_us: int, read_us: int, hb: int = 0) -> Received:
    return Received(kind, seq, sent_us, read_us, 0, hb)


def test_held_latency_measured_from_the_later_send() -> None:
    records = [
        _rec(load.HELD, 1, 1_000_000, 1_050_000),   # held sent first; cause 5 ms later
        _rec(load.CAUSE, 1, 1_005_000, 1_040_000),
        _rec(load.HELD, 2, 2_000_000, 2_030_000),   # cause sent before the held one
        _rec(load.CAUSE, 2, 1_990_000, 2_020_000),
        _rec(load.HELD, 3, 3_000_000, 3_010_000),   # no cause read: skipped
    ]
    own, released = held_latencies_ms(records)
    assert own == [50.0, 30.0]
    assert released == [45.0, 30.0]


def test_cpu_window_and_counters() -> None:
    w = CpuWindow(start={1: 2.0, 2: 5.0, 3: 1.0}, end={1: 3.5, 2: 5.25})
    assert w.per_pid() == {1: 1.5, 2: 0.25, 3: 0.0}
    assert w.total() == 1.75
    recs = [_rec(0, 1, 0, 0, 100), _rec(0, 2, 0, 0, 200), _rec(0, 1, 0, 0, 300)]
    assert duplicates(recs) == 1
    assert header_bytes_per_message(recs) == 200.0
    assert header_bytes_per_message([]) is None


def test_value_stamp_round_trip_and_size() -> None:
    v = load.make_value(load.HELD, 42, 100, sent_us=123456789)
    assert len(v) == 100
    stamp = load.parse_value(v)
    assert stamp == load.Stamp(load.HELD, 42, 123456789)
    assert len(load.make_value(load.PLAIN, 0, 1024)) == 1024
    assert load.parse_value(b"short") is None
    with pytest.raises(ValueError, match="stamp"):
        load.make_value(load.PLAIN, 0, 10)


def test_frontier_header_has_sixteen_unreceived_entries() -> None:
    from parsley import wire
    from parsley.engine.channel import ChannelId

    chans = load.Unreceived().channels()
    assert len(chans) == 16
    [(name, blob)] = load.frontier_header(7, chans)
    assert name == wire.CAUSES_HEADER
    causes = wire.decode_causes(blob)
    assert set(causes) == set(chans)
    assert causes[chans[0]] == 1_000_007 and causes[chans[3]] == 1_000_003
    [(_, later)] = load.frontier_header(8, chans)
    assert later != blob and wire.decode_causes(later)[chans[0]] == 1_000_008
    [(_, moving)] = load.frontier_header(7, chans, moving=True)
    assert wire.decode_causes(moving)[chans[3]] == 1_000_000 + 16 * 7 + 3
    other = ChannelId(UUID(int=99), 0)
    [(_, blob2)] = load.frontier_header(7, chans, extra=(other, 5))
    causes2 = wire.decode_causes(blob2)
    assert len(causes2) == 16 and causes2[other] == 5 and chans[-1] not in causes2


def test_diamond_pairs_alternate_which_topic_is_held() -> None:
    from parsley import wire
    from parsley.engine.channel import ChannelId

    a, b = ChannelId(UUID(int=1), 0), ChannelId(UUID(int=2), 0)
    chans = load.Unreceived().channels()
    (t1, k1, h1), (t2, k2, h2) = load.diamond_pair(4, a, b, chans)
    assert (t1, k1, t2, k2) == ("a", load.HELD, "b", load.CAUSE)
    assert wire.decode_causes(h1[0][1])[b] == 4 and b not in wire.decode_causes(h2[0][1])
    (t1, k1, h1), (t2, _, _) = load.diamond_pair(5, a, b, chans)
    assert (t1, t2) == ("b", "a") and wire.decode_causes(h1[0][1])[a] == 5


def _run(kind: str, size: int, rate: float, p99: float, per_cpu: float | None,
         held_p99: float | None = None) -> dict:
    run = {"kind": kind, "value_bytes": size, "msgs_per_s": rate,
           "latency": {"count": 10, "p50_ms": p99 / 2, "p99_ms": p99, "max_ms": p99},
           "header_bytes_per_msg": 0.0, "worker_rss_bytes": 50 << 20,
           "worker_cpu_s": [1.0], "msgs_per_worker_cpu_s": per_cpu}
    if held_p99 is not None:
        run["held"] = {"from_own_send": latency_summary([held_p99 + 5]),
                       "from_cause_send": latency_summary([held_p99])}
    return run


def _runs() -> dict:
    runs = {}
    for size, base in ((100, 20_000.0), (1024, 10_000.0)):
        runs[run_key("baseline", size)] = _run("baseline", size, base, 120.0, 100_000.0)
        runs[run_key("parsley-1", size)] = _run("parsley-1", size, base * 0.9, 150.0, 20_000.0)
        runs[run_key("parsley-1-python", size)] = _run("parsley-1-python", size, base * 0.3,
                                                       150.0, 5_000.0)
        runs[run_key("parsley-2", size)] = _run("parsley-2", size, base * 0.9 * 1.5, 160.0,
                                                18_000.0 if size == 100 else 19_000.0)
        runs[run_key("diamond", size)] = _run("diamond", size, base / 2, 200.0, 10_000.0,
                                              held_p99=170.0 if size == 100 else 230.0)
    return runs


def test_ratios_per_size_and_headline_worst() -> None:
    runs = _runs()
    r100 = per_round(runs, 100)
    assert r100["parsley1_vs_baseline"] == pytest.approx(0.9)
    assert r100["parsley2_vs_parsley1"] == pytest.approx(1.5)
    assert r100["parsley2_cpu_efficiency"] == pytest.approx(0.9)
    assert r100["held_added_p99_ms"] == pytest.approx(50.0)
    assert r100["parsley1_vs_baseline_cpu"] == pytest.approx(0.2)
    assert r100["parsley1_python_vs_baseline"] == pytest.approx(0.3)
    r = summarize([runs])["ratios"]
    assert r["parsley2_cpu_efficiency"] == pytest.approx(0.9)   # min(0.9, 0.95)
    assert r["held_added_p99_ms"] == pytest.approx(110.0)       # max(50, 110)
    assert set(r["by_size"]) == {"100", "1024"}


def test_ratios_missing_runs_are_none() -> None:
    runs = {run_key("baseline", 100): _run("baseline", 100, 1000.0, 100.0, 1.0)}
    r = summarize([runs])["ratios"]
    assert r["parsley1_vs_baseline"] is None and r["held_added_p99_ms"] is None
    zero = {run_key("baseline", 100): _run("baseline", 100, 0.0, 100.0, None),
            run_key("parsley-1", 100): _run("parsley-1", 100, 10.0, 100.0, None)}
    assert per_round(zero, 100)["parsley1_vs_baseline"] is None


def _scaled(runs: dict, kind: str, factor: float) -> dict:
    out = {k: dict(v) for k, v in runs.items()}
    for run in out.values():
        if run["kind"] == kind:
            run["msgs_per_s"] *= factor
    return out


def test_each_ratio_is_the_median_of_per_round_ratios_with_its_min_and_max() -> None:
    # Round 2's baseline is lucky (twice as fast): a best-of would keep it against
    # parsley-1's best round and halve the ratio; the median of per-round ratios does not.
    rounds = [_runs(), _scaled(_runs(), "baseline", 2.0), _scaled(_runs(), "parsley-1", 1.1)]
    by = summarize(rounds)["ratios"]["by_size"]["100"]
    assert by["parsley1_vs_baseline_rounds"] == pytest.approx([0.9, 0.45, 0.99])
    assert by["parsley1_vs_baseline"] == pytest.approx(0.9)
    assert (by["parsley1_vs_baseline_min"], by["parsley1_vs_baseline_max"]) == \
        pytest.approx((0.45, 0.99))
    assert by["cpu_us_per_record"]["baseline"] == pytest.approx(10.0)  # 1e6 / 100,000
    assert by["cpu_us_per_record"]["parsley-1"] == pytest.approx(50.0)


def test_a_kinds_row_is_its_median_round_with_every_round_beside_it() -> None:
    rounds = [_scaled(_runs(), "parsley-1", f) for f in (1.0, 3.0, 2.0)]
    for r, load1 in zip(rounds, (1.5, 2.5, 3.5), strict=True):
        for run in r.values():
            run["load_avg"] = [load1, 0.0, 0.0]
    row = summarize(rounds)["runs"][run_key("parsley-1", 100)]
    assert row["msgs_per_s"] == pytest.approx(18_000.0 * 2.0)
    assert row["rounds_msgs_per_s"] == pytest.approx([18_000.0, 54_000.0, 36_000.0])
    assert [x[0] for x in row["rounds_load_avg"]] == [1.5, 2.5, 3.5]


def test_peer_and_batch_ratios_come_from_the_same_rounds() -> None:
    runs = _runs()
    for size, base in ((100, 20_000.0), (1024, 10_000.0)):
        runs[run_key("parsley-1-batch", size)] = _run("parsley-1-batch", size, base * 0.95,
                                                      150.0, 90_000.0)
        runs[run_key("quix-100ms", size)] = _run("quix-100ms", size, base * 0.3, 150.0, 1.0)
        runs[run_key("kstreams", size)] = _run("kstreams", size, base * 0.6, 150.0, 1.0)
    r = per_round(runs, 100)
    assert r["parsley1_batch_vs_baseline"] == pytest.approx(0.95)
    assert r["parsley1_vs_quix"] == pytest.approx(3.0)
    assert r["parsley1_vs_kstreams"] == pytest.approx(1.5)
    assert r["parsley1_batch_cpu_over_baseline"] == pytest.approx(100_000.0 / 90_000.0)
    assert r["parsley1_vs_quix_5s"] is None


def test_report_shape_is_json_and_has_the_issue_keys() -> None:
    rep = build_report([_runs(), _runs()], {"cores": 2, "cpu": "x"}, restore={"held": 10},
                       settings={"quick": True},
                       round_load=[{"round": 1, "start": [1.0], "end": [2.0]}])
    assert set(rep) == {"runs", "ratios", "rounds", "round_load_avg", "machine", "restore",
                        "settings"}
    assert rep["ratios"]["by_size"]["100"]["parsley1_vs_baseline_min"] == pytest.approx(0.9)
    assert {"parsley1_vs_baseline", "parsley2_vs_parsley1",
            "parsley2_cpu_efficiency"} <= set(rep["ratios"])
    assert rep["machine"]["cores"] == 2
    assert json.loads(json.dumps(rep)) == rep


def test_markdown_table_has_one_row_per_run() -> None:
    rep = build_report([_runs()], {"cores": 2})
    table = markdown_table(rep)
    lines = table.splitlines()
    assert len(lines) == 2 + 10
    assert "| parsley-2 | – | 1024 B | 13,500 | 13,500–13,500 |" in table
    assert "| 200.0 |" in table  # worker CPU µs per message of 5,000 msg per CPU-second
    assert "| 50 |" in table  # RSS in MiB


def test_replace_section_keeps_other_sections() -> None:
    rep = build_report([_runs()], {"cores": 2, "load_avg": [1.0]})
    section = markdown_section(rep)
    assert section.startswith(SECTION_BEGIN) and section.endswith(SECTION_END)
    doc = "# Performance\n\n## Codec\n\ntable\n"
    once = replace_section(doc, section)
    assert once.startswith(doc) and once.count(SECTION_BEGIN) == 1
    twice = replace_section(once + "\n## Later\n", markdown_section(rep, heading="### Again"))
    assert twice.count(SECTION_BEGIN) == 1 and "### Again" in twice
    assert "## Codec" in twice and "## Later" in twice and "last `python -m perf` run" not in twice


def test_the_baseline_consumer_prefetches_as_the_worker_does() -> None:
    # librdkafka's defaults (64 MiB, then a one-second backoff once the queue is full) left
    # the baseline idle for most of a second in some 1 KiB rounds, flattering every ratio.
    from perf.baseline import consumer_settings
    from workers.kafka_config import consumer_config

    worker = consumer_config("127.0.0.1:9092", "p", "relay", 0)
    base = consumer_settings("127.0.0.1:9092", "g")
    for key in ("queued.max.messages.kbytes", "fetch.queue.backoff.ms", "isolation.level",
                "enable.auto.commit", "enable.partition.eof"):
        assert base[key] == worker[key], key


def test_baseline_and_parsley_run_under_the_same_conditions() -> None:
    from perf.runs import QUICK, BaselineRelay, conditions
    from workers.main import BATCH

    base, one = conditions("baseline", QUICK), conditions("parsley-1", QUICK)
    assert base == one
    assert base.backlog == QUICK.messages and base.frontier_header
    assert base.consume_batch == BATCH
    diamond = conditions("diamond", QUICK)
    assert (diamond.pairs, diamond.backlog) == (QUICK.messages // 2, QUICK.messages // 2 * 2)
    argv = BaselineRelay("h:1", "in", "out", "t", 100, base.consume_batch).argv
    assert argv[argv.index("--batch") + 1] == str(BATCH)


def test_the_status_collector_serves_both_the_benchmarks_and_the_worker_tests() -> None:
    import orjson
    import zmq

    from devtools.status_collector import NoWorkerMessage, StatusCollector

    collector = StatusCollector()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.connect(collector.endpoint)
    try:
        sent = [{"kind": "status", "pid": 7, "state": "RUNNING"},
                {"kind": "final", "pid": 8, "stop_kind": "REFUSAL"},
                {"kind": "status", "pid": 7, "state": "RUNNING", "delivered": 3},
                {"kind": "final", "pid": 7, "stop_kind": "CLEAN"}]
        for m in sent:
            push.send(orjson.dumps(m))
        assert collector.final(7, timeout_s=5)["stop_kind"] == "CLEAN"
        assert collector.snapshot() == sent
        # since: skips what came before; a refusal is waited for, not raised, by default.
        assert collector.wait_for(lambda m: m.get("pid") == 7, 5, since=1)["delivered"] == 3
        assert collector.final(8, timeout_s=5)["stop_kind"] == "REFUSAL"
        with pytest.raises(NoWorkerMessage, match="a worker stopped"):
            collector.wait_for(lambda m: m.get("delivered") == 3, 5, fail_on_stop=True)
        with pytest.raises(NoWorkerMessage, match="no matching worker message"):
            collector.wait_for(lambda m: m.get("pid") == 9, 0.2)
    finally:
        push.close(0)
        ctx.term()
        collector.close()
