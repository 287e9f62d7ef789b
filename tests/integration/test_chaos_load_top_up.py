"""The chaos load's stop leaves no ``B`` record naming an ``A`` offset that does not exist.

The chaos run's drain waits until nothing is held; a ``B`` record naming an ``A`` offset
nobody writes is rightly held for ever (docs/failing-closed.md, "Diagnosis": not produced
yet), so a load producer whose ``A`` records went missing (a stalled idempotent producer,
a replaced one) failed the drain for a reason that was not the pipeline's. Here ``A``
records for one partition are lost on purpose: the stop's top-up must still make every
named offset exist. Real broker; :class:`devtools.chaos.load.LoadProducer`.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from devtools.chaos.harness import _read
from devtools.chaos.load import LoadProducer
from parsley.wire import CAUSES_HEADER, decode_causes


class _LosesPartitionZero(LoadProducer):
    """Drops every ``A`` record for partition 0 after the first 20, while counting it as
    written: what a producer stalled on partition 0's leader leaves behind."""

    def _produce_a(self, producer: Producer, partition: int) -> None:
        if partition == 0 and self._next[0] >= 20:
            self._next[0] += 1
            return
        super()._produce_a(producer, partition)


def _ends(admin: AdminClient, topic: str, partitions: int) -> dict[int, int]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    answers = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=10)
    return {tp.partition: answers[tp].result(timeout=15).offset for tp in tps}


@pytest.mark.slow
def test_the_stop_tops_up_a_so_every_named_cause_exists(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any
) -> None:
    a, b = create_topic(partitions=2), create_topic(partitions=2)
    load = _LosesPartitionZero(kafka_bootstrap, a, b, rate=200.0, seed=5, tasks=2)
    load.start()
    deadline = time.monotonic() + 30
    while load.acked < 150 and time.monotonic() < deadline:
        time.sleep(0.1)
    load.stop()
    assert not load.is_alive()

    named: dict[int, int] = {}
    for rec in _read(kafka_bootstrap, b.name, range(2)):
        for ch, offset in decode_causes(dict(rec.headers() or ())[CAUSES_HEADER]).items():
            assert ch.topic_id == a.topic_id
            named[ch.partition] = max(named.get(ch.partition, -1), offset)
    ends = _ends(kafka_admin, a.name, 2)
    assert named.get(0, -1) >= 20, f"the run named no lost offset on partition 0: {named}"
    for partition, highest in named.items():
        assert ends[partition] > highest, (
            f"{a.name}[{partition}] ends at {ends[partition]} but a B record names offset "
            f"{highest} (the load's stop: {vars(load).get('top_up_error')!r})")
    assert load.top_up_error == ""
    assert load.topped_up > 0


class _Stalled(LoadProducer):
    """Its running producer talks to a port where no broker listens, so nothing it
    produces is acknowledged: a producer stalled for the whole run. The stop's flush is
    cut to 2 s."""

    FLUSH_S = 2.0

    def __init__(self, *args: Any, dead: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._dead: str | None = dead

    def _config(self) -> dict[str, Any]:
        config = super()._config()
        if self._dead is not None:
            config["bootstrap.servers"], self._dead = self._dead, None
        return config


def _dead_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.slow
def test_a_stalled_producer_is_purged_and_the_top_up_writes_what_it_named(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any
) -> None:
    a, b = create_topic(partitions=2), create_topic(partitions=2)
    load = _Stalled(kafka_bootstrap, a, b, rate=200.0, seed=9, tasks=2, dead=_dead_port())
    load.start()
    time.sleep(1.5)
    load.stop()
    assert not load.is_alive()
    assert load.top_up_error == ""
    assert load.flushed, "the stalled producer flushed everything"
    assert load.purged >= load.flushed
    assert load.errors == 0, f"the purge counted as delivery errors: {load.last_error}"
    named = load._named
    ends = _ends(kafka_admin, a.name, 2)
    for partition in range(2):
        assert named[partition] >= 0
        assert ends[partition] == named[partition] + 1, (ends, named)
    assert load.acked == load.topped_up == sum(ends.values())
