"""parsley.testing.ParsleyTestDriver: declared processes over in-memory topics.

Each test drives real declarations through the driver and checks what a broker run
would show: causal holds and their release across topics, store writes, refusals
with the runtime's reason and detail (the engine's and the handler frame's own
text), handler failures, partition routing by Kafka's murmur2, commit-marker
offsets, and determinism.
"""

from __future__ import annotations

from typing import Any

import pytest

from parsley import (
    Channel,
    Delivery,
    Effects,
    ParsleyFailClosedError,
    Process,
    Reason,
    State,
    Store,
)
from parsley.engine.channel import kafka_topic_id
from parsley.frame import APPLICATION_REMEDY
from parsley.serdes import JSON, STRING
from parsley.status import Blocker
from parsley.testing import HandlerFailure, ParsleyTestDriver, murmur2, partition_for
from tests.seed_shapes import assert_seed_shape

IN = Channel("in", STRING, JSON)
DERIVED = Channel("derived", STRING, JSON)
OUT = Channel("out", STRING, STRING)
SEEN = Store("seen", STRING, JSON)


def _relay(delivery: Delivery[Any, Any], state: State) -> Effects:
    """Derive one event from each input, same key."""
    return Effects.builder().send(DERIVED, delivery.key, {"from": delivery.value["n"]}).build()


def _remember(delivery: Delivery[Any, Any], state: State) -> Effects:
    return Effects.builder().put(SEEN, str(delivery.value["n"]), delivery.value).build()


def _check(delivery: Delivery[Any, Any], state: State) -> Effects:
    """Answer each derived event; 'VIOLATION' if its input was not delivered first."""
    n = str(delivery.value["from"])
    verdict = "ok" if state.get(SEEN, n) is not None else "VIOLATION"
    return Effects.builder().send(OUT, delivery.key, f"{verdict} {n}").build()


def _pipeline() -> list[Process]:
    relay = Process("relay").receives(IN, _relay).sends(DERIVED)
    sink = (Process("sink").receives(IN, _remember).receives(DERIVED, _check)
            .sends(OUT).stores(SEEN))
    return [relay, sink]


# -- causal hold and release -----------------------------------------------------------


def test_a_derived_event_is_held_until_its_cause_is_delivered_then_released() -> None:
    driver = ParsleyTestDriver(_pipeline())
    driver.pause("in", process="sink")
    for n in range(3):
        driver.pipe("in", {"n": n}, key="k")

    derived = driver.read("derived")
    assert [r.value for r in derived] == [{"from": 0}, {"from": 1}, {"from": 2}]
    assert [r.sender for r in derived] == ["relay"] * 3
    # each carries the input it came from: the relay's frontier after that delivery
    assert [r.causes for r in derived] == [{("in", 0): n} for n in range(3)]
    assert all(r.causes_header is not None for r in derived)

    held = driver.held("sink")
    assert [(h.topic, h.offset, h.head) for h in held] == [
        ("derived", derived[0].offset, True),
        ("derived", derived[1].offset, False),
        ("derived", derived[2].offset, False),
    ]
    assert held[0].blockers == (Blocker("in", 0, 0, None),)
    assert held[0].record.value == {"from": 0}
    diagnosis = driver.diagnose("sink")
    assert diagnosis.held_count == 3
    assert driver.read("out") == []

    assert driver.resume("in", process="sink") == 6
    assert [r.value for r in driver.read("out")] == ["ok 0", "ok 1", "ok 2"]
    assert driver.held("sink") == []
    # what sink sent names both the derived event and, through it, the input
    assert driver.read("out")[2].causes == {("in", 0): 2, ("derived", 0): derived[2].offset}


def test_a_cause_on_a_position_not_yet_written_holds_until_it_is_delivered() -> None:
    driver = ParsleyTestDriver(_pipeline())
    driver.pipe("in", {"n": 0}, key="k")
    # an upstream producer stamped a cause on in-0@3, which does not exist yet
    stamped = driver.causes_header({("in", 0): 3})
    piped = driver.pipe("derived", {"from": 3}, key="k", headers=[("parsley.causes", stamped)])
    assert piped.offset == 2  # after relay's send (0) and its transaction's marker (1)

    [head] = [h for h in driver.held("sink") if h.head]
    assert (head.topic, head.offset) == ("derived", 2)
    assert head.blockers == (Blocker("in", 0, 3, 0),)
    for n in (1, 2):
        driver.pipe("in", {"n": n}, key="k")
        # relay's event for input n queues behind the held head (FIFO per channel)
        assert [(h.offset, h.head) for h in driver.held("sink")] == [
            (2, True), *((3 + 2 * i, False) for i in range(n))]
    driver.pipe("in", {"n": 3}, key="k")
    assert driver.held("sink") == []
    assert [r.value for r in driver.read("out")] == ["ok 0", "ok 3", "ok 1", "ok 2", "ok 3"]


# -- stores -------------------------------------------------------------------------------


def test_store_writes_and_deletes_are_visible_per_task_and_to_later_deliveries() -> None:
    counts: Store[str, int] = Store("counts", STRING, JSON)
    tally = Channel("tally.in", STRING, STRING)

    def count(delivery: Delivery[Any, Any], state: State) -> Effects:
        if delivery.value == "forget":
            return Effects.builder().delete(counts, delivery.key).build()
        seen = state.get(counts, delivery.key) or 0
        return Effects.builder().put(counts, delivery.key, seen + 1).build()

    driver = ParsleyTestDriver(Process("tally").receives(tally, count).stores(counts),
                               partitions={"tally.in": 2})
    keys = ["a", "b", "c", "d"]
    for key in keys:
        for _ in range(int(key, 16) - 9):  # a once, b twice, ...
            driver.pipe("tally.in", "x", key=key)
    assert driver.store("tally", "counts") == {"a": 1, "b": 2, "c": 3, "d": 4}
    for task in (0, 1):
        assert driver.store("tally", counts, task=task) == {
            k: int(k, 16) - 9 for k in keys if partition_for(k.encode(), 2) == task}
    driver.pipe("tally.in", "forget", key="b")
    assert driver.store("tally", "counts") == {"a": 1, "c": 3, "d": 4}


# -- refusals -------------------------------------------------------------------------------


def test_an_undecodable_causes_header_is_refused_with_the_engines_reason_and_detail() -> None:
    driver = ParsleyTestDriver(_pipeline())
    with pytest.raises(ParsleyFailClosedError) as info:
        driver.pipe("derived", {"from": 0}, key="k", headers=[("parsley.causes", b"\x01")])
    refusal = info.value
    assert refusal.reason is Reason.UNDECODABLE_METADATA
    topic_id = driver.topic_id("derived")
    assert refusal.detail == (
        f"{topic_id}-0@0: truncated causes header (topic 'derived' partition 0 offset 0, "
        f"topic id {kafka_topic_id(topic_id)}). Find and fix the producer that stamped the "
        "header; no restart passes the record (docs/runbooks.md, UNDECODABLE_METADATA)")
    assert_seed_shape(Reason.UNDECODABLE_METADATA, refusal.detail)
    assert driver.stopped("sink") is refusal
    assert driver.stopped("relay") is None
    # the stopped process takes nothing more; the others run on
    driver.pipe("in", {"n": 1}, key="k")
    assert [r.value for r in driver.read("derived")] == [{"from": 0}, {"from": 1}]
    assert driver.read("out") == []
    with pytest.raises(ParsleyFailClosedError) as again:
        driver.restart("sink")  # refuses again on restart, as the runtime does
    assert (again.value.reason, again.value.detail) == (refusal.reason, refusal.detail)


def test_an_unkeyed_partition_mistake_is_refused_as_cross_partition_cause() -> None:
    from examples.quickstart import PROCESSES

    driver = ParsleyTestDriver(PROCESSES, partitions={"shop.orders": 2, "shop.payments": 2})
    assert partition_for(b"customer-1", 2) == 1
    with pytest.raises(ParsleyFailClosedError) as info:
        # the order put on partition 0, but its payment keyed to partition 1
        driver.pipe("shop.orders", {"id": "o1", "amount": 10}, key="customer-1", partition=0)
    refusal = info.value
    assert refusal.reason is Reason.CROSS_PARTITION_CAUSE
    orders = kafka_topic_id(driver.topic_id("shop.orders"))
    payments = kafka_topic_id(driver.topic_id("shop.payments"))
    assert refusal.detail.startswith(
        f"the record at topic 'shop.payments' partition 1 offset 0 (topic id {payments}) "
        f"(key 'customer-1') names a cause at topic 'shop.orders' partition 0 offset 0 "
        f"(topic id {orders}), a partition another task of this process reads")
    assert refusal.detail.endswith("(docs/runbooks.md, CROSS_PARTITION_CAUSE)")
    assert driver.stopped("ledger") is refusal
    assert driver.read("shop.ledger") == []


def test_warn_carries_a_cross_partition_cause_unenforced_and_records_the_warning() -> None:
    from examples.quickstart import PROCESSES

    driver = ParsleyTestDriver(PROCESSES, partitions={"shop.orders": 2, "shop.payments": 2},
                               cross_partition_causes="warn")
    driver.pipe("shop.orders", {"id": "o1", "amount": 10}, key="customer-1", partition=0)
    # unenforced: ledger's task 1 handles the payment without the order task 0 received
    assert [r.value for r in driver.read("shop.ledger")] == ["VIOLATION o1"]
    [(process, task, text)] = driver.warnings
    assert (process, task) == ("ledger", 1)
    assert "the cause is carried unenforced" in text


def test_a_frame_refusal_aborts_the_whole_step() -> None:
    other = Channel("other", STRING, STRING)

    def strays(delivery: Delivery[Any, Any], state: State) -> Effects:
        return (Effects.builder().put(SEEN, "k", {"n": 1}).send(OUT, "k", "fine")
                .send(other, "k", "nowhere").build())

    driver = ParsleyTestDriver([Process("p").receives(IN, strays).sends(OUT).stores(SEEN),
                                Process("q").receives(other, _relay)])
    with pytest.raises(ParsleyFailClosedError) as info:
        driver.pipe("in", {"n": 1}, key="k")
    assert info.value.reason is Reason.EMISSION_TO_UNDECLARED_CHANNEL
    assert info.value.detail == "p emitted to undeclared channel other" + APPLICATION_REMEDY
    assert driver.read("out") == []
    assert driver.store("p", "seen") == {}


def test_a_handler_failure_stops_the_process_and_a_restart_feeds_the_message_again() -> None:
    broken = {"yes": True}

    def flaky(delivery: Delivery[Any, Any], state: State) -> Effects:
        if broken["yes"]:
            raise KeyError("amount")
        return Effects.builder().send(OUT, delivery.key, "handled").build()

    relay = Process("relay").receives(IN, _relay).sends(DERIVED)
    driver = ParsleyTestDriver([Process("p").receives(IN, flaky).sends(OUT), relay])
    with pytest.raises(HandlerFailure) as info:
        driver.pipe("in", {"n": 1}, key="k")
    assert str(info.value) == "handler for in failed at task 0, in-0@0: KeyError: 'amount'"
    assert isinstance(info.value.__cause__, KeyError)
    assert driver.stopped("p") is info.value
    assert driver.stopped("relay") is None
    driver.pipe("in", {"n": 2}, key="k")  # p is stopped; relay, declared after it, runs on
    assert driver.read("out") == []
    assert [r.value for r in driver.read("derived")] == [{"from": 1}, {"from": 2}]
    broken["yes"] = False
    assert driver.restart("p") == 2
    assert [(r.value, r.causes) for r in driver.read("out")] == [
        ("handled", {("in", 0): 0}), ("handled", {("in", 0): 1})]


# -- routing, offsets, determinism ----------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
])
def test_murmur2_matches_kafka(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_records_route_by_key_and_each_task_receives_its_own_partition() -> None:
    wide = Channel("wide", STRING, JSON)
    narrow = Channel("narrow", STRING, JSON)
    seen: list[tuple[str, int, str]] = []

    def note(delivery: Delivery[Any, Any], state: State) -> Effects:
        seen.append((delivery.topic, delivery.partition, delivery.key))
        return Effects.none()

    driver = ParsleyTestDriver(Process("p").receives(wide, note).receives(narrow, note),
                               partitions={"wide": 3, "narrow": 2})
    assert driver.tasks("p") == 3
    keys = [f"key-{i}" for i in range(12)]
    for key in keys:
        record = driver.pipe("wide", {}, key=key)
        assert record.partition == partition_for(key.encode(), 3)
    assert {p for _, p, _ in seen} == {0, 1, 2}
    assert seen == [("wide", partition_for(k.encode(), 3), k) for k in keys]
    assert driver.pipe("narrow", {}, key="x", partition=1).partition == 1
    assert seen[-1] == ("narrow", 1, "x")
    with pytest.raises(ValueError, match=r"partitions 0\.\.1, not 2"):
        driver.pipe("narrow", {}, key="x", partition=2)
    for p in range(3):
        assert [r.partition for r in driver.read("wide", partition=p)] == [
            p for k in keys if partition_for(k.encode(), 3) == p]


def test_sent_offsets_skip_one_after_each_transaction_for_its_commit_marker() -> None:
    def twice(delivery: Delivery[Any, Any], state: State) -> Effects:
        return (Effects.builder().send(OUT, delivery.key, "a").send(OUT, delivery.key, "b")
                .build())

    driver = ParsleyTestDriver(Process("p").receives(IN, twice).sends(OUT))
    driver.pipe("in", {}, key="k")
    driver.pipe("in", {}, key="k")
    assert [r.offset for r in driver.read("out")] == [0, 1, 3, 4]
    assert [r.offset for r in driver.read("in")] == [0, 1]


def test_the_same_inputs_give_the_same_records_null_keys_included() -> None:
    def run() -> list[tuple[str, int, int, Any, dict[Any, int]]]:
        driver = ParsleyTestDriver(_pipeline(), partitions={"in": 3, "derived": 3}, seed=7,
                                   cross_partition_causes="warn")
        for n in range(10):
            driver.pipe("in", {"n": n}, key=None if n % 2 else f"k{n}")
        return [(r.topic, r.partition, r.offset, r.value, r.causes)
                for t in ("in", "derived", "out") for r in driver.read(t)]

    first = run()
    assert first == run()
    assert len({p for topic, p, *_ in first if topic == "in"}) > 1


def test_processes_that_answer_each_other_for_ever_stop_at_the_delivery_bound() -> None:
    ping = Channel("ping", STRING, JSON)
    pong = Channel("pong", STRING, JSON)

    def to(channel: Channel[Any, Any]) -> Any:
        def answer(delivery: Delivery[Any, Any], state: State) -> Effects:
            return Effects.builder().send(channel, delivery.key, delivery.value).build()
        return answer

    driver = ParsleyTestDriver([Process("a").receives(ping, to(pong)).sends(pong),
                                Process("b").receives(pong, to(ping)).sends(ping)],
                               max_deliveries=50)
    with pytest.raises(RuntimeError, match="more than 50 messages"):
        driver.pipe("ping", {}, key="k")


def test_undeclared_names_are_refused_with_the_declared_ones() -> None:
    with pytest.raises(ValueError, match="no process receives or sends"):
        ParsleyTestDriver(_pipeline(), partitions={"typo": 2})
    driver = ParsleyTestDriver(_pipeline())
    with pytest.raises(KeyError, match="declared topics"):
        driver.pipe("typo", {})
    with pytest.raises(KeyError, match="processes"):
        driver.sent("nobody")
    with pytest.raises(ValueError, match="does not receive"):
        driver.pause("out", process="sink")


def test_bytes_no_serde_decodes_are_refused_as_the_frame_refuses_them() -> None:
    driver = ParsleyTestDriver(_pipeline())
    with pytest.raises(ParsleyFailClosedError) as info:
        driver.pipe_bytes("in", b"{not json", b"k")
    assert info.value.reason is Reason.APPLICATION_PAYLOAD_UNDECODABLE
    assert info.value.detail.startswith(
        "in@0 value could not be decoded by the declared serde (process 'relay'; partition 0; ")
    assert_seed_shape(Reason.APPLICATION_PAYLOAD_UNDECODABLE, info.value.detail)
    assert info.value.detail.endswith(APPLICATION_REMEDY)


def test_a_frontier_over_the_metadata_budget_is_refused() -> None:
    # a frontier of one partition of one topic is 28 bytes, at least 80 % of 34 (a warning);
    # sink's reaches two topics
    driver = ParsleyTestDriver(_pipeline(), metadata_budget_bytes=34)
    with pytest.raises(ParsleyFailClosedError) as info:
        driver.pipe("in", {"n": 0}, key="k")
    assert info.value.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert info.value.detail.startswith("the causal frontier reached 54 bytes (2 channels); "
                                        "the configured budget is 34 bytes.")
    assert driver.stopped("sink") is info.value
    assert [w[:2] for w in driver.warnings] == [("relay", 0), ("sink", 0)]


def test_a_stopped_process_shows_what_its_last_committed_step_held() -> None:
    driver = ParsleyTestDriver(_pipeline())
    driver.pause("in", process="sink")
    driver.pipe("in", {"n": 0}, key="k")
    driver.pipe("in", {"n": 1}, key="k")
    before = driver.held("sink")
    assert [(h.topic, h.offset, h.head) for h in before] == [
        ("derived", 0, True), ("derived", 2, False)]
    with pytest.raises(ParsleyFailClosedError):
        driver.pipe("derived", {"from": 9}, key="k", headers=[("parsley.causes", b"")])
    assert driver.held("sink") == before
    assert driver.diagnose("sink").held_count == 2


def test_a_closed_driver_runs_nothing_more() -> None:
    with ParsleyTestDriver(_pipeline()) as driver:
        driver.pipe("in", {"n": 0}, key="k")
        assert len(driver.read("out")) == 1
    driver.pipe("in", {"n": 1}, key="k")
    assert len(driver.read("out")) == 1
    assert isinstance(driver.stopped("sink"), RuntimeError)
