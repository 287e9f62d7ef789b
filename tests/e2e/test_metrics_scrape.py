"""``parsley-coordinator run --metrics-port`` end to end: /metrics scraped during a real run.

Two processes under one coordinator, on the real broker:

* ``join`` receives topics A and B and relays each message to OUT. B carries two
  plain records and then two whose ``parsley.causes`` names A@0, a record produced
  in a transaction left open (``read_committed`` consumption cannot see it): the
  two are held. Committing that transaction releases them.
* ``bad`` receives BAD, where one record has an undecodable ``parsley.causes``
  header: its task refuses (UNDECODABLE_METADATA) and the process stops while
  ``join`` keeps running.

/metrics is read over plain HTTP and parsed with ``prometheus_client.parser``
while the run goes on; its held, delivered, received and refusal figures are
checked against what the run did, and the delivered count against an
independent ``read_committed`` consumer of OUT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from coordinator.cli.common import ExitCode
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley.engine.channel import ChannelId
from parsley.wire import CAUSES_HEADER, encode_causes
from tests.cli_support import CLI

APP = '''
import os
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

OUT = Channel(os.environ["M_OUT"], BYTES, BYTES)
BAD_OUT = Channel(os.environ["M_BAD_OUT"], BYTES, BYTES)


def relay(out):
    def handle(delivery, state):
        return Effects.builder().send(out, delivery.key,
                                      delivery.topic.encode() + b":" + delivery.value).build()
    return handle


processes = [
    Process("join").receives(Channel(os.environ["M_A"], BYTES, BYTES), relay(OUT))
    .receives(Channel(os.environ["M_B"], BYTES, BYTES), relay(OUT)).sends(OUT),
    Process("bad").receives(Channel(os.environ["M_BAD"], BYTES, BYTES), relay(BAD_OUT))
    .sends(BAD_OUT),
]
'''

Scrape = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(url: str) -> Scrape:
    """Every sample of one GET of ``url``: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        assert reply.status == 200
        assert reply.headers["Content-Type"].startswith("text/plain")
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _get(samples: Scrape, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def _until(url: str, run: subprocess.Popen[str], pred: Callable[[Scrape], bool],
           timeout_s: float, what: str) -> Scrape:
    deadline = time.monotonic() + timeout_s
    samples: Scrape = {}
    while time.monotonic() < deadline:
        assert run.poll() is None, f"run exited early: {run.communicate()[1][-4000:]}"
        try:
            samples = _scrape(url)
        except (urllib.error.URLError, ConnectionError):
            samples = {}
        if samples and pred(samples):
            return samples
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; last scrape: "
                         f"{ {k: v for k, v in samples.items() if k[0].startswith('parsley_')} }")


def _handler_runs_match(scrape: Scrape, task: dict[str, str]) -> None:
    """The handler latency histogram counts every run, those in aborted transactions too
    (an abortable error on a loaded broker is allowed): at least one per delivery, and
    more only when a transaction aborted. Only ``delivered``/``received`` are exact."""
    runs = _get(scrape, "parsley_handler_latency_seconds_count", **task) or 0
    delivered = _get(scrape, "parsley_delivered_total", **task) or 0
    aborted = _get(scrape, "parsley_transactions_aborted_total", **task) or 0
    assert runs >= delivered > 0, (runs, delivered)
    assert runs == delivered or aborted >= 1, (runs, delivered, aborted)


def test_metrics_are_scraped_during_a_run_with_held_messages_and_a_refusal(
    kafka_bootstrap: str, create_topic: Any, unique_names: Any, tmp_path: Path
) -> None:
    a, b, out = create_topic(), create_topic(), create_topic()
    bad, bad_out = create_topic(), create_topic()
    plain = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    # The cause A@0, in a transaction left open.
    upstream = Producer({"bootstrap.servers": kafka_bootstrap,
                         "transactional.id": unique_names.transactional_id(), **QUIET})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    upstream.produce(a.name, key=b"k", value=b"cause", partition=0)
    upstream.flush(30)
    caused_by_a0 = [(CAUSES_HEADER, encode_causes({ChannelId(a.topic_id, 0): 0}))]
    for value, headers in ((b"p0", None), (b"p1", None), (b"h2", caused_by_a0),
                           (b"h3", caused_by_a0)):
        plain.produce(b.name, key=b"k", value=value, partition=0, headers=headers)
    assert plain.flush(30) == 0

    (tmp_path / "metricsapp.py").write_text(APP)
    env = dict(os.environ)
    env.update({"M_A": a.name, "M_B": b.name, "M_OUT": out.name, "M_BAD": bad.name,
                "M_BAD_OUT": bad_out.name, "PARSLEY_STATUS_INTERVAL_MS": "300",
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    where = ["--prefix", f"metrics-{uuid.uuid4().hex[:8]}", "--state-dir",
             str(tmp_path / "state")]
    run = subprocess.Popen(
        [*CLI, "run", "metricsapp:processes", "--bootstrap-servers", kafka_bootstrap, *where,
         "--metrics-port", str(port), "--stop-deadline", "15", "--log-status-every", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    join0 = {"process": "join", "task": "0"}
    bad0 = {"process": "bad", "task": "0"}
    try:
        # Held: two messages wait for A@0; the two plain ones were delivered.
        s = _until(url, run, lambda s: _get(s, "parsley_held_messages", **join0) == 2
                   and _get(s, "parsley_delivered_total", **join0) == 2
                   and (_get(s, "parsley_held_oldest_age_seconds", **join0) or 0) > 0,
                   90, "join to hold 2 and deliver 2")
        assert _get(s, "parsley_coordinator_up") == 1
        assert _get(s, "parsley_coordinator_state", state="RUNNING") == 1
        assert _get(s, "parsley_received_total", **join0) == 4
        assert _get(s, "parsley_process_state", process="join", state="RUNNING") == 1
        assert (_get(s, "parsley_transactions_committed_total", **join0) or 0) >= 1
        assert (_get(s, "parsley_frontier_bytes", **join0) or 0) > 0
        assert _get(s, "parsley_metadata_budget_bytes", **join0) == 262144
        _handler_runs_match(s, join0)
        assert (_get(s, "parsley_transaction_duration_seconds_count", **join0) or 0) >= 1
        assert _get(s, "parsley_refusals_total", **bad0,
                    reason="UNDECODABLE_METADATA") is None, "no refusal yet"
        healthy = subprocess.run([*CLI, "status", *where], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=60)
        assert healthy.returncode == 0, healthy.stdout + healthy.stderr

        # A refusal: bad's one task refuses and its process stops; join keeps running.
        plain.produce(bad.name, key=b"k", value=b"x", partition=0,
                      headers=[(CAUSES_HEADER, b"\x01")])
        assert plain.flush(30) == 0
        s = _until(url, run, lambda s: _get(s, "parsley_refusals_total", **bad0,
                                            reason="UNDECODABLE_METADATA") == 1
                   and _get(s, "parsley_process_state", process="bad", state="STOPPED") == 1,
                   90, "bad to refuse")
        assert _get(s, "parsley_process_refusal", process="bad",
                    reason="UNDECODABLE_METADATA") == 1
        assert _get(s, "parsley_task_exits_total", **bad0, kind="REFUSAL") == 1
        assert (_get(s, "parsley_transactions_aborted_total", **bad0) or 0) >= 1, \
            "the refused record's transaction, counted from the worker's last report"
        assert _get(s, "parsley_delivered_total", **bad0) == 0
        assert _get(s, "parsley_held_messages", **bad0) is None, "no live task, no gauge"
        assert _get(s, "parsley_process_state", process="join", state="RUNNING") == 1
        assert _get(s, "parsley_held_messages", **join0) == 2
        # status exits with the documented code while a process stands refused.
        for args in ([], ["--json"]):
            refused = subprocess.run([*CLI, "status", *args, *where], cwd=tmp_path, env=env,
                                     capture_output=True, text=True, timeout=60)
            assert refused.returncode == 3, (args, refused.stdout, refused.stderr)
            assert "UNDECODABLE_METADATA" in refused.stdout, refused.stdout

        # Released: A@0 commits; A@0 and the two held messages are delivered.
        upstream.commit_transaction(30)
        s = _until(url, run, lambda s: _get(s, "parsley_delivered_total", **join0) == 5
                   and _get(s, "parsley_held_messages", **join0) == 0, 90,
                   "join to deliver the released messages")
        assert _get(s, "parsley_received_total", **join0) == 5
        assert _get(s, "parsley_held_oldest_age_seconds", **join0) == 0
        _handler_runs_match(s, join0)
        assert _get(s, "parsley_task_restarts_total", **join0) == 0
        assert _get(s, "parsley_lag_offsets", **join0) is not None
        values = [r.value for r in read_committed(kafka_bootstrap, out.name)]
        assert len(values) == 5 == len(set(values)), values
        assert values.index(a.name.encode() + b":cause") < values.index(
            b.name.encode() + b":h2"), "the cause before its effects"
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGTERM)
        _out, err = run.communicate(timeout=90)
    assert run.returncode == ExitCode.REFUSAL, err[-4000:]
    assert f"metrics on {url}" in err
    try:
        _scrape(url)
        raise AssertionError("/metrics still served after the coordinator exited")
    except (urllib.error.URLError, ConnectionError):
        pass


@pytest.mark.slow
def test_counters_stay_monotonic_across_a_killed_and_respawned_worker(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    from coordinator import Parsley, ParsleyConfig
    from parsley import Channel, Effects, Process
    from parsley.serdes import BYTES

    src, out = create_topic(), create_topic()
    sink = Channel(out.name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(sink, delivery.key, delivery.value).build()

    relay = Process("relay").receives(Channel(src.name, BYTES, BYTES), handle).sends(sink)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})

    def produce(*values: bytes) -> None:
        for v in values:
            producer.produce(src.name, key=b"k", value=v, partition=0)
        assert producer.flush(30) == 0

    produce(b"0", b"1", b"2")
    config = ParsleyConfig(kafka_bootstrap, f"metrics-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=300, metrics_port=0)
    relay0 = {"process": "relay", "task": "0"}
    seen: list[float] = []

    def until(pred: Callable[[Scrape], bool], what: str) -> Scrape:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            s = _scrape(url)
            delivered = _get(s, "parsley_delivered_total", **relay0)
            if delivered is not None:
                assert not seen or delivered >= seen[-1], f"delivered fell: {seen} {delivered}"
                seen.append(delivered)
            if pred(s):
                return s
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what}")

    with Parsley.start(config, relay, restart="transient", backoff_s=0.1) as parsley:
        assert parsley.metrics_url is not None
        url = parsley.metrics_url
        until(lambda s: _get(s, "parsley_delivered_total", **relay0) == 3, "3 delivered")
        (task,) = parsley.status()["relay"].tasks
        os.kill(task.pid, signal.SIGKILL)
        s = until(lambda s: _get(s, "parsley_task_restarts_total", **relay0) == 1
                  and _get(s, "parsley_process_state", process="relay", state="RUNNING") == 1,
                  "the respawned worker running")
        assert _get(s, "parsley_task_exits_total", **relay0, kind="CRASHED") == 1
        assert _get(s, "parsley_process_restarts_total", process="relay") == 1
        produce(b"3", b"4")
        s = until(lambda s: _get(s, "parsley_delivered_total", **relay0) == 5,
                  "5 delivered over both workers")
        assert _get(s, "parsley_received_total", **relay0) == 5
        assert len(read_committed(kafka_bootstrap, out.name)) == 5
    assert 3 in seen and seen[-1] == 5, seen


def test_a_metrics_port_in_use_stops_the_start_before_anything_runs(tmp_path: Path) -> None:
    from tests.cli_support import RELAY_APP

    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    env = dict(os.environ)
    env.update({"CLI_SRC": "s", "CLI_OUT": "o",
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        res = subprocess.run(
            [*CLI, "run", "cliapp:processes", "--bootstrap-servers", "127.0.0.1:1",
             "--prefix", "busy", "--state-dir", str(tmp_path / "state"),
             "--metrics-port", str(port)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == ExitCode.FAILURE, res.stderr
    assert f"cannot serve metrics on 127.0.0.1:{port}" in res.stderr
    assert "could not reach" not in res.stderr, "refused before the bootstrap"
    assert time.monotonic() - started < 30
