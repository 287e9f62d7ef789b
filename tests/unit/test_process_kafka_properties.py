"""Per-process client properties: the merge, and the refusals naming property and process."""

from __future__ import annotations

import pytest

from coordinator.config import ParsleyConfig
from coordinator.runtime.client_check import check_process_clients
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES


def _handle(delivery: object, state: object) -> Effects:
    return Effects.builder().build()


def _process(name: str, **props: object) -> Process:
    return Process(name, kafka_properties={k.replace("_", "."): v for k, v in props.items()}) \
        .receives(Channel("t", BYTES, BYTES), _handle)


def test_the_file_table_over_the_declaration_over_the_coordinator() -> None:
    config = ParsleyConfig("h:1", "p", kafka_properties={"linger.ms": 5, "client.rack": "a"},
                           process_kafka_properties={"slow": {"linger.ms": 7}})
    slow = _process("slow", linger_ms=6, consumer_max_partition_fetch_bytes=1024)
    assert config.kafka_properties_for(slow) == {
        "linger.ms": 7, "client.rack": "a", "consumer.max.partition.fetch.bytes": 1024}
    assert config.kafka_properties_for(_process("other")) == {"linger.ms": 5,
                                                              "client.rack": "a"}
    assert slow.with_kafka_properties({"a.b": 1}).kafka_properties["a.b"] == 1


@pytest.mark.parametrize("key", ["isolation.level", "consumer.enable.auto.commit",
                                 "producer.transactional.id", "group.id"])
def test_an_owned_property_is_refused_naming_it_and_the_process(key: str) -> None:
    config = ParsleyConfig("h:1", "p")
    with pytest.raises(ValueError, match=f"kafka property '{key}' of process 'slow'"):
        config.check_processes([Process("slow", kafka_properties={key: "x"})])
    with pytest.raises(ValueError, match=f"kafka property '{key}' of process 'slow' "
                                         r"\(process_kafka_properties\)"):
        ParsleyConfig("h:1", "p", process_kafka_properties={"slow": {key: "x"}})


def test_a_table_for_a_process_not_started_is_refused() -> None:
    config = ParsleyConfig("h:1", "p", process_kafka_properties={"slwo": {"linger.ms": 1}})
    with pytest.raises(ValueError, match=r"names \['slwo'\], which this start does not run"):
        config.check_processes([_process("slow")])


def test_a_property_librdkafka_refuses_is_named_with_the_process_before_the_start() -> None:
    config = ParsleyConfig("h:1", "p")
    with pytest.raises(ValueError, match=r"kafka properties of process 'slow' were refused by "
                                         r"librdkafka \(its consumer: .*fetch.max.bytes"):
        check_process_clients(config, [_process("slow", consumer_fetch_max_bytes=1024)])
    check_process_clients(config, [_process("slow", consumer_max_partition_fetch_bytes=1024)])
