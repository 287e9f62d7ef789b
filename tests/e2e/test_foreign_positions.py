"""Read positions Parsley did not write, and positions it wrote, judged on the real broker.

Through ``coordinator.runtime.api.Parsley`` on the real broker, each verdict read by an
independent ``read_committed`` consumer (``devtools.worker_support.read_committed``):

* a partition fully relayed, then emptied by retention (log start = log end),
  resumes on restart: the committed position was moved past the trailing
  transaction marker, so nothing is reported discarded unread;
* a ``kafka-console-consumer --group <app-id>`` joining a running relay is refused
  (``SUBSTRATE_MISCONFIGURED``) after it committed past four records; the runbook's
  remedy, removing it and restarting, delivers the four exactly once: the start
  overrides a commit Parsley did not make with the ordering state's coverage + 1 and
  logs a WARNING naming it;
* ``kafka-consumer-groups --reset-offsets`` alone, forward or back, neither refuses
  the next start nor skips nor repeats a record;
* a deliberate reset (``parsley-coordinator reset``, the runbook's by-hand reset)
  leaves no ordering state and is honoured; a tool's commit over a deleted changelog
  stays ``ORDERING_STATE_LOST``;
* a foreign member in the group while the process runs is refused
  (``SUBSTRATE_MISCONFIGURED`` naming its client id and host);
* an ordering-changelog partition emptied under a live process is refused
  (``ORDERING_STATE_LOST``) when a crashed worker is respawned, not restarted
  from empty state.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
)

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from coordinator.reset.execute import execute_reset, open_admin, plan_reset
from coordinator.reset.plan import parse_target
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Reason
from parsley.declarations import application_id, ordering_changelog
from parsley.refusals import ParsleyFailClosedError
from parsley.serdes import BYTES
from tests.purge import purge_to
from workers.positions import BOOTSTRAP_METADATA, TASK_METADATA

DEVBROKER_TOOL = [sys.executable, "-c", "from devtools.devbroker_cli import main; main()", "tool"]

INTERVAL_MS = 300


def relay(name: str, source: str, out_name: str) -> Process:
    out = Channel(out_name, BYTES, BYTES)

    def handle(delivery: Any, state: Any) -> Effects:
        return Effects.builder().send(out, delivery.key, b"relayed:" + delivery.value).build()

    return Process(name).receives(Channel(source, BYTES, BYTES), handle).sends(out)


def _config(bootstrap: str, tmp_path: Path) -> ParsleyConfig:
    return ParsleyConfig(bootstrap, f"fp-{uuid.uuid4().hex[:8]}", state_dir=str(tmp_path),
                         status_interval_ms=INTERVAL_MS)


def _wait(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _produce_each_in_a_transaction(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """One record per transaction: every record is followed by its commit marker."""
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"fp-writer-{uuid.uuid4().hex[:8]}", **QUIET})
    producer.init_transactions(30)
    for v in values:
        producer.begin_transaction()
        producer.produce(topic, key=b"k", value=v, partition=0)
        producer.commit_transaction(30)


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **QUIET})
    for v in values:
        producer.produce(topic, key=b"k", value=v, partition=0)
    assert producer.flush(30) == 0


def _relayed(bootstrap: str, topic: str) -> list[bytes]:
    return [r.value for r in read_committed(bootstrap, topic)]


def _committed(admin: AdminClient, group: str, topic: str) -> int:
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
    got = admin.list_consumer_group_offsets(req, request_timeout=30)[group].result()
    return int(got.topic_partitions[0].offset)


def _metadata(admin: AdminClient, group: str, topic: str) -> str:
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]
    got = admin.list_consumer_group_offsets(req, request_timeout=30)[group].result()
    return str(got.topic_partitions[0].metadata or "")


def _await_empty_group(admin: AdminClient, group: str, timeout_s: float = 60) -> None:
    def empty() -> bool:
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
        return not desc.members

    _wait(empty, timeout_s, f"group {group} to empty")


def _stopped_with(parsley: Any, name: str) -> Any:
    st = parsley.status()[name]
    return st if st.state is ProcessState.STOPPED else None


@pytest.mark.slow
def test_a_quiet_partition_emptied_by_retention_after_a_full_relay_resumes(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce_each_in_a_transaction(kafka_bootstrap, src.name, [b"a0", b"a1", b"a2"])
    config = _config(kafka_bootstrap, tmp_path)
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) == 3, 90, "three relayed")
        time.sleep(3 * INTERVAL_MS / 1000)  # a punctuation or two after the last feed
        report = parsley.close(deadline_s=20)
        assert report.clean, report.summary()
    # Retention empties the quiet topic: log start = log end = last marker + 1.
    end = 6  # a0@0 marker@1 a1@2 marker@3 a2@4 marker@5
    app_id = application_id(config.application_id_prefix, "relay")
    assert _committed(kafka_admin, app_id, src.name) == end, "past the trailing marker"
    kafka_admin.delete_records([TopicPartition(src.name, 0, end)])[
        TopicPartition(src.name, 0, end)].result()
    _produce_each_in_a_transaction(kafka_bootstrap, src.name, [b"b0", b"b1"])
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) >= 5
              or _stopped_with(parsley, "relay") is not None, 90, "the new records or a stop")
        st = parsley.status()["relay"]
        assert st.refusal_reason is None, (st.refusal_reason, st.failure_detail)
        time.sleep(1.0)
        assert _relayed(kafka_bootstrap, out.name) == [
            b"relayed:a0", b"relayed:a1", b"relayed:a2", b"relayed:b0", b"relayed:b1"]


def _tool(command: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one Kafka command-line tool, as the runbooks write it, from the dev broker's jars."""
    return subprocess.run([*DEVBROKER_TOOL, *shlex.split(command)], capture_output=True,
                          text=True, timeout=timeout_s)


def _assignment_of(admin: AdminClient, group: str, client_prefix: str) -> list[int]:
    desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    return [tp.partition for m in desc.members if m.client_id.startswith(client_prefix)
            for tp in (m.assignment.topic_partitions if m.assignment else [])]


def _overrides(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "parsley.coordinator.bootstrap" and r.levelno == logging.WARNING
            and "that Parsley did not commit" in r.getMessage()]


@pytest.mark.slow
def test_a_console_consumer_in_the_group_is_refused_then_its_removal_and_a_restart_cure_it(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/runbooks.md, SUBSTRATE_MISCONFIGURED: the runbook's remedy "remove the foreign
    consumer, then restart" is the whole cure; the restart needs no --reset-offsets."""
    caplog.set_level(logging.INFO, logger="parsley.coordinator.bootstrap")
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0", b"a1"])
    config = _config(kafka_bootstrap, tmp_path)
    app_id = application_id(config.application_id_prefix, "relay")
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) == 2, 90, "two relayed")
        # The real console consumer joins the running relay's group; the range assignor
        # gives it the partition (its member id sorts first). It auto-commits what it
        # read, and commits again when it is stopped.
        console = subprocess.Popen(
            [*DEVBROKER_TOOL, "kafka-console-consumer", "--bootstrap-server", kafka_bootstrap,
             "--group", app_id, "--topic", src.name], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)
        try:
            _wait(lambda: _assignment_of(kafka_admin, app_id, "console-consumer") == [0], 60,
                  "the console consumer to be assigned the partition")
            _produce(kafka_bootstrap, src.name, [b"f0", b"f1", b"f2", b"f3"])
            _wait(lambda: _stopped_with(parsley, "relay") is not None, 60,
                  "the relay's refusal")
            _wait(lambda: _committed(kafka_admin, app_id, src.name) == 6, 30,
                  "the console consumer's commit past the four")
        finally:
            console.terminate()  # "remove the foreign consumer"
            read, err = console.communicate(timeout=60)
        assert read.split() == ["f0", "f1", "f2", "f3"], (read, err[-2000:])
        st = parsley.status()["relay"]
        assert st.refusal_reason is Reason.SUBSTRATE_MISCONFIGURED, st.failure_detail
        assert "console-consumer" in (st.failure_detail or "")
    assert _committed(kafka_admin, app_id, src.name) == 6  # past the four, not by Parsley
    assert _metadata(kafka_admin, app_id, src.name) not in (TASK_METADATA, BOOTSTRAP_METADATA)
    assert _relayed(kafka_bootstrap, out.name) == [b"relayed:a0", b"relayed:a1"]

    # The foreign consumer is gone (it exited); restart, as the runbook says.
    caplog.clear()
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) >= 6
              or _stopped_with(parsley, "relay") is not None, 90, "six relayed or a stop")
        time.sleep(1.0)
        st = parsley.status()["relay"]
        assert st.refusal_reason is None, (st.refusal_reason, st.failure_detail)
    assert _relayed(kafka_bootstrap, out.name) == [
        b"relayed:" + v for v in (b"a0", b"a1", b"f0", b"f1", b"f2", b"f3")]
    [warning] = _overrides(caplog)
    for part in (f"group '{app_id}'", f"{src.name}-0", "offset 6", "commit metadata ''",
                 "covers it up to offset 1", "resumes at offset 2", "offsets 2..5"):
        assert part in warning, warning
    assert _committed(kafka_admin, app_id, src.name) == 6
    assert _metadata(kafka_admin, app_id, src.name) == TASK_METADATA
    print(f"overridden at the restart: {warning}")


@pytest.mark.slow
def test_kafka_consumer_groups_reset_offsets_alone_neither_refuses_nor_skips(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The "Do not" of docs/runbooks.md made harmless: moved forward, the jumped records are
    delivered; moved backwards, nothing is delivered twice; every start is clean."""
    caplog.set_level(logging.INFO, logger="parsley.coordinator.bootstrap")
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0", b"a1"])
    config = _config(kafka_bootstrap, tmp_path)
    app_id = application_id(config.application_id_prefix, "relay")
    expected = [b"a0", b"a1"]

    def run_until(count: int) -> None:
        with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
            _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) >= count
                  or _stopped_with(parsley, "relay") is not None, 90, f"{count} relayed")
            time.sleep(3 * INTERVAL_MS / 1000)  # a late duplicate would show by now
            st = parsley.status()["relay"]
            assert st.refusal_reason is None, (st.refusal_reason, st.failure_detail)
            report = parsley.close(deadline_s=20)
            assert report.clean, report.summary()
        _await_empty_group(kafka_admin, app_id)

    run_until(2)
    _produce(kafka_bootstrap, src.name, [b"b0", b"b1", b"b2"])
    for where, then in (("--to-latest", [b"b0", b"b1", b"b2"]), ("--to-earliest", [])):
        res = _tool(f"kafka-consumer-groups --bootstrap-server {kafka_bootstrap} --group "
                    f"{app_id} --reset-offsets --topic {src.name}:0 {where} --execute")
        assert res.returncode == 0, res.stderr
        moved = _committed(kafka_admin, app_id, src.name)
        assert moved == (5 if where == "--to-latest" else 0), res.stdout
        caplog.clear()
        expected += then
        run_until(len(expected))
        assert _relayed(kafka_bootstrap, out.name) == [b"relayed:" + v for v in expected], where
        [warning] = _overrides(caplog)
        assert f"offset {moved}," in warning and "resumes at offset" in warning, warning
        assert ("it reads them now" in warning) == (where == "--to-latest"), warning
        assert _committed(kafka_admin, app_id, src.name) == 5
        assert _metadata(kafka_admin, app_id, src.name) in (TASK_METADATA, BOOTSTRAP_METADATA)


@pytest.mark.slow
def test_a_deliberate_reset_is_honoured_not_overridden(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A reset leaves no ordering state behind, which is how a start tells it from a foreign
    commit: ``parsley-coordinator reset`` (its commits carry ``parsley.bootstrap``) starts
    at the chosen offset; the runbook's by-hand reset starts at the declared position; a
    ``--reset-offsets`` commit over a deleted changelog stays ``ORDERING_STATE_LOST``."""
    caplog.set_level(logging.INFO, logger="parsley.coordinator.bootstrap")
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0", b"a1", b"a2", b"a3"])
    config = _config(kafka_bootstrap, tmp_path)
    app_id = application_id(config.application_id_prefix, "relay")
    changelog = ordering_changelog(config.application_id_prefix, "relay")
    proc = relay("relay", src.name, out.name)

    def run_until(count: int) -> None:
        with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
            _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) >= count
                  or _stopped_with(parsley, "relay") is not None, 90, f"{count} relayed")
            time.sleep(3 * INTERVAL_MS / 1000)
            st = parsley.status()["relay"]
            assert st.refusal_reason is None, (st.refusal_reason, st.failure_detail)
            parsley.close(deadline_s=20)
        _await_empty_group(kafka_admin, app_id)

    run_until(4)
    # parsley-coordinator reset --to-offset 2 (its functions, as the command calls them).
    admin = open_admin(config)
    plan = plan_reset(config, proc, parse_target(to_offset=["2"]), admin)
    execute_reset(plan, admin)
    assert _committed(kafka_admin, app_id, src.name) == 2
    caplog.clear()
    run_until(6)
    assert _relayed(kafka_bootstrap, out.name) == [
        b"relayed:" + v for v in (b"a0", b"a1", b"a2", b"a3", b"a2", b"a3")]
    assert _overrides(caplog) == []

    # By hand, in the runbook's order; the group deleted: the declared start (earliest).
    for command in (f"kafka-topics --bootstrap-server {kafka_bootstrap} --delete --if-exists "
                    f"--topic {changelog}",
                    f"kafka-consumer-groups --bootstrap-server {kafka_bootstrap} --delete "
                    f"--group {app_id}"):
        res = _tool(command)
        assert res.returncode == 0, res.stderr
    _wait(lambda: changelog not in kafka_admin.list_topics(timeout=10).topics, 60,
          "the changelog's deletion")
    caplog.clear()
    run_until(10)
    assert _relayed(kafka_bootstrap, out.name)[6:] == [
        b"relayed:" + v for v in (b"a0", b"a1", b"a2", b"a3")]
    assert _overrides(caplog) == []

    # The changelog deleted and the offsets moved by the tool: no state to resume from.
    for command in (f"kafka-topics --bootstrap-server {kafka_bootstrap} --delete --if-exists "
                    f"--topic {changelog}",
                    f"kafka-consumer-groups --bootstrap-server {kafka_bootstrap} --group "
                    f"{app_id} --reset-offsets --topic {src.name}:0 --to-offset 1 --execute"):
        res = _tool(command)
        assert res.returncode == 0, res.stderr
    _wait(lambda: changelog not in kafka_admin.list_topics(timeout=10).topics, 60,
          "the changelog's deletion")
    try:
        with Parsley.start(config, relay("relay", src.name, out.name)):
            raise AssertionError("the start was not refused")
    except ParsleyFailClosedError as exc:
        assert exc.reason is Reason.ORDERING_STATE_LOST, exc
        assert f"exist for {src.name}-0," in exc.detail, exc.detail
        assert "(committed offset 1, metadata none;" in exc.detail, exc.detail
    assert len(_relayed(kafka_bootstrap, out.name)) == 10


@pytest.mark.slow
def test_a_foreign_member_in_the_group_while_running_is_refused_naming_it(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0"])
    config = _config(kafka_bootstrap, tmp_path)
    app_id = application_id(config.application_id_prefix, "relay")
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) == 1, 90, "one relayed")
        foreign = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": app_id,
                            "client.id": "aaa-foreign-reader", "auto.offset.reset": "earliest",
                            "enable.auto.commit": False, **QUIET})
        foreign.subscribe([src.name])
        joined = time.monotonic()
        try:
            while time.monotonic() - joined < 45 and _stopped_with(parsley, "relay") is None:
                foreign.consume(10, 0.2)
            st = parsley.status()["relay"]
            took = time.monotonic() - joined
        finally:
            foreign.close()
        assert st.state is ProcessState.STOPPED, f"still {st.state} after {took:.1f} s"
        assert st.refusal_reason is Reason.SUBSTRATE_MISCONFIGURED, st.failure_detail
        assert "aaa-foreign-reader" in (st.failure_detail or "")
        assert "host" in (st.failure_detail or "")
        print(f"refused {took:.1f} s after the foreign member subscribed: {st.failure_detail}")
    assert _relayed(kafka_bootstrap, out.name) == [b"relayed:a0"]


@pytest.mark.slow
def test_an_ordering_changelog_partition_emptied_under_a_live_process_is_refused_at_respawn(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0", b"a1"])
    config = _config(kafka_bootstrap, tmp_path)
    changelog = ordering_changelog(config.application_id_prefix, "relay")
    with Parsley.start(config, relay("relay", src.name, out.name),
                       restart="transient", backoff_s=0.1) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) == 2, 90, "two relayed")
        _wait(lambda: len(parsley.status()["relay"].tasks) == 1, 30, "the task's entry")
        pid = parsley.status()["relay"].tasks[0].pid
        _, end = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "fp-unused",
                           **QUIET}).get_watermark_offsets(TopicPartition(changelog, 0),
                                                           timeout=10)
        assert end > 0
        # Kafka refuses delete-records on a compact-only topic (POLICY_VIOLATION): the
        # purge changes cleanup.policy away from compact first (docs/runbooks.md).
        purge_to(kafka_admin, changelog, 0, end)
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: _stopped_with(parsley, "relay") is not None
              or (parsley.status()["relay"].restarts >= 1
              and parsley.status()["relay"].state is ProcessState.RUNNING
              and len(parsley.status()["relay"].tasks) == 1), 60, "a respawn or a stop")
        time.sleep(2.0)
        st = parsley.status()["relay"]
        assert st.refusal_reason is Reason.ORDERING_STATE_LOST, (st.state, st.failure_detail)
        assert f"{src.name}-0" in (st.failure_detail or "")
        assert changelog in (st.failure_detail or "")
