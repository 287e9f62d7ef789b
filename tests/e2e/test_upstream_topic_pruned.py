"""A deleted upstream topic leaves the frontier at a later start (docs/model.md, "Pruning").

A relay receives ``IN``. A record on ``IN`` names a cause on an upstream topic ``U``
that the relay does not receive, so ``U`` enters the relay's frontier and every relayed
record carries it. The relay is started twice while ``U`` lives (the first start learns
``U``'s name, the second runs with it bound), ``U`` is deleted, and the relay is started
once more and relays a plain record: that record's ``parsley.causes`` no longer names
``U`` (the identity check at the start confirms the deletion and prunes the entry, as
Java's ``AdminTopicIdentitySource`` does). The verdict is an independent
``read_committed`` read of the output.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET, delete_topic
from devtools.worker_support import read_committed
from parsley import Channel, ChannelId, Effects, Process
from parsley.serdes import BYTES
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes

INTERVAL_MS = 300


def _relay(source: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, delivery.value).build()

    return Process("relay").receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_deleted_upstream_topic_is_not_carried_after_the_next_start(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
) -> None:
    inp = create_topic()
    out = create_topic()
    upstream = create_topic()
    config = ParsleyConfig(kafka_bootstrap, f"prune-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path), status_interval_ms=INTERVAL_MS)
    process = _relay(inp.name, out.name)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(upstream.name, key=b"u", value=b"cause", partition=0)
    producer.produce(inp.name, key=b"k", value=b"first", partition=0,
                     headers=[(CAUSES_HEADER,
                               encode_causes({ChannelId(upstream.topic_id, 0): 0}))])
    assert producer.flush(30) == 0

    def run(relayed: int) -> None:
        with Parsley.start(config, process) as parsley:
            _wait(lambda: parsley.status()["relay"].state is ProcessState.RUNNING
                  and len(read_committed(kafka_bootstrap, out.name)) >= relayed
                  and [(t.state.value, t.lag) for t in parsley.status()["relay"].tasks]
                  == [("RUNNING", 0)], 90, f"{relayed} relayed record(s), caught up")
            report = parsley.close(deadline_s=30)
            assert report.clean, report.summary()

    try:
        run(1)  # relays "first": U enters the frontier
        run(1)  # a start while U lives learns U's name (and commits it)
        delete_topic(kafka_admin, upstream.name)
        producer.produce(inp.name, key=b"k", value=b"second", partition=0)
        assert producer.flush(30) == 0
        run(2)  # a start after U's deletion relays the plain "second"
        records = read_committed(kafka_bootstrap, out.name)
    finally:
        kafka_admin.delete_topics([inp.name, out.name])
    assert [r.value for r in records] == [b"first", b"second"], records
    carried = [{ch.topic_id for ch in decode_causes(dict(r.headers)[CAUSES_HEADER])}
               for r in records]
    assert upstream.topic_id in carried[0], "the first relay carries U's cause"
    assert upstream.topic_id not in carried[1], (
        f"the relay of the plain record after U's deletion still names U: {carried[1]}")
