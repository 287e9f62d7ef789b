"""The coordinators' group names and client ids (no broker; docs/operations.md,
"Several coordinators")."""

from __future__ import annotations

from coordinator.config import ParsleyConfig
from coordinator.runtime.coordinators_group import coordinators_group, membership_consumer_config
from coordinator.runtime.peers import CoordinatorRef, coordinator_client_id, parse_client_id


def test_the_coordinators_group_is_per_process_and_not_the_workers_group() -> None:
    assert coordinators_group("shop", "shipper") == "shop-shipper-__parsley.coordinators"


def test_the_membership_consumer_is_cooperative_with_the_workers_session() -> None:
    config = ParsleyConfig("k1:9092", "shop", kafka_properties={
        "consumer.session.timeout.ms": "9000", "producer.linger.ms": "5"})
    cfg = membership_consumer_config(config, "shipper", "parsley-coordinator|h|1|ipc:///x")
    assert cfg["group.id"] == "shop-shipper-__parsley.coordinators"
    assert cfg["partition.assignment.strategy"] == "cooperative-sticky"
    assert cfg["session.timeout.ms"] == 9000
    assert cfg["enable.auto.commit"] is False
    assert cfg["client.id"] == "parsley-coordinator|h|1|ipc:///x"
    assert "group.instance.id" not in cfg and "linger.ms" not in cfg


def test_a_coordinator_client_id_names_host_pid_and_endpoint() -> None:
    ref = CoordinatorRef("node-7", 4242, "tcp://10.0.0.7:7070")
    assert coordinator_client_id(ref) == "parsley-coordinator|node-7|4242|tcp://10.0.0.7:7070"
    assert parse_client_id(coordinator_client_id(ref)) == ref
    assert parse_client_id("parsley-coordinator|h|1|ipc:///a|b") == CoordinatorRef(
        "h", 1, "ipc:///a|b")
    for other in ("console-consumer-1", "parsley-coordinator|h|x|e", "rdkafka"):
        assert parse_client_id(other) is None
