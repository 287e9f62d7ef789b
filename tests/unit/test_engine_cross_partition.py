"""Cross-partition causes, and how refusal details name channels (docs/failing-closed.md).

A cause on a partition of a received topic that another task reads can never be
enforced by this task. Under ``CrossPartition.REFUSE`` it is ``CROSS_PARTITION_CAUSE``
naming both channels, the key and the remedy; under ``CrossPartition.WARN`` it is
carried unenforced, warned once per pair of partitions and counted in the diagnosis.
Every other refusal the engine raises opens with its reason's runbook shape
(``tests/seed_shapes.py``), then names the channel as the Kafka tools need it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley.engine.channel import ChannelId, ReceivedMessage, describe_channel, kafka_topic_id
from parsley.engine.cross_partition import CrossPartition
from parsley.engine.engine import ProcessEngine, TopicVerdict
from parsley.engine.feed import FeedOutcome
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import encode_causes
from tests.seed_shapes import assert_seed_shape

pytestmark = pytest.mark.usefixtures("engine_impl")

ORDERS = UUID("22ff08ae-ac3d-4589-94a3-125a5c2689a3")
PAYMENTS = UUID(int=0xB)
UPSTREAM = UUID(int=0xC)
O0, O1 = ChannelId(ORDERS, 0), ChannelId(ORDERS, 1)
P0, P1 = ChannelId(PAYMENTS, 0), ChannelId(PAYMENTS, 1)


def task(index: int, policy: CrossPartition, warnings: list[str] | None = None) -> ProcessEngine:
    e = ProcessEngine(InMemoryOrderingStore(),
                      received=[ChannelId(ORDERS, index), ChannelId(PAYMENTS, index)],
                      cross_partition=policy,
                      on_warning=None if warnings is None else warnings.append)
    e.bind_names({"shop.orders": ORDERS, "shop.payments": PAYMENTS})
    e.start({})
    return e


def payment(ch: ChannelId, pos: int, causes: dict[ChannelId, int], key: bytes | None) -> \
        ReceivedMessage:
    return ReceivedMessage(ch, pos, 0, key, b"{}", (("parsley.causes", encode_causes(causes)),))


def test_kafka_topic_id_is_what_kafka_topics_describe_prints() -> None:
    # The example: 22ff08ae-... is Iv8Irqw9RYmUoxJaXCaJow in kafka-topics --describe.
    assert kafka_topic_id(ORDERS) == "Iv8Irqw9RYmUoxJaXCaJow"
    assert describe_channel(O1, {ORDERS: "shop.orders"}, 7) == (
        "topic 'shop.orders' partition 1 offset 7 (topic id Iv8Irqw9RYmUoxJaXCaJow)")
    assert describe_channel(O1, {}) == (
        "topic id Iv8Irqw9RYmUoxJaXCaJow (name not known to this task) partition 1")


def test_a_cause_on_another_tasks_partition_is_refused_naming_both_channels_key_and_remedy() -> \
        None:
    e = task(1, CrossPartition.REFUSE)
    with pytest.raises(ParsleyFailClosedError) as info:
        e.receive(payment(P1, 4, {O0: 3}, None))
    assert info.value.reason is Reason.CROSS_PARTITION_CAUSE
    detail = info.value.detail
    assert detail.startswith(
        "the record at topic 'shop.payments' partition 1 offset 4 (topic id "
        f"{kafka_topic_id(PAYMENTS)}) (no key (null)) names a cause at topic 'shop.orders' "
        "partition 0 offset 3 (topic id Iv8Irqw9RYmUoxJaXCaJow), a partition another task "
        "of this process reads"), detail
    assert "murmur2_random" in detail and "(docs/runbooks.md, CROSS_PARTITION_CAUSE)" in detail
    with pytest.raises(ParsleyFailClosedError) as info:
        task(1, CrossPartition.REFUSE).receive(payment(P1, 0, {O0: 3}, b"customer-3"))
    assert "(key 'customer-3')" in info.value.detail


def test_causes_on_own_partitions_and_unreceived_topics_are_never_cross_partition() -> None:
    e = task(1, CrossPartition.REFUSE)
    assert e.receive(payment(P1, 0, {O1: 0, ChannelId(UPSTREAM, 5): 9}, b"k")) \
        is FeedOutcome.ACCEPTED
    e.receive(ReceivedMessage(O1, 0, 0, b"k", b"{}"))
    assert [m.channel for m in iter(e.deliver_next, None)] == [O1, P1]


def test_warn_carries_the_cause_unenforced_warns_once_per_pair_and_counts() -> None:
    warnings: list[str] = []
    e = task(1, CrossPartition.WARN, warnings)
    for pos in range(3):
        assert e.receive(payment(P1, pos, {O0: pos, P0: pos}, None)) is FeedOutcome.ACCEPTED
    assert [m.position for m in iter(e.deliver_next, None)] == [0, 1, 2], "carried unenforced"
    assert e.cross_partition_causes() == 3
    assert e.diagnose().to_json()["cross_partition_causes"] == 3
    assert len(warnings) == 2, warnings  # (P1, O0) and (P1, P0), once each
    assert 'cross_partition_causes = "refuse"' in warnings[0]
    assert e.frontier()[O0] == 2, "still carried downstream in the frontier"


def test_a_replay_below_the_session_floor_is_not_judged_again() -> None:
    e = ProcessEngine(InMemoryOrderingStore(), received=[O1, P1],
                      cross_partition=CrossPartition.REFUSE)
    e.start({P1: 5})
    assert e.receive(payment(P1, 4, {O0: 3}, None)) is FeedOutcome.DUPLICATE_DROPPED


@settings(max_examples=200, deadline=None)
@given(
    index=st.integers(0, 3),
    causes=st.dictionaries(
        st.builds(ChannelId, st.sampled_from([ORDERS, PAYMENTS, UPSTREAM]), st.integers(0, 3)),
        st.integers(0, 50), min_size=1, max_size=6),
    policy=st.sampled_from(list(CrossPartition)),
)
def test_property_refused_exactly_when_a_cause_is_on_a_received_topic_off_this_task(
        index: int, causes: dict[ChannelId, int], policy: CrossPartition) -> None:
    received = {ChannelId(ORDERS, index), ChannelId(PAYMENTS, index)}
    foreign = [c for c in causes if c.topic_id in (ORDERS, PAYMENTS) and c not in received]
    e = task(index, policy, [])
    msg = payment(ChannelId(PAYMENTS, index), 0, causes, b"k")
    if foreign and policy is CrossPartition.REFUSE:
        with pytest.raises(ParsleyFailClosedError) as info:
            e.receive(msg)
        assert info.value.reason is Reason.CROSS_PARTITION_CAUSE
        assert describe_channel(min(foreign), {ORDERS: "shop.orders",
                                               PAYMENTS: "shop.payments"},
                                causes[min(foreign)]) in info.value.detail
    else:
        assert e.receive(msg) is FeedOutcome.ACCEPTED
        assert e.cross_partition_causes() == (1 if foreign else 0)


BARE_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _engine_refusals() -> dict[str, ParsleyFailClosedError]:
    """One refusal of every kind the engine raises, on a task with bound names."""
    out: dict[str, ParsleyFailClosedError] = {}

    def catch(label: str, fn: Callable[[], object]) -> None:
        with pytest.raises(ParsleyFailClosedError) as info:
            fn()
        out[label] = info.value

    e = task(0, CrossPartition.REFUSE)
    catch("undecodable", lambda: e.receive(
        ReceivedMessage(P0, 3, 0, None, None, (("parsley.causes", b"\x01\xac"),))))
    e = task(0, CrossPartition.REFUSE)
    e.receive(ReceivedMessage(O0, 5, 0, None, None))
    catch("out of order", lambda: e.receive(ReceivedMessage(O0, 5, 0, None, None)))
    e = task(0, CrossPartition.REFUSE)
    e.apply_identity({ORDERS: TopicVerdict.DELETED})
    catch("fed to end", lambda: e.receive(ReceivedMessage(O0, 0, 0, None, None)))
    e = task(0, CrossPartition.REFUSE)
    e._advance_fed(O0, 8)  # the invariant guard has no public trigger
    catch("covered", lambda: e.receive(ReceivedMessage(O0, 5, 0, None, None)))
    e = task(0, CrossPartition.REFUSE)
    catch("cross partition", lambda: e.receive(payment(P0, 0, {O1: 0}, None)))
    small = ProcessEngine(InMemoryOrderingStore(), received=[O0], budget_bytes=20)
    small.start({})
    catch("budget at receipt", lambda: small.receive(payment(O0, 0, {P1: 0, P0: 1}, None)))
    e = task(0, CrossPartition.WARN)
    e.receive(payment(P0, 0, {O0: 9}, None))
    catch("deleted with held", lambda: e.apply_identity({PAYMENTS: TopicVerdict.DELETED}))
    catch("recreated", lambda: task(0, CrossPartition.REFUSE).apply_identity(
        {ORDERS: TopicVerdict.RECREATED}))
    store = InMemoryOrderingStore()
    e = ProcessEngine(store, received=[O0, P0])
    e.bind_names({"shop.orders": ORDERS, "shop.payments": PAYMENTS})
    e.start({})
    e.receive(payment(P0, 4, {O0: 9}, None))
    e.take_deltas()
    catch("removed with held", lambda: ProcessEngine(InMemoryOrderingStore(store.items()),
                                                     received=[O0]))
    return out


def test_every_engine_refusal_opens_with_its_seed_shape_then_names_kafka_coordinates() -> None:
    refusals = _engine_refusals()
    assert len(refusals) == 9
    for label, refusal in refusals.items():
        detail = refusal.detail
        assert "docs/runbooks.md" in detail, f"{label}: no runbook section in {detail!r}"
        if refusal.reason is Reason.CROSS_PARTITION_CAUSE:  # ours alone: no seed shape
            assert not BARE_UUID.search(detail), f"{label}: a bare UUID in {detail!r}"
        else:
            assert_seed_shape(refusal.reason, detail)
            assert BARE_UUID.search(detail), f"{label}: the seed's <channel> in {detail!r}"
        if label != "budget at receipt":
            assert "topic '" in detail and " partition " in detail, f"{label}: {detail!r}"
        assert "topic id " in detail, f"{label}: {detail!r}"
        assert re.search(r"topic id [A-Za-z0-9_-]{22}\b", detail), f"{label}: {detail!r}"
