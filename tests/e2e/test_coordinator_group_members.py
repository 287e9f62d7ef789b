"""The consumer group at a start: previous members are waited for, bounded; others are refused.

Through ``Parsley.start`` with the real worker on the real broker (docs/operations.md,
"The consumer group at a start"):

* a restart under ``transient`` after a partition is added to a non-widest received
  topic, with a user's ``consumer.session.timeout.ms=30000``: the process's own
  just-stopped static members stay for up to 30 s, and the start waits for them
  (twice the session timeout) instead of refusing them as foreign;
* a start right after a stop whose declaration dropped a topic: it waits, saying so,
  for the previous static members to leave, then runs (never an unbounded
  REBALANCING);
* a live consumer in the group ``<prefix>-<process>`` at a start is refused as
  ``SUBSTRATE_MISCONFIGURED`` after the bounded wait, naming it (client id, host).

Verdicts by an independent ``read_committed`` consumer: every input relayed once.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewPartitions

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Reason
from parsley.refusals import ParsleyFailClosedError
from parsley.serdes import BYTES
from tests.seed_shapes import assert_seed_shape

INTERVAL_MS = 300


def _relay(name: str, sources: list[str], out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    proc = Process(name)
    for s in sources:
        proc = proc.receives(Channel(s, BYTES, BYTES), handle)
    return proc.sends(out)


def _config(bootstrap: str, tmp_path: Path, session_ms: int) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"gm-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=INTERVAL_MS,
                         kafka_properties={"consumer.session.timeout.ms": str(session_ms)})


def _produce(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=partition)
    assert producer.flush(30) == 0


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.2)


def _relayed(bootstrap: str, topic: str, partitions: tuple[int, ...]) -> list[bytes]:
    return sorted(r.value for r in read_committed(bootstrap, topic, partitions))


def _running(parsley: Parsley, name: str, tasks: int) -> bool:
    st = parsley.status()[name]
    if st.state is ProcessState.STOPPED:
        raise AssertionError(f"{name} stopped: {st.refusal_reason} {st.failure_detail}")
    return st.state is ProcessState.RUNNING and len(st.tasks) == tasks


@pytest.mark.slow
def test_a_longer_session_timeout_is_waited_for_at_a_restart_not_refused(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    a = create_topic(partitions=2)  # the widest
    b = create_topic(partitions=1)
    out = create_topic(partitions=2)
    config = _config(kafka_bootstrap, tmp_path, 30_000)
    _produce(kafka_bootstrap, a.name, 0, [b"a0"])
    _produce(kafka_bootstrap, b.name, 0, [b"b0"])
    caplog.set_level(logging.INFO, logger="parsley.coordinator")
    with Parsley.start(config, _relay("p", [a.name, b.name], out.name), restart="transient",
                       control=None, backoff_s=0.1) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0, 1))) == 2, 90, "first relay")
        kafka_admin.create_partitions([NewPartitions(b.name, 2)])[b.name].result(30)
        added = time.monotonic()
        _wait(lambda: parsley.status()["p"].restarts >= 1 or parsley.status()["p"].state
              is ProcessState.STOPPED, 60, "the restart through the bootstrap")
        _wait(lambda: _running(parsley, "p", 2), 120, "the process to run again")
        resumed_s = time.monotonic() - added
        _produce(kafka_bootstrap, b.name, 1, [b"b1"])
        _produce(kafka_bootstrap, a.name, 1, [b"a1"])
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0, 1))) >= 4, 60,
              "records on the new partition relayed")
        time.sleep(1.0)
        assert _relayed(kafka_bootstrap, out.name, (0, 1)) == [
            b"relayed:a0", b"relayed:a1", b"relayed:b0", b"relayed:b1"]
        assert parsley.healthy()
    assert "waiting up to" in caplog.text and "to leave" in caplog.text
    assert resumed_s < 120
    print(f"resumed {resumed_s:.1f} s after the partition was added")


@pytest.mark.slow
def test_a_start_right_after_a_declaration_change_waits_for_the_previous_members_then_runs(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    a = create_topic(partitions=1)
    b = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path, 6_000)
    _produce(kafka_bootstrap, a.name, 0, [b"a0"])
    _produce(kafka_bootstrap, b.name, 0, [b"b0"])
    with Parsley.start(config, _relay("p", [a.name, b.name], out.name), control=None) as first:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0,))) == 2, 90, "first relay")
        assert first.close(deadline_s=20).clean
    caplog.set_level(logging.INFO, logger="parsley.coordinator")
    started = time.monotonic()
    with Parsley.start(config, _relay("p", [a.name], out.name), control=None) as second:
        _wait(lambda: _running(second, "p", 1), 60, "the new declaration to run")
        running_s = time.monotonic() - started
        _produce(kafka_bootstrap, a.name, 0, [b"a1"])
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0,))) >= 3, 30, "a1 relayed")
        time.sleep(1.0)
        assert Counter(_relayed(kafka_bootstrap, out.name, (0,))) == Counter(
            [b"relayed:a0", b"relayed:a1", b"relayed:b0"])
    assert "waiting up to 12 s for the previous members of group" in caplog.text
    print(f"RUNNING {running_s:.1f} s after the start")


@pytest.mark.slow
def test_a_live_foreign_consumer_in_the_group_is_refused_at_start_by_name(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path, 3_000)
    group = f"{config.application_id_prefix}-p"
    _produce(kafka_bootstrap, src.name, 0, [b"x0"])
    with Parsley.start(config, _relay("p", [src.name], out.name), control=None) as first:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0,))) == 1, 90, "first relay")
        first.close(deadline_s=20)
    # Positions are committed now; a console consumer joins the application's group.
    foreign = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                        "client.id": "console-consumer-4242", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, **QUIET})
    try:
        foreign.subscribe([src.name])
        _wait(lambda: bool(foreign.poll(0.2) or foreign.assignment()), 30, "the foreign join")
        started = time.monotonic()
        with pytest.raises(ParsleyFailClosedError) as excinfo:
            handle = Parsley.start(config, _relay("p", [src.name], out.name), control=None)
            handle.close(deadline_s=20)
        refused_s = time.monotonic() - started
    finally:
        foreign.close()
    err = excinfo.value
    assert err.reason is Reason.SUBSTRATE_MISCONFIGURED
    assert_seed_shape(Reason.SUBSTRATE_MISCONFIGURED, err.detail)
    assert "console-consumer-4242" in err.detail and "on host /" in err.detail
    assert group in err.detail and "kafka-consumer-groups" in err.detail
    assert 5.0 <= refused_s < 60, refused_s  # after the wait (2 x 3 s), not before
    _produce(kafka_bootstrap, src.name, 0, [b"x1"])
    assert _relayed(kafka_bootstrap, out.name, (0,)) == [b"relayed:x0"]
    print(f"refused {refused_s:.1f} s after the start: {err.detail}")


@pytest.mark.slow
def test_a_join_start_still_refuses_a_live_foreign_consumer_by_name(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    # --join accepts the peers' workers (this process's instance ids), not a stranger's
    # consumer: the task's bootstrap refuses it, and the process stops on that coordinator.
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    config = _config(kafka_bootstrap, tmp_path, 3_000)
    group = f"{config.application_id_prefix}-p"
    _produce(kafka_bootstrap, src.name, 0, [b"x0"])
    with Parsley.start(config, _relay("p", [src.name], out.name), control=None,
                       join=True) as first:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name, (0,))) == 1, 90, "first relay")
        first.close(deadline_s=20)
    foreign = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                        "client.id": "console-consumer-4343", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, **QUIET})
    try:
        foreign.subscribe([src.name])
        _wait(lambda: bool(foreign.poll(0.2) or foreign.assignment()), 30, "the foreign join")
        with Parsley.start(config, _relay("p", [src.name], out.name), control=None,
                           join=True) as handle:
            assert handle.await_all_stopped(timeout=90), handle.status()
            st = handle.status()["p"]
    finally:
        foreign.close()
    assert st.state is ProcessState.STOPPED
    assert st.refusal_reason is Reason.SUBSTRATE_MISCONFIGURED, st
    assert st.failure_detail is not None and "console-consumer-4343" in st.failure_detail
    assert_seed_shape(Reason.SUBSTRATE_MISCONFIGURED, st.failure_detail)
    _produce(kafka_bootstrap, src.name, 0, [b"x1"])
    assert _relayed(kafka_bootstrap, out.name, (0,)) == [b"relayed:x0"]
