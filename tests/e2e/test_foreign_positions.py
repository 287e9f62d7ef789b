"""Read positions Parsley did not write, and positions it wrote, judged on the real broker.

Through ``coordinator.runtime.api.Parsley`` on the real broker, each verdict read by an
independent ``read_committed`` consumer (``devtools.worker_support.read_committed``):

* a partition fully relayed, then emptied by retention (log start = log end),
  resumes on restart: the committed position was moved past the trailing
  transaction marker, so nothing is reported discarded unread;
* a consumer outside Parsley that committed positions in the application's
  group is refused at the next start (``SUBSTRATE_MISCONFIGURED``, naming the
  channel, the committed offset and the coverage); the runbook's reset to
  coverage + 1 then delivers every skipped record exactly once;
* a foreign member in the group while the process runs is refused
  (``SUBSTRATE_MISCONFIGURED`` naming its client id and host);
* an ordering-changelog partition emptied under a live process is refused
  (``ORDERING_STATE_LOST``) when a crashed worker is respawned, not restarted
  from empty state.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from coordinator import Parsley, ParsleyConfig
from coordinator.control.status import ProcessState
from devtools.kafka_support import QUIET
from devtools.worker_support import read_committed
from parsley import Channel, Effects, Process, Reason
from parsley.declarations import application_id, ordering_changelog
from parsley.refusals import ParsleyFailClosedError
from parsley.serdes import BYTES
from workers.positions import TASK_METADATA

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


def test_positions_a_foreign_consumer_committed_are_refused_at_start_then_reset_delivers_all(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, src.name, [b"a0", b"a1"])
    config = _config(kafka_bootstrap, tmp_path)
    app_id = application_id(config.application_id_prefix, "relay")
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) == 2, 90, "two relayed")
        parsley.close(deadline_s=20)
    assert _committed(kafka_admin, app_id, src.name) == 2
    assert _metadata(kafka_admin, app_id, src.name) == TASK_METADATA
    _await_empty_group(kafka_admin, app_id)
    # A consumer outside Parsley in the application's group reads and commits 4 records.
    _produce(kafka_bootstrap, src.name, [b"f0", b"f1", b"f2", b"f3"])
    foreign = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": app_id,
                        "client.id": "console-consumer-1", "auto.offset.reset": "earliest",
                        "enable.auto.commit": False, **QUIET})
    foreign.subscribe([src.name])
    seen: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(seen) < 4 and time.monotonic() < deadline:
        for m in foreign.consume(10, 0.5):
            if m.error() is None:
                seen.append(m.value())
    assert seen == [b"f0", b"f1", b"f2", b"f3"]
    foreign.commit(asynchronous=False)
    foreign.close()
    assert _committed(kafka_admin, app_id, src.name) == 6
    started = time.monotonic()
    try:
        with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
            time.sleep(3)
            raise AssertionError(f"the start was not refused; relayed "
                                 f"{_relayed(kafka_bootstrap, out.name)}")
    except ParsleyFailClosedError as exc:
        refusal = exc
    assert refusal.reason is Reason.SUBSTRATE_MISCONFIGURED, refusal
    detail = refusal.detail
    assert f"{src.name}-0" in detail and "committed read position 6" in detail, detail
    assert "coverage 1" in detail and "--to-offset 2" in detail, detail
    print(f"refused after {time.monotonic() - started:.1f} s: {detail}")
    # The runbook's remedy, as written there: reset the group's position to coverage + 1.
    reset = (f"kafka-consumer-groups --bootstrap-server {kafka_bootstrap} --group {app_id} "
             f"--reset-offsets --topic {src.name}:0 --to-offset 2 --execute")
    res = subprocess.run([*DEVBROKER_TOOL, *shlex.split(reset)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert _committed(kafka_admin, app_id, src.name) == 2, res.stdout + res.stderr
    with Parsley.start(config, relay("relay", src.name, out.name)) as parsley:
        _wait(lambda: len(_relayed(kafka_bootstrap, out.name)) >= 6, 90, "six relayed")
        time.sleep(1.0)
        assert parsley.status()["relay"].refusal_reason is None
    assert _relayed(kafka_bootstrap, out.name) == [
        b"relayed:" + v for v in (b"a0", b"a1", b"f0", b"f1", b"f2", b"f3")]


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
        # purge needs cleanup.policy changed away from compact first (docs/runbooks.md).
        res = ConfigResource(ResourceType.TOPIC, changelog, incremental_configs=[
            ConfigEntry("cleanup.policy", "compact,delete",
                        incremental_operation=AlterConfigOpType.SET)])
        kafka_admin.incremental_alter_configs([res])[res].result()
        tp = TopicPartition(changelog, 0, end)
        kafka_admin.delete_records([tp])[tp].result()
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
