"""Every refusal the worker raises, triggered by a real input on the real broker,
observed in the worker's final message with its reason and detail.

Each case runs one task of a process receiving ``in`` and sending ``out``. The input is a
good record, the bad one, and another good record; the worker must stop with the right kind,
reason and detail, the detail opening with its reason's runbook shape
(``tests/seed_shapes.py``), exit with the protocol's code, and nothing derived from the bad
record or from anything after it may be committed on ``out``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from devtools.kafka_support import QUIET, CreateTopic, UniqueNames
from devtools.worker_support import StatusCollector, bootstrap, make_spec, read_committed, spawn
from parsley import Channel, Effects, Process, Store
from parsley.engine.channel import ChannelId, kafka_topic_id
from parsley.refusals import Reason
from parsley.serdes import JSON, STRING
from parsley.wire import CAUSES_HEADER, encode_causes
from tests.seed_shapes import assert_seed_shape
from workers.protocol import EXIT_CODES, StopKind, exit_code_for, exit_verdict


@dataclass(frozen=True, slots=True)
class EvilSerde:
    """A STRING serde whose serializer adds a reserved header (RESERVED_HEADER_USED)."""

    def serialize(self, value: Any) -> bytes | None:
        return None if value is None else str(value).encode()

    def serialize_with_headers(self, value: Any, headers: list[Any]) -> bytes | None:
        headers.append(("parsley.evil", b"x"))
        return self.serialize(value)

    def deserialize(self, data: bytes | None) -> Any:
        return None if data is None else data.decode()


def make_handler(kind: str, out: Channel[Any, Any], store: Store[Any, Any]) -> Any:
    """A handler that relays, except for the value ``bad``, where it misbehaves as ``kind``."""
    undeclared_store = Store("undeclared", STRING, STRING)
    elsewhere = Channel("elsewhere", STRING, STRING)

    def handle(delivery: Any, state: Any) -> Any:
        value = delivery.value
        if value != "bad" and value != b"bad":
            seen = state.get(store, "n") or 0
            return (Effects.builder().put(store, "n", seen + 1)
                    .send(out, "k", f"relayed {value!r}").build())
        if kind == "null":
            return None
        if kind == "undeclared_channel":
            return Effects.builder().send(elsewhere, "k", "v").build()
        if kind == "undeclared_store":
            state.get(undeclared_store, "k")
        if kind == "latched":
            try:  # noqa: SIM105 - the application swallows the refusal on purpose
                state.get(undeclared_store, "k")
            except Exception:
                pass
            return Effects.none()
        if kind == "reserved_header":
            return Effects.builder().send(out, "k", "v", headers={"parsley.mine": b"1"}).build()
        if kind == "serializer_header":
            return Effects.builder().send(out, "k", "v").build()
        if kind == "unserializable":
            return Effects.builder().put(store, "n", {1, 2}).build()
        if kind == "throws":
            raise RuntimeError("boom")
        if kind == "oversize":
            return Effects.builder().send(out, "k", "x" * 50_000).build()
        return Effects.none()

    return handle


@dataclass
class Case:
    kind: str
    stop: StopKind
    reason: str | None
    # A substring the detail must contain; {in} / {out} / {store} / {in_channel}
    # (the received channel, "<topic id>-0") substituted.
    detail: str
    in_value_serde: Any = STRING
    out_value_serde: Any = STRING
    out_config: dict[str, str] = field(default_factory=dict)
    bad_value: bytes = b"bad"
    bad_headers: Callable[[Any], list[tuple[str, bytes]]] | None = None
    spec: dict[str, Any] = field(default_factory=dict)


def _bad_causes(_topics: Any) -> list[tuple[str, bytes]]:
    return [(CAUSES_HEADER, b"\x02\x00")]  # unknown version


def _big_causes(_topics: Any) -> list[tuple[str, bytes]]:
    # Four topics' first partitions: 4 * 26 + 2 = 106 bytes, over a 64-byte budget.
    return [(CAUSES_HEADER, encode_causes({ChannelId(uuid.uuid4(), 0): 0 for _ in range(4)}))]


CASES = [
    Case("null", StopKind.REFUSAL, "HANDLER_RETURNED_NULL_EFFECTS",
         "handler for {in} returned null effects; return Effects.none()"),
    Case("undeclared_channel", StopKind.REFUSAL, "EMISSION_TO_UNDECLARED_CHANNEL",
         "emitted to undeclared channel elsewhere"),
    Case("undeclared_store", StopKind.REFUSAL, "STATE_ACCESS_TO_UNDECLARED_STORE",
         "read targets a store not declared by stores(...): undeclared"),
    Case("latched", StopKind.REFUSAL, "STATE_ACCESS_TO_UNDECLARED_STORE",
         "read targets a store not declared by stores(...): undeclared"),
    Case("reserved_header", StopKind.REFUSAL, "RESERVED_HEADER_USED",
         "serializer for {out} wrote reserved header 'parsley.mine'"),
    Case("serializer_header", StopKind.REFUSAL, "RESERVED_HEADER_USED",
         "serializer for {out} wrote reserved header 'parsley.evil'",
         out_value_serde=EvilSerde()),
    Case("undecodable", StopKind.REFUSAL, "APPLICATION_PAYLOAD_UNDECODABLE",
         "{in}@1 value could not be decoded by the declared serde",
         in_value_serde=JSON, bad_value=b"\xff not json"),
    Case("unserializable", StopKind.REFUSAL, "APPLICATION_PAYLOAD_UNSERIALIZABLE",
         "{store} payload could not be serialized by the declared serde"),
    Case("throws", StopKind.APPLICATION, None,
         "handler for {in} failed at task 0, {in}-0@1: RuntimeError: boom"),
    # "<channel>@<position>: <detail>", then the channel as the Kafka tools need it
    # (docs/failing-closed.md, "Detail shapes").
    Case("undecodable_metadata", StopKind.REFUSAL, "UNDECODABLE_METADATA",
         "{in_uuid}-0@1: unknown causes format version 2 (topic '{in}' partition 0 offset 1, "
         "topic id {in_id}). Find and fix the producer",
         bad_value=b"fine", bad_headers=_bad_causes),
    Case("budget", StopKind.REFUSAL, "METADATA_BUDGET_EXCEEDED",
         "{in_uuid}-0@1 carries 106 bytes of causal metadata; the configured budget is 64 "
         "bytes (topic '{in}' partition 0 offset 1, topic id {in_id})",
         bad_value=b"fine", bad_headers=_big_causes, spec={"metadata_budget_bytes": 64}),
    Case("oversize", StopKind.REFUSAL, "SUBSTRATE_MISCONFIGURED",
         "a record exceeded a size limit", out_config={"max.message.bytes": "10000"}),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_refusal_from_a_real_input_stops_the_worker_with_reason_and_detail(
    case: Case, kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    inp = create_topic(unique_names.topic("in"))
    out = create_topic(unique_names.topic("out"), config=case.out_config)
    store = Store("counts", STRING, JSON)
    out_channel = Channel(out.name, STRING, case.out_value_serde)
    process = (Process("p")
               .receives(Channel(inp.name, STRING, case.in_value_serde),
                         make_handler(case.kind, out_channel, store))
               .sends(out_channel).stores(store))
    topics = {inp.name: inp, out.name: out, "in": inp}
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, {inp.name: inp})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    good = b'"ok"' if case.in_value_serde is JSON else b"ok"
    producer.produce(inp.name, key=b"k", value=good, partition=0)
    headers = case.bad_headers(topics) if case.bad_headers else None
    producer.produce(inp.name, key=b"k", value=case.bad_value, partition=0, headers=headers)
    producer.produce(inp.name, key=b"k", value=good, partition=0)
    assert producer.flush(30) == 0

    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         {inp.name: inp, out.name: out}, **case.spec)
        worker = spawn(spec)
        final = collector.final(worker.pid, timeout_s=90)
        worker.join(30)
    finally:
        collector.close()
    detail = case.detail.format(**{"in": inp.name, "out": out.name, "store": "counts",
                                   "in_id": kafka_topic_id(inp.topic_id),
                                   "in_uuid": inp.topic_id})
    assert final["stop_kind"] == case.stop.value, final
    assert final["refusal_reason"] == case.reason, final
    assert detail in (final["failure_detail"] or ""), final
    if case.reason is not None:  # opens with the reason's runbook shape
        assert_seed_shape(Reason[case.reason], final["failure_detail"])
    # The exit code alone names the stop kind and the refusal's reason (the final
    # report may be lost).
    verdict = exit_verdict(worker.exitcode)
    assert verdict.kind is case.stop, worker.exitcode
    assert (verdict.reason.name if verdict.reason else None) == case.reason, worker.exitcode
    if case.reason is None:
        assert worker.exitcode == EXIT_CODES[case.stop]
    # The open transaction was aborted: nothing derived from the bad record or after it.
    relayed = [r.value for r in read_committed(kafka_bootstrap, out.name)]
    assert relayed in ([], [b"relayed 'ok'"]), relayed


@pytest.mark.slow
def test_positions_discarded_unread_when_retention_passed_the_committed_position(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: CreateTopic,
    unique_names: UniqueNames, tmp_path: Path,
) -> None:
    inp = create_topic(unique_names.topic("in"))
    out = create_topic(unique_names.topic("out"))
    store = Store("counts", STRING, JSON)
    out_channel = Channel(out.name, STRING, STRING)
    process = (Process("p").receives(Channel(inp.name, STRING, STRING),
                                     make_handler("none", out_channel, store))
               .sends(out_channel).stores(store))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    for i in range(5):
        producer.produce(inp.name, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    prefix = unique_names.group("app")
    bootstrap(kafka_admin, prefix, process, {inp.name: inp})  # committed position 0
    futures = kafka_admin.delete_records([TopicPartition(inp.name, 0, 3)], request_timeout=30)
    for f in futures.values():
        f.result(timeout=30)

    collector = StatusCollector()
    try:
        spec = make_spec(process, prefix, kafka_bootstrap, collector.endpoint, str(tmp_path),
                         {inp.name: inp, out.name: out})
        worker = spawn(spec)
        final = collector.final(worker.pid, timeout_s=90)
        worker.join(30)
    finally:
        collector.close()
    assert final["stop_kind"] == "REFUSAL", final
    assert final["refusal_reason"] == "POSITIONS_DISCARDED_UNREAD"
    assert (f"{inp.name}-0 committed read position 0 is below the log start 3"
            in final["failure_detail"])
    assert_seed_shape(Reason.POSITIONS_DISCARDED_UNREAD, final["failure_detail"])
    assert worker.exitcode == exit_code_for(StopKind.REFUSAL, Reason.POSITIONS_DISCARDED_UNREAD)
    assert exit_verdict(worker.exitcode).reason is Reason.POSITIONS_DISCARDED_UNREAD
    assert read_committed(kafka_bootstrap, out.name) == []
