"""A transaction is committed well inside ``transaction.timeout.ms``, whatever the batch.

The worker closes its transaction by elapsed time (at half the timeout, checked between
deliveries, so also in the middle of one long drain) and sizes its consume batches to the
handler's measured cost (docs/operations.md, "Transaction time bound"). Two cases run
through ``Parsley.start`` under ``--restart transient``, each judged by an independent
``read_committed`` reader, with no restart and no "past transaction.timeout.ms" stop:

* a 600-record backlog through a handler taking 60 ms per record;
* one cause releasing many held messages at once (``PARSLEY_TEST_MASS_RELEASE``, default
  3,000, through a 4 ms handler: a drain longer than the timeout), delivered exactly once
  and after their cause, in order, under a 4 s stale bound (``stale_task_ms``) that the
  drain lasts about three times: the task keeps reporting and consuming while it drains
  (docs/operations.md, "Transaction time bound").
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from coordinator import Parsley, ParsleyConfig
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process
from parsley.engine.channel import ChannelId
from parsley.serdes import BYTES
from parsley.wire import CAUSES_HEADER, encode_causes

pytestmark = pytest.mark.serial  # a 4 s stale bound over a drain timed to last three of them

MASS_RELEASE = int(os.environ.get("PARSLEY_TEST_MASS_RELEASE", "3000"))
STALE_TASK_MS = 4000
"""The mass-release case's stale bound, ms: the 3,000 x 4 ms drain lasts about three of it."""


def _slow_relay(name: str, sources: list[str], out_name: str, cost_s: float) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        time.sleep(cost_s)
        value = b"%s:%d" % (delivery.topic.encode(), delivery.offset)
        return Effects.builder().send(out, b"k", value).build()

    proc = Process(name)
    for s in sources:
        proc = proc.receives(Channel(s, BYTES, BYTES), handle)
    return proc.sends(out)


def _config(bootstrap: str, tmp_path: Path, **settings: Any) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"tb-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=500, **settings)


def _wait_relayed(parsley: Parsley, bootstrap: str, out: str, count: int, timeout_s: float,
                  name: str) -> list[bytes | None]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = [r.value for r in read_committed(bootstrap, out, timeout_s=60)]
        if len(got) >= count:
            return got
        st = parsley.status()[name]
        assert st.restarts == 0 and st.failure_detail is None, \
            f"a task stopped: {st.failure_detail} (restarts {st.restarts})"
        assert time.monotonic() < deadline, f"{len(got)} of {count} relayed in {timeout_s} s"
        time.sleep(1.0)


def test_a_slow_handler_on_a_backlog_commits_everything_once(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(600):
        producer.produce(src.name, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    with Parsley.start(_config(kafka_bootstrap, tmp_path),
                       _slow_relay("slow", [src.name], out.name, 0.060),
                       restart="transient", control=None) as parsley:
        started = time.monotonic()
        got = _wait_relayed(parsley, kafka_bootstrap, out.name, 600, 240, "slow")
        print(f"600 x 60 ms relayed in {time.monotonic() - started:.1f} s")
        time.sleep(1.0)
        got = [r.value for r in read_committed(kafka_bootstrap, out.name)]
        assert got == [b"%s:%d" % (src.name.encode(), i) for i in range(600)], "exactly once"
        assert parsley.healthy() and parsley.status()["slow"].restarts == 0


def test_one_cause_releasing_many_held_messages_commits_them_once_in_order(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path
) -> None:
    a = create_topic(partitions=1)
    b = create_topic(partitions=1)
    out = create_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    causes = encode_causes({ChannelId(a.topic_id, 0): 0})
    for i in range(MASS_RELEASE):
        producer.produce(b.name, value=b"%d" % i, partition=0, headers=[(CAUSES_HEADER, causes)])
    assert producer.flush(60) == 0
    # A stale bound of 4 s, about a third of the drain: the task must keep reporting
    # (and consuming) while it drains, or the coordinator kills it as stale.
    with Parsley.start(_config(kafka_bootstrap, tmp_path, stale_task_ms=STALE_TASK_MS),
                       _slow_relay("mass", [a.name, b.name], out.name, 0.004),
                       restart="transient", control=None) as parsley:
        deadline = time.monotonic() + 120
        while True:  # every B record fed and held
            st = parsley.status()["mass"]
            if st.tasks and st.tasks[0].held_count == MASS_RELEASE:
                break
            assert st.restarts == 0, st.failure_detail
            assert time.monotonic() < deadline, "the B records were not all held"
            time.sleep(0.5)
        assert read_committed(kafka_bootstrap, out.name) == []
        producer.produce(a.name, value=b"cause", partition=0)
        assert producer.flush(30) == 0
        released = time.monotonic()
        _wait_relayed(parsley, kafka_bootstrap, out.name, MASS_RELEASE + 1,
                      60 + MASS_RELEASE * 0.02, "mass")
        print(f"{MASS_RELEASE} held released and committed in "
              f"{time.monotonic() - released:.1f} s")
        time.sleep(1.0)
        got = [r.value for r in read_committed(kafka_bootstrap, out.name)]
        assert got == [b"%s:0" % a.name.encode()] + [
            b"%s:%d" % (b.name.encode(), i) for i in range(MASS_RELEASE)
        ], "the cause first, then every held message once, in order"
        assert parsley.healthy() and parsley.status()["mass"].restarts == 0
