"""The coordinator's bootstrap against the real broker: positions, changelogs, each start refusal.

Each refusal is triggered for real: the
ordering changelog is deleted with offsets kept, partitions are added to the
widest topic, a received topic is deleted and recreated, a channel with held
messages is dropped from the declaration, a corrupt record is written to the
changelog. Ordering state is written into the changelog with the state codec,
as a worker's committed step would leave it.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Iterable

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions

from coordinator.bootstrap import (
    BOOTSTRAP_METADATA,
    StartError,
    StartRetryableError,
    bootstrap,
    resolve_topics,
)
from coordinator.config import ParsleyConfig
from devtools.kafka_support import QUIET, delete_topic, describe_topic
from parsley.declarations import LATEST, Channel, Effects, Process, Store, ordering_changelog
from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.serdes import BYTES
from tests.seed_shapes import assert_seed_shape
from workers.admin import describe_topic as describe_changelog
from workers.changelog import ensure_changelog_topic


def _handler(delivery, state):  # type: ignore[no-untyped-def]
    return Effects.none()


def _ch(name: str) -> Channel:  # type: ignore[type-arg]
    return Channel(name, BYTES, BYTES)


def _config(bootstrap_servers: str, prefix: str, tmp_path) -> ParsleyConfig:  # type: ignore[no-untyped-def]
    return ParsleyConfig(bootstrap_servers, prefix, state_dir=str(tmp_path))


def _prefix() -> str:
    return f"bt-{uuid.uuid4().hex[:10]}"


def _write(bootstrap_servers: str, topic: str, partition: int,
           records: Iterable[tuple[bytes, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap_servers, **QUIET})
    for key, value in records:
        producer.produce(topic, key=key, value=value, partition=partition)
    assert producer.flush(30) == 0, "changelog records not delivered"


def _produce(bootstrap_servers: str, topic: str, partition: int, n: int) -> None:
    _write(bootstrap_servers, topic, partition, [(b"k%d" % i, b"v") for i in range(n)])


def _committed(admin: AdminClient, group: str, tps: list[tuple[str, int]]) -> dict:  # type: ignore[type-arg]
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in tps])]
    res = admin.list_consumer_group_offsets(req, request_timeout=30)[group].result()
    return {(tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in res.topic_partitions}


def _external_commit(bootstrap_servers: str, group: str, offsets: dict) -> None:  # type: ignore[type-arg]
    consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": group, **QUIET})
    try:
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                        asynchronous=False)
    finally:
        consumer.close()


def _state_rows(names: dict[str, uuid.UUID], fed: dict[ChannelId, int],
                held: Iterable[tuple[ChannelId, int]] = ()) -> list[tuple[bytes, bytes]]:
    rows = [(sc.VERSION_KEY, sc.VERSION_VALUE)]
    rows += [(sc.name_key(n), sc.encode_binding(i)) for n, i in names.items()]
    rows += [(sc.fed_key(ch), sc.encode_long(v)) for ch, v in fed.items()]
    blob = sc.encode_held(sc.HeldMessage(timestamp_ms=1, key=b"k", value=b"v", headers=(),
                                         causes=()))
    rows += [(sc.held_key(ch, pos), blob) for ch, pos in held]
    return rows


def _refusal(excinfo: pytest.ExceptionInfo[ParsleyFailClosedError], reason: Reason) -> str:
    """The refusal's detail, once its reason is checked and its opening is the reason's
    runbook shape (``tests/seed_shapes.py``)."""
    assert excinfo.value.reason is reason, f"expected {reason}, got {excinfo.value}"
    assert_seed_shape(reason, excinfo.value.detail)
    return excinfo.value.detail


@pytest.mark.slow
def test_first_start_creates_changelogs_and_precommits_declared_positions(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=2)
    b = create_topic(partitions=1)
    out = create_topic(partitions=1)
    _produce(kafka_bootstrap, a.name, 0, 3)
    _produce(kafka_bootstrap, b.name, 0, 4)
    prefix = _prefix()
    proc = (Process("relay").receives(_ch(a.name), _handler)
            .receives(_ch(b.name).starting_at(LATEST), _handler)
            .sends(_ch(out.name)).stores(Store("seen", BYTES, BYTES)))
    plans = bootstrap(_config(kafka_bootstrap, prefix, tmp_path), [proc])
    plan = plans["relay"]
    assert plan.task_count == 2
    assert not plan.prior_state
    assert plan.topic_ids == {a.name: a.topic_id, b.name: b.topic_id, out.name: out.topic_id}
    assert plan.start_positions == {(a.name, 0): 0, (a.name, 1): 0, (b.name, 0): 4}
    assert plan.precommitted == plan.start_positions
    changelog = describe_changelog(kafka_admin, ordering_changelog(prefix, "relay"))
    assert changelog is not None and changelog.partitions == 2
    assert changelog.cleanup_policy == "compact"
    store = describe_changelog(kafka_admin, f"{prefix}-relay-seen-changelog")
    assert store is not None and store.partitions == 2 and store.cleanup_policy == "compact"
    committed = _committed(kafka_admin, f"{prefix}-relay", [(a.name, 0), (a.name, 1), (b.name, 0)])
    assert committed == {(a.name, 0): (0, BOOTSTRAP_METADATA), (a.name, 1): (0, BOOTSTRAP_METADATA),
                         (b.name, 0): (4, BOOTSTRAP_METADATA)}
    # A second start finds every position committed and commits nothing.
    again = bootstrap(_config(kafka_bootstrap, prefix, tmp_path), [proc])["relay"]
    assert again.precommitted == {}
    assert again.start_positions == plan.start_positions


def test_prior_state_positions_covered_plus_one_named_zero_unnamed_earliest(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=2)
    b = create_topic(partitions=1)
    gone = create_topic(partitions=1)
    for p in (0, 1):
        _produce(kafka_bootstrap, a.name, p, 8)
    _produce(kafka_bootstrap, b.name, 0, 5)
    _produce(kafka_bootstrap, gone.name, 0, 2)
    # Every log starts above 0, so "earliest" and "0" give different answers.
    for cut in (TopicPartition(b.name, 0, 3), TopicPartition(gone.name, 0, 1),
                TopicPartition(a.name, 1, 2)):
        kafka_admin.delete_records([cut])[cut].result()
    prefix = _prefix()
    changelog = ordering_changelog(prefix, "p")
    ensure_changelog_topic(kafka_admin, changelog, 2)
    # Task 0 covered a[0] up to 4 and recorded `gone` fed to its end; task 1 named a but
    # never covered a[1]; nothing names b.
    _write(kafka_bootstrap, changelog, 0, _state_rows(
        {a.name: a.topic_id, gone.name: gone.topic_id},
        {ChannelId(a.topic_id, 0): 4, ChannelId(gone.topic_id, 0): FED_TO_END}))
    _write(kafka_bootstrap, changelog, 1, _state_rows({a.name: a.topic_id}, {}))
    proc = (Process("p").receives(_ch(a.name), _handler)
            .receives(_ch(b.name).starting_at(LATEST), _handler)
            .receives(_ch(gone.name), _handler))
    progress: list = []  # type: ignore[type-arg]
    plan = bootstrap(_config(kafka_bootstrap, prefix, tmp_path), [proc],
                     on_progress=progress.append)["p"]
    assert plan.prior_state
    done = {(p.partition, p.records_read) for p in progress if p.done}
    assert done == {(0, 5), (1, 2)}, "the changelog is read end to end, with progress"
    assert plan.start_positions == {
        (a.name, 0): 5,  # covered + 1
        (a.name, 1): 0,  # named, never covered: 0, not its earliest (2)
        (b.name, 0): 3,  # never named, prior state: earliest (not the declared LATEST)
        (gone.name, 0): 1,  # fed-to-end sentinel: earliest, never sentinel + 1
    }


@pytest.mark.slow
def test_ordering_state_lost_when_changelog_deleted_with_offsets_kept(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    _produce(kafka_bootstrap, a.name, 0, 3)
    prefix = _prefix()
    config = _config(kafka_bootstrap, prefix, tmp_path)
    proc = Process("p").receives(_ch(a.name), _handler)
    bootstrap(config, [proc])
    changelog = ordering_changelog(prefix, "p")
    # A committed step: ordering state and a read position (no bootstrap metadata).
    _write(kafka_bootstrap, changelog, 0,
           _state_rows({a.name: a.topic_id}, {ChannelId(a.topic_id, 0): 1}))
    _external_commit(kafka_bootstrap, f"{prefix}-p", {(a.name, 0): 2})
    # The reset done in the wrong order: changelog deleted, offsets kept.
    delete_topic(kafka_admin, changelog)
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(config, [proc])
    detail = _refusal(excinfo, Reason.ORDERING_STATE_LOST)
    assert detail.startswith(
        f"committed read positions exist for {a.name}-0, committed outside parsley (external "
        "tooling, or pre-seeded offsets), but this process's ordering-store changelog does not "
        f"exist (committed offset 2, metadata none; ordering changelog {changelog})"), detail
    # Nothing was created by the refused start.
    assert describe_changelog(kafka_admin, changelog) is None


def test_ordering_state_lost_on_preseeded_offsets_over_an_empty_partition(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    ensure_changelog_topic(kafka_admin, ordering_changelog(prefix, "p"), 1)
    _external_commit(kafka_bootstrap, f"{prefix}-p", {(a.name, 0): 0})
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(_config(kafka_bootstrap, prefix, tmp_path),
                  [Process("p").receives(_ch(a.name), _handler)])
    detail = _refusal(excinfo, Reason.ORDERING_STATE_LOST)
    assert "partition 0 of this process's ordering-store changelog" in detail
    assert "outside parsley" in detail


@pytest.mark.slow
def test_task_width_changed_when_partitions_added_to_widest_topic(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=2)
    b = create_topic(partitions=1)
    prefix = _prefix()
    config = _config(kafka_bootstrap, prefix, tmp_path)
    proc = Process("p").receives(_ch(a.name), _handler).receives(_ch(b.name), _handler)
    assert bootstrap(config, [proc])["p"].task_count == 2
    kafka_admin.create_partitions([NewPartitions(a.name, 3)])[a.name].result()
    deadline = time.monotonic() + 30
    while describe_topic(kafka_admin, a.name).partitions != 3:
        assert time.monotonic() < deadline, "added partitions never described"
        time.sleep(0.2)
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(config, [proc])
    detail = _refusal(excinfo, Reason.TASK_WIDTH_CHANGED)
    assert detail.startswith("this process's ordering state was built for 2 task(s) but the "
                             "declaration now induces 3")


@pytest.mark.slow
def test_channel_identity_changed_when_received_topic_recreated(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    config = _config(kafka_bootstrap, prefix, tmp_path)
    proc = Process("p").receives(_ch(a.name), _handler)
    bootstrap(config, [proc])
    _write(kafka_bootstrap, ordering_changelog(prefix, "p"), 0,
           _state_rows({a.name: a.topic_id}, {ChannelId(a.topic_id, 0): 0}))
    delete_topic(kafka_admin, a.name)
    again = create_topic(a.name, partitions=1)
    assert again.topic_id != a.topic_id
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(config, [proc])
    detail = _refusal(excinfo, Reason.CHANNEL_IDENTITY_CHANGED)
    assert detail.startswith(f"topics [{a.name}] now resolve to different identities than "
                             "this process's state was built against (process 'p')")


@pytest.mark.slow
def test_channel_removed_with_held_messages(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    b = create_topic(partitions=1)
    prefix = _prefix()
    config = _config(kafka_bootstrap, prefix, tmp_path)
    both = Process("p").receives(_ch(a.name), _handler).receives(_ch(b.name), _handler)
    bootstrap(config, [both])
    held_on = ChannelId(b.topic_id, 0)
    _write(kafka_bootstrap, ordering_changelog(prefix, "p"), 0, _state_rows(
        {a.name: a.topic_id, b.name: b.topic_id}, {held_on: 2}, held=[(held_on, 1), (held_on, 2)]))
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(config, [Process("p").receives(_ch(a.name), _handler)])
    detail = _refusal(excinfo, Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES)
    # Topic ids as kafka-topics --describe prints them (Kafka's base64 Uuid form).
    shown = base64.urlsafe_b64encode(b.topic_id.bytes).decode().rstrip("=")
    assert detail.startswith(f"received messages remain undelivered on [{shown}/0], which "
                             "the new declaration no longer receives (process 'p')")
    # Restoring the declaration lets the start through.
    assert bootstrap(config, [both])["p"].prior_state


@pytest.mark.parametrize(
    ("rows", "diagnosis"),
    [
        ([(sc.VERSION_KEY, sc.VERSION_VALUE), (b"f\x00\x01", b"\x00" * 8)],
         "corrupt ordering key: length 3"),
        ([(sc.VERSION_KEY, b"\x02")], "ordering store format not understood by this build"),
        ([(b"n" + b"t", b"\x00" * 20)], "ordering state present without its format version entry"),
    ],
    ids=["corrupt-key", "unknown-version", "lost-head"],
)
def test_unknown_ordering_state_format_on_a_corrupt_record(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path,  # type: ignore[no-untyped-def]
    rows: list[tuple[bytes, bytes]], diagnosis: str,
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    changelog = ordering_changelog(prefix, "p")
    ensure_changelog_topic(kafka_admin, changelog, 1)
    _write(kafka_bootstrap, changelog, 0, rows)
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(_config(kafka_bootstrap, prefix, tmp_path),
                  [Process("p").receives(_ch(a.name), _handler)])
    detail = _refusal(excinfo, Reason.UNKNOWN_ORDERING_STATE_FORMAT)
    assert detail.startswith(diagnosis), detail
    assert f"(read from {changelog}[0] at start)" in detail, detail


def test_corrupt_held_blob_is_refused(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    changelog = ordering_changelog(prefix, "p")
    ensure_changelog_topic(kafka_admin, changelog, 1)
    ch = ChannelId(a.topic_id, 0)
    _write(kafka_bootstrap, changelog, 0, [(sc.VERSION_KEY, sc.VERSION_VALUE),
                                          (sc.held_key(ch, 0), b"\x01\x00")])
    with pytest.raises(ParsleyFailClosedError) as excinfo:
        bootstrap(_config(kafka_bootstrap, prefix, tmp_path),
                  [Process("p").receives(_ch(a.name), _handler)])
    assert "corrupt held blob" in _refusal(excinfo, Reason.UNKNOWN_ORDERING_STATE_FORMAT)


def test_missing_topic_is_a_plain_error_after_three_answers(
    kafka_bootstrap: str, kafka_admin: AdminClient, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    name = f"missing-{uuid.uuid4().hex[:8]}"
    sleeps: list[float] = []
    with pytest.raises(StartError) as excinfo:
        resolve_topics(kafka_admin, [name], sleep=sleeps.append)
    assert sleeps == [0.5, 0.5], "unknown must take three answers 500 ms apart"
    assert name in str(excinfo.value) and "do not exist" in str(excinfo.value)
    with pytest.raises(StartError):
        bootstrap(_config(kafka_bootstrap, _prefix(), tmp_path),
                  [Process("p").receives(_ch(name), _handler)], sleep=lambda s: None)


def test_wrong_declaration_is_value_error(kafka_bootstrap: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = Process("p").receives(_ch("x"), _handler)
    with pytest.raises(ValueError, match="declared twice"):
        bootstrap(_config(kafka_bootstrap, _prefix(), tmp_path), [proc, proc])


@pytest.mark.slow
def test_a_member_with_our_own_instance_id_that_stays_is_a_retryable_start_error(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    group = f"{prefix}-p"
    ours = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group,
                     "group.instance.id": f"{group}-task-000", "client.id": f"{group}-task-000",
                     "auto.offset.reset": "earliest", **QUIET})
    try:
        ours.subscribe([a.name])
        deadline = time.monotonic() + 30
        while not ours.assignment():
            assert time.monotonic() < deadline, "the static member never joined"
            ours.poll(0.2)
        with pytest.raises(StartRetryableError) as excinfo:
            bootstrap(_config(kafka_bootstrap, prefix, tmp_path),
                      [Process("p").receives(_ch(a.name), _handler)], group_window_s=1.0)
        detail = str(excinfo.value)
        assert f"group.instance.id {group}-task-000 (an instance id of this process's " \
               "workers)" in detail, detail
        assert "another coordinator" not in detail and detail.endswith("Retry this start.")
    finally:
        ours.close()


@pytest.mark.slow
def test_foreign_group_member_is_substrate_misconfigured(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic, tmp_path  # type: ignore[no-untyped-def]
) -> None:
    a = create_topic(partitions=1)
    prefix = _prefix()
    foreign = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{prefix}-p",
                        "client.id": "foreign-consumer", "auto.offset.reset": "earliest", **QUIET})
    try:
        foreign.subscribe([a.name])
        deadline = time.monotonic() + 30
        while not foreign.assignment():
            assert time.monotonic() < deadline, "foreign consumer never joined"
            foreign.poll(0.2)
        with pytest.raises(ParsleyFailClosedError) as excinfo:
            bootstrap(_config(kafka_bootstrap, prefix, tmp_path),
                      [Process("p").receives(_ch(a.name), _handler)], group_window_s=1.0)
        detail = _refusal(excinfo, Reason.SUBSTRATE_MISCONFIGURED)
        assert detail.startswith("the group join has been refused as a protocol conflict for "
                                 "longer than 1 s, "), detail
        assert "foreign-consumer" in detail
    finally:
        foreign.close()
