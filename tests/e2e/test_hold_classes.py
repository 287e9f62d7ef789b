"""A hold explains itself: every held head's blocker classed, on the real broker.

``parsley-coordinator run`` runs a process ``ledger`` that receives ``orders`` and
``payments`` (three partitions, so three tasks); each task holds one payment whose cause on
``orders`` is, on its partition:

* task 0: beyond the log end (``not_produced``): the cause names ``orders[0]@5``, and
  ``orders[0]`` ends at 1;
* task 1: inside a transaction still open on ``orders[1]`` (``open_transaction``): a raw
  transactional producer wrote ``orders[1]@1`` and has not committed; the last stable
  offset is 1, the end 2 (``kafka-get-offsets --time latest`` says 2, as an operator sees);
* task 2: at the offset of a transaction marker (``no_record``): ``orders[2]@0`` was
  committed in a transaction, its commit marker sits at offset 1, and the cause names 1.

``parsley-coordinator status --json``, the status table and ``/metrics`` must each name the
class with the last stable offset and the end; committing the open transaction then
releases task 1's payment. After ``stop``, ``parsley-coordinator inspect`` names the same
classes from the changelog and the cluster's offsets.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import ChannelId
from parsley.wire import CAUSES_HEADER, encode_causes
from tests.cli_support import CLI

APP = '''
import os
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES

OUT = Channel(os.environ["H_OUT"], BYTES, BYTES)


def handle(delivery, state):
    return Effects.builder().send(OUT, delivery.key, delivery.value).build()


processes = [Process("ledger").receives(Channel(os.environ["H_ORDERS"], BYTES, BYTES), handle)
             .receives(Channel(os.environ["H_PAYMENTS"], BYTES, BYTES), handle).sends(OUT)]
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _blockers(doc: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Task index -> its first held channel's first blocker, from a status document."""
    out = {}
    for t in doc["processes"]["ledger"]["tasks"]:
        if t["held"] and t["held"][0]["blockers"]:
            out[t["task"]] = t["held"][0]["blockers"][0]
    return out


def _await_classes(status: Callable[[], subprocess.CompletedProcess[str]],
                   run: subprocess.Popen[str],
                   expected: dict[int, tuple[str, int, int]]) -> dict[int, dict[str, Any]]:
    """Poll ``status --json`` (within 120 s, while ``run`` lives) until the held heads'
    first blockers are of ``expected`` (task -> class, last stable offset, end); returns
    them (:func:`_blockers`)."""
    deadline = time.monotonic() + 120
    seen: dict[int, Any] = {}
    while True:
        assert run.poll() is None, f"run exited: {run.communicate()[1][-4000:]}"
        res = status()
        if res.returncode == 0:
            blockers = _blockers(orjson.loads(res.stdout))
            seen = {t: (b["class"], b["last_stable"], b["end"]) for t, b in blockers.items()}
            if seen == expected:
                return blockers
        assert time.monotonic() < deadline, f"classes {seen}, expected {expected}"
        time.sleep(0.5)


def _stop(stop: subprocess.CompletedProcess[str], run: subprocess.Popen[str]) -> None:
    """``stop``'s answer was clean and ``run`` ended."""
    assert stop.returncode == 0, stop.stderr
    run.communicate(timeout=60)


def _kill(run: subprocess.Popen[str]) -> None:
    """Kill ``run`` if it still lives (a failed test's cleanup)."""
    if run.poll() is None:
        run.kill()
        run.communicate()


def _await_output(bootstrap: str, topic: str, value: bytes, run: subprocess.Popen[str],
                  why: Callable[[], str]) -> list[bytes]:
    """The committed values of ``topic`` once ``value`` is among them (within 90 s, while
    ``run`` lives); fails with ``why()`` past the bound."""
    deadline = time.monotonic() + 90
    while value not in (values := [r.value for r in read_committed(bootstrap, topic,
                                                                   (0, 1, 2))]):
        assert run.poll() is None, f"run exited: {run.communicate()[1][-4000:]}"
        assert time.monotonic() < deadline, why()
        time.sleep(0.5)
    return values


def _classes(url: str) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {(s.labels["task"], s.labels["class"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "parsley_held_blockers"}


@pytest.mark.slow
def test_status_json_table_metrics_and_inspect_class_each_held_head(
    kafka_bootstrap: str, create_topic: Any, unique_names: Any, tmp_path: Path
) -> None:
    orders, payments, out = (create_topic(partitions=3), create_topic(partitions=3),
                             create_topic(partitions=3))
    plain = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for p in (0, 1):
        plain.produce(orders.name, key=b"k", value=f"o{p}".encode(), partition=p)
    assert plain.flush(30) == 0
    committed = Producer({"bootstrap.servers": kafka_bootstrap,
                          "transactional.id": unique_names.transactional_id(), **QUIET})
    committed.init_transactions(30)
    committed.begin_transaction()
    committed.produce(orders.name, key=b"k", value=b"o2", partition=2)
    committed.commit_transaction(30)  # orders[2]: o2@0, its commit marker @1
    upstream = Producer({"bootstrap.servers": kafka_bootstrap,
                         "transactional.id": unique_names.transactional_id(),
                         "transaction.timeout.ms": 120_000, **QUIET})
    upstream.init_transactions(30)
    upstream.begin_transaction()
    upstream.produce(orders.name, key=b"k", value=b"open", partition=1)  # orders[1]@1, open
    upstream.flush(30)
    for p, cause in ((0, 5), (1, 1), (2, 1)):
        plain.produce(payments.name, key=b"k", value=f"pay{p}".encode(), partition=p,
                      headers=[(CAUSES_HEADER,
                                encode_causes({ChannelId(orders.topic_id, p): cause}))])
    assert plain.flush(30) == 0

    (tmp_path / "holdapp.py").write_text(APP)
    env = dict(os.environ, H_ORDERS=orders.name, H_PAYMENTS=payments.name, H_OUT=out.name,
               PARSLEY_STATUS_INTERVAL_MS="300", COLUMNS="200",
               PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]))
    port = _free_port()
    prefix = f"hold-{uuid.uuid4().hex[:8]}"
    where = ["--prefix", prefix, "--state-dir", str(tmp_path / "state")]

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*CLI, *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)

    run = subprocess.Popen(
        [*CLI, "run", "holdapp:processes", "--bootstrap-servers", kafka_bootstrap, *where,
         "--metrics-port", str(port), "--log-status-every", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    expected = {0: ("not_produced", 1, 1), 1: ("open_transaction", 1, 2),
                2: ("no_record", 2, 2)}
    try:
        # The three tasks join one at a time, and each join restarts the others; task 2
        # may have committed its read position past orders[2]'s marker before its last
        # start, and the hold must be there after it all the same.
        blockers = _await_classes(lambda: cli("status", "--json", *where), run, expected)
        assert [blockers[t]["required"] for t in (0, 1, 2)] == [5, 1, 1], blockers
        assert [blockers[t]["settled"] for t in (0, 1, 2)] == [0, 0, 0], blockers

        table = cli("status", "--wide", *where)
        assert table.returncode == 0, table.stderr
        for text in ("(not produced, LSO 1 end 1)", "(in open txn, LSO 1 end 2)",
                     "(no record, LSO 2 end 2)"):
            assert text in table.stdout, table.stdout

        metrics = _classes(f"http://127.0.0.1:{port}/metrics")
        for t, (cls, _lso, _end) in expected.items():
            assert metrics[(str(t), cls)] == 1, metrics
            assert metrics[(str(t), "behind")] == 0, metrics

        # The open transaction commits: task 1's payment goes, after its order.
        upstream.commit_transaction(30)
        _await_output(kafka_bootstrap, out.name, b"pay1", run, lambda: (
            f"pay1 not released by the commit: {cli('status', '--json', *where).stdout}"))
        _stop(cli("stop", *where), run)
    finally:
        _kill(run)

    inspected = cli("inspect", "--process", "ledger", "--bootstrap-servers", kafka_bootstrap,
                    "--prefix", prefix, "--json")
    assert inspected.returncode == 0, inspected.stderr
    report = orjson.loads(inspected.stdout)
    classes = {t["task"]: [(b["class"], b["last_stable"], b["end"])
                           for h in t["held"] for b in h["blockers"]]
               for t in report["tasks"]}
    assert classes == {0: [expected[0]], 1: [], 2: [expected[2]]}, report
    text = cli("inspect", "--process", "ledger", "--bootstrap-servers", kafka_bootstrap,
               "--prefix", prefix)
    assert "not produced, LSO 1 end 1" in text.stdout, text.stdout
    assert "no record, LSO 2 end 2" in text.stdout, text.stdout

    # A restart rebuilds the same holds (seed 001: "Restart expecting the hold to clear
    # ... it changes nothing"), though task 2 committed its read position on orders[2]
    # past the marker (2): a task's own commit starts the engine at its coverage + 1
    # (workers.positions.engine_start_positions). The next record on orders[2] releases
    # pay2; pay0's cause is still beyond the end.
    again = subprocess.Popen(
        [*CLI, "run", "holdapp:processes", "--bootstrap-servers", kafka_bootstrap, *where,
         "--log-status-every", "0"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _await_classes(lambda: cli("status", "--json", *where), again,
                       {0: expected[0], 2: expected[2]})
        assert b"pay2" not in [r.value for r in read_committed(kafka_bootstrap, out.name,
                                                               (0, 1, 2))]
        plain.produce(orders.name, key=b"k", value=b"o2-later", partition=2)
        assert plain.flush(30) == 0
        values = _await_output(kafka_bootstrap, out.name, b"pay2", again, lambda: (
            f"pay2 not released by the next record: {cli('status', '--json', *where).stdout}"))
        assert b"pay0" not in values, values
        assert values.count(b"pay2") == 1, values
        _stop(cli("stop", *where), again)
    finally:
        _kill(again)
