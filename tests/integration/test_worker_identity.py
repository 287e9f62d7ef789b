"""The identity check at task initialisation on the real broker (docs/model.md, "Pruning").

* :class:`workers.identity.IdentityChecker` judges a live topic alive at once, a deleted
  one DELETED and a recreated one RECREATED after three answers, and leaves every id
  pending with the "could not be checked" line when the cluster does not answer.
* A worker whose state binds a received topic name to an older incarnation refuses
  ``CHANNEL_IDENTITY_CHANGED`` at initialisation; one whose received topic was deleted
  while it still holds messages from it refuses ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``.
"""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames, create_topic, delete_topic
from devtools.worker_support import (
    StatusCollector,
    bootstrap,
    make_spec,
    read_committed,
    spawn,
    stop_worker,
)
from parsley.engine.channel import ChannelId, kafka_topic_id
from parsley.engine.engine import TopicVerdict
from parsley.refusals import Reason
from parsley.wire import CAUSES_HEADER, decode_causes, encode_causes
from tests.integration.test_worker_causal import relay_process
from tests.seed_shapes import assert_seed_shape
from workers.identity import IdentityChecker
from workers.protocol import EXIT_CODES, ExitVerdict, StopKind, exit_verdict


@pytest.mark.slow
def test_checker_judges_alive_deleted_and_recreated_topics(
    kafka_admin: AdminClient, create_topic: CreateTopic, unique_names: UniqueNames,
) -> None:
    alive = create_topic(unique_names.topic("alive"))
    gone = create_topic(unique_names.topic("gone"))
    renewed = create_topic(unique_names.topic("renewed"))
    delete_topic(kafka_admin, gone.name)
    delete_topic(kafka_admin, renewed.name)
    again = create_topic(renewed.name)
    assert again.topic_id != renewed.topic_id
    checker = IdentityChecker(kafka_admin)
    started = time.monotonic()
    result = checker.check({alive.name: alive.topic_id, gone.name: gone.topic_id,
                            renewed.name: renewed.topic_id})
    took = time.monotonic() - started
    assert result.pending == {}
    assert result.verdicts == {alive.topic_id: TopicVerdict.ALIVE,
                               gone.topic_id: TopicVerdict.DELETED,
                               renewed.topic_id: TopicVerdict.RECREATED}
    assert 1.0 <= took < 10.0  # three answers 500 ms apart, under one 10 s deadline


@pytest.mark.slow
def test_checker_leaves_ids_pending_when_the_cluster_does_not_answer(
    caplog: pytest.LogCaptureFixture, unique_names: UniqueNames,
) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", **QUIET})
    topic_id = unique_names.topic()
    from uuid import uuid4

    ids = {topic_id: uuid4()}
    with caplog.at_level(logging.WARNING, logger="parsley.worker.identity"):
        result = IdentityChecker(admin, deadline_s=1.0).check(ids)
    assert result.verdicts == {}
    assert result.pending == ids
    assert any("topic identity could not be checked (" in r.getMessage()
               and "continuing on the identities resolved at start, and asking again from "
               "the status punctuation" in r.getMessage() for r in caplog.records)


def _run_to_final(spec, collector: StatusCollector) -> dict:  # type: ignore[no-untyped-def]
    worker = spawn(spec)
    final = collector.final(worker.pid, timeout_s=90)
    worker.join(30)
    return final | {"exitcode": worker.exitcode}


@pytest.mark.slow
def test_worker_refuses_a_received_topic_recreated_under_its_name(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_names: UniqueNames,
    tmp_path: Path,
) -> None:
    a = create_topic(kafka_admin, unique_names.topic("a"))
    out = create_topic(kafka_admin, unique_names.topic("out"))
    process = relay_process("ident", [a.name], out.name)
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, {a.name: a})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(a.name, value=b"x", partition=0)
    assert producer.flush(30) == 0
    collector = StatusCollector()
    try:
        first = spawn(make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                                str(tmp_path), {a.name: a, out.name: out},
                                status_interval_ms=200))
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                           and m["commits"] >= 1)
        assert stop_worker(first) == EXIT_CODES[StopKind.CLEAN]
        delete_topic(kafka_admin, a.name)
        a2 = create_topic(kafka_admin, a.name)
        final = _run_to_final(make_spec(process, prefix, kafka_bootstrap, collector.endpoint,
                                        str(tmp_path), {a.name: a2, out.name: out}), collector)
    finally:
        collector.close()
        kafka_admin.delete_topics([a.name, out.name])
    assert final["stop_kind"] == "REFUSAL"
    assert exit_verdict(final["exitcode"]) == ExitVerdict(StopKind.REFUSAL,
                                                          Reason.CHANNEL_IDENTITY_CHANGED)
    assert final["refusal_reason"] == "CHANNEL_IDENTITY_CHANGED"
    assert final["failure_detail"].startswith(
        f"topic '{a.name}' now resolves to {ChannelId(a2.topic_id, 0)} but this process's "
        f"state was built against a previous incarnation (topic id "
        f"{kafka_topic_id(a2.topic_id)} now, topic id {kafka_topic_id(a.topic_id)} then)")
    assert_seed_shape(Reason.CHANNEL_IDENTITY_CHANGED, final["failure_detail"])


@pytest.mark.slow
def test_worker_refuses_a_received_topic_deleted_with_messages_held(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_names: UniqueNames,
    tmp_path: Path,
) -> None:
    a = create_topic(kafka_admin, unique_names.topic("a"))
    b = create_topic(kafka_admin, unique_names.topic("b"))
    out = create_topic(kafka_admin, unique_names.topic("out"))
    process = relay_process("ident", [a.name, b.name], out.name)
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    # A@0 waits for B@5, which never comes: held on A.
    producer.produce(a.name, value=b"x", partition=0,
                     headers=[(CAUSES_HEADER, encode_causes({ChannelId(b.topic_id, 0): 5}))])
    assert producer.flush(30) == 0
    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         topics, status_interval_ms=200)
        first = spawn(spec)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == first.pid
                           and m["held_total"] == 1 and m["commits"] >= 1)
        assert stop_worker(first) == EXIT_CODES[StopKind.CLEAN]
        delete_topic(kafka_admin, a.name)
        final = _run_to_final(spec, collector)  # the spec was resolved before the deletion
    finally:
        collector.close()
        kafka_admin.delete_topics([b.name, out.name])
    assert final["stop_kind"] == "REFUSAL"
    assert exit_verdict(final["exitcode"]) == ExitVerdict(
        StopKind.REFUSAL, Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES)
    assert final["refusal_reason"] == "CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES"
    assert final["failure_detail"].startswith(
        f"1 received message(s) from {ChannelId(a.topic_id, 0)} remain undelivered but the "
        "channel's topic no longer exists; their place in causal order can no longer be "
        f"preserved. The channel was topic '{a.name}' partition 0, topic id "
        f"{kafka_topic_id(a.topic_id)}. "), final["failure_detail"]
    assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, final["failure_detail"])


@pytest.mark.slow
def test_frontier_entries_of_deleted_upstream_topics_are_pruned_from_later_headers(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_names: UniqueNames,
    tmp_path: Path,
) -> None:
    """Four upstream topics named as causes, seen alive at a worker restart, then deleted:
    after the next restart the relayed records' headers no longer carry them (judged by
    an independent read_committed consumer)."""
    r = create_topic(kafka_admin, unique_names.topic("r"))
    out = create_topic(kafka_admin, unique_names.topic("out"))
    upstream = [create_topic(kafka_admin, unique_names.topic(f"u{i}")) for i in range(4)]
    process = relay_process("prune", [r.name], out.name)
    topics = {r.name: r, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, {r.name: r})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for u in upstream:
        producer.produce(u.name, value=b"cause", partition=0)
    causes = {ChannelId(u.topic_id, 0): 0 for u in upstream}
    producer.produce(r.name, value=b"first", partition=0,
                     headers=[(CAUSES_HEADER, encode_causes(causes))])
    assert producer.flush(30) == 0
    collector = StatusCollector()
    spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                     topics, status_interval_ms=200)

    def lifetime(delivered: int) -> None:
        worker = spawn(spec)
        collector.wait_for(lambda m: m["kind"] == "status" and m["pid"] == worker.pid
                           and m["state"] == "RUNNING" and m["delivered"] >= delivered,
                           timeout_s=90)
        assert stop_worker(worker) == EXIT_CODES[StopKind.CLEAN]

    try:
        lifetime(1)  # relays "first": the four upstream channels enter the frontier
        lifetime(0)  # a restart while the four are alive
        for u in upstream:
            delete_topic(kafka_admin, u.name)
        producer.produce(r.name, value=b"second", partition=0)
        assert producer.flush(30) == 0
        lifetime(1)  # a restart after the deletion relays "second"
        records = read_committed(kafka_bootstrap, out.name)
    finally:
        collector.close()
        kafka_admin.delete_topics([r.name, out.name])
    assert [rec.value.rsplit(b":", 1)[-1] for rec in records if rec.value] == \
        [b"first", b"second"], records
    carried = [{ch.topic_id for ch in decode_causes(dict(rec.headers)[CAUSES_HEADER])}
               for rec in records]
    gone = {u.topic_id for u in upstream}
    assert gone <= carried[0], "the first relay carries the four upstream causes"
    assert not gone & carried[1], f"deleted upstream topics still carried: {carried[1]}"


@pytest.mark.slow
def test_a_deletion_noticed_between_assignments_is_judged_on_the_committed_state(
    kafka_bootstrap: str, kafka_admin: AdminClient, unique_names: UniqueNames,
    tmp_path: Path,
) -> None:
    """The running check also runs while the task is between assignments (a deletion can
    revoke the topic's partitions before the check): it rebuilds from the committed state,
    whose identity check refuses the held message's deleted topic by name."""
    from parsley.refusals import ParsleyFailClosedError
    from workers.main import Worker
    from workers.protocol import TaskState

    a = create_topic(kafka_admin, unique_names.topic("a"))
    b = create_topic(kafka_admin, unique_names.topic("b"))
    out = create_topic(kafka_admin, unique_names.topic("out"))
    process = relay_process("ident", [a.name, b.name], out.name)
    topics = {a.name: a, b.name: b, out.name: out}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, topics)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(a.name, value=b"x", partition=0,
                     headers=[(CAUSES_HEADER, encode_causes({ChannelId(b.topic_id, 0): 5}))])
    assert producer.flush(30) == 0
    spec = make_spec(process, prefix, kafka_bootstrap, "tcp://127.0.0.1:1", str(tmp_path),
                     topics, status_interval_ms=200)
    deadline = time.monotonic() + 60
    revoked = False
    worker: Worker

    def should_stop() -> bool:
        nonlocal revoked
        engine = worker.engine
        if (not revoked and worker.state is TaskState.RUNNING and engine is not None
                and engine.held_count() == 1 and worker.txn.commits >= 1):
            worker._on_revoke(worker.consumer, [])  # as a rebalance would
            delete_topic(kafka_admin, a.name)
            worker.next_received_check = 0.0
            revoked = True
        return time.monotonic() > deadline

    worker = Worker(spec, None, should_stop)
    try:
        with pytest.raises(ParsleyFailClosedError) as excinfo:
            worker.run()
        assert worker.state is not TaskState.RUNNING
    finally:
        worker.close(False)
        kafka_admin.delete_topics([b.name, out.name])
    assert revoked
    assert excinfo.value.reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES
    assert excinfo.value.detail.startswith(
        f"1 received message(s) from {ChannelId(a.topic_id, 0)} remain undelivered")
    assert (f"topic '{a.name}' partition 0, topic id {kafka_topic_id(a.topic_id)}"
            in excinfo.value.detail)
