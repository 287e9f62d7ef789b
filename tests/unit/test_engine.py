"""ProcessEngine: feed, hold, deliver, deltas (docs/model.md; detail shapes of docs/runbooks.md).

Each refusal test asserts the reason and the detail text.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId, ReceivedMessage, kafka_topic_id
from parsley.engine.engine import ProcessEngine, TopicVerdict
from parsley.engine.feed import FeedOutcome
from parsley.engine.store import InMemoryOrderingStore
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.wire import encode_causes, encoded_size
from tests.seed_shapes import assert_seed_shape

pytestmark = pytest.mark.usefixtures("engine_impl")

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 0)
C = ChannelId(UUID(int=0xC), 0)
X = ChannelId(UUID(int=0xEE), 7)  # never received


def at(ch: ChannelId, pos: int) -> str:
    """``ch`` at ``pos`` as the engine's details add it after the shape, for the Kafka
    tools (no names bound in these tests)."""
    return (f"topic id {kafka_topic_id(ch.topic_id)} partition {ch.partition} offset {pos}, "
            "a topic whose name this task does not know")


def msg(ch: ChannelId, pos: int, causes: dict[ChannelId, int] | None = None,
        *extra: tuple[str, bytes | None], value: bytes = b"v") -> ReceivedMessage:
    headers: tuple[tuple[str, bytes | None], ...] = tuple(extra)
    if causes is not None:
        headers = (("parsley.causes", encode_causes(causes)), *headers)
    return ReceivedMessage(ch, pos, 1000 + pos, b"k%d" % pos, value, headers)


def engine(store: InMemoryOrderingStore | None = None, received: tuple[ChannelId, ...] = (A, B, C),
           start: dict[ChannelId, int] | None = None, **kw: object) -> ProcessEngine:
    e = ProcessEngine(store if store is not None else InMemoryOrderingStore(),
                      received=received, **kw)  # type: ignore[arg-type]
    e.start(start or {})
    return e


def drain(e: ProcessEngine) -> list[tuple[ChannelId, int]]:
    out = []
    while (d := e.deliver_next()) is not None:
        out.append((d.channel, d.position))
    return out


def refusal(fn: object, *args: object) -> ParsleyFailClosedError:
    with pytest.raises(ParsleyFailClosedError) as info:
        fn(*args)  # type: ignore[operator]
    return info.value


# ------------------------------------------------------------------ delivery


def test_message_without_header_delivers_at_once_with_reserved_headers_stripped() -> None:
    e = engine()
    m = ReceivedMessage(A, 4, 77, b"key", b"val",
                        (("app", b"1"), ("parsley.other", b"x"), ("app2", None)))
    assert e.receive(m) is FeedOutcome.ACCEPTED
    d = e.deliver_next()
    assert d is not None
    assert (d.channel, d.position, d.timestamp_ms, d.key, d.value) == (A, 4, 77, b"key", b"val")
    assert d.headers == (("app", b"1"), ("app2", None)), "parsley.* headers must be stripped"
    assert d.causes == ()
    assert e.deliver_next() is None
    assert e.frontier() == {A: 4}, "delivery merges its own (channel, position)"


def test_waited_counts_each_message_held_back_for_a_cause_once() -> None:
    e = engine()
    e.receive(msg(A, 0))                     # nothing to wait for
    e.receive(msg(C, 0, {A: 1, B: 0}))       # waits for A@1, then for B@0
    assert drain(e) == [(A, 0)]
    assert e.waited_count() == 1
    e.receive(msg(A, 1))                     # C@0 is decided again: still waits, on B
    assert drain(e) == [(A, 1)]
    assert e.waited_count() == 1, "the same message is counted once"
    e.receive(msg(B, 0))
    assert drain(e) == [(B, 0), (C, 0)]
    e.receive(msg(C, 1, {A: 1}))             # its cause is delivered: no wait
    e.receive(msg(C, 2, {B: 5}))             # a second message waits
    assert drain(e) == [(C, 1)]
    assert e.waited_count() == 2
    assert e.diagnose().waited == 2 and e.diagnose().to_json()["waited"] == 2


def test_held_until_cause_settles_then_chain_releases_in_channel_order() -> None:
    e = engine()
    e.receive(msg(C, 0, {B: 0}))        # C@0 waits for B@0
    e.receive(msg(B, 0, {A: 2}))        # B@0 waits for A@2
    e.receive(msg(A, 0, {}))            # deliverable
    assert drain(e) == [(A, 0)]
    e.receive(msg(A, 1, {}))
    assert drain(e) == [(A, 1)]
    assert e.held_count() == 2
    e.receive(msg(A, 2, {}))
    assert drain(e) == [(A, 2), (B, 0), (C, 0)], "the chain must release across channels"
    assert e.held_count() == 0


def test_deterministic_order_lowest_channel_first() -> None:
    e = engine()
    e.receive(msg(C, 0))
    e.receive(msg(B, 0))
    e.receive(msg(A, 0))
    assert drain(e) == [(A, 0), (B, 0), (C, 0)]


def test_fifo_a_deliverable_message_waits_behind_a_blocked_head() -> None:
    e = engine()
    e.receive(msg(B, 0, {A: 0}))
    e.receive(msg(B, 1, {}))
    assert drain(e) == [], "B@1 must not overtake B@0"
    assert e.held_positions(B) == (0, 1)
    e.receive(msg(A, 0))
    assert drain(e) == [(A, 0), (B, 0), (B, 1)]


def test_cause_on_non_received_channel_imposes_nothing_but_enters_frontier() -> None:
    e = engine()
    e.receive(msg(A, 0, {X: 99}))
    assert drain(e) == [(A, 0)]
    assert e.frontier() == {A: 0, X: 99}
    assert e.delivered_past() == {X: 99}, "the delivered past merges the message's causes"


def test_receipt_merges_causes_even_when_held() -> None:
    e = engine()
    e.receive(msg(B, 0, {A: 5, X: 3}))
    assert drain(e) == []
    assert e.frontier() == {A: 5, X: 3}
    assert e.causes_header() == encode_causes({A: 5, X: 3})


def test_settled_and_covered() -> None:
    e = engine()
    assert e.settled(A) is None and e.covered(A) is None
    e.receive(msg(A, 3, {B: 0}))
    assert e.covered(A) == 3
    assert e.settled(A) == 2, "settled is head - 1 while something is held"
    e.receive(msg(B, 0))
    drain(e)
    assert e.settled(A) == 3


def test_self_cause_below_own_position_is_settled_by_the_buffer_head() -> None:
    e = engine()
    e.receive(msg(A, 0, {B: 0}))
    e.receive(msg(A, 5, {A: 0}))
    assert drain(e) == []
    e.receive(msg(B, 0))
    assert drain(e) == [(B, 0), (A, 0), (A, 5)]


# ------------------------------------------------------------------ feed order


def test_out_of_order_within_execution() -> None:
    e = engine()
    e.receive(msg(A, 5))
    err = refusal(e.receive, msg(A, 5))
    assert err.reason is Reason.OUT_OF_ORDER_FEED
    assert err.detail == (
        f"fed {A}@5 after this execution was already fed position 5 of the same channel "
        f"({at(A, 5)}); the host must feed each channel in increasing position order. "
        "Restart; if it recurs at the same offsets, keep the logs and report it "
        "(docs/runbooks.md, OUT_OF_ORDER_FEED)")
    assert_seed_shape(Reason.OUT_OF_ORDER_FEED, err.detail)
    err = refusal(e.receive, msg(A, 2))
    assert err.detail.startswith(f"fed {A}@2 after this execution was already fed position 5")


def test_replay_at_or_below_floor_is_dropped_silently_but_merges_causes() -> None:
    e = engine(start={A: 10})
    assert e.session_floor(A) == 9
    assert e.receive(msg(A, 9, {X: 4})) is FeedOutcome.DUPLICATE_DROPPED
    assert drain(e) == []
    assert e.frontier() == {X: 4}, "receipt merges before the duplicate check (docs/model.md)"
    assert e.receive(msg(A, 10)) is FeedOutcome.ACCEPTED


def test_replay_is_still_order_checked() -> None:
    e = engine(start={A: 10})
    assert e.receive(msg(A, 5)) is FeedOutcome.DUPLICATE_DROPPED
    err = refusal(e.receive, msg(A, 4))
    assert err.reason is Reason.OUT_OF_ORDER_FEED, "order check precedes the replay drop"


def test_fed_to_end_channel_refuses_a_feed() -> None:
    e = engine()
    e.apply_identity({A.topic_id: TopicVerdict.DELETED})
    assert e.covered(A) == FED_TO_END
    err = refusal(e.receive, msg(A, 0))
    assert err.reason is Reason.OUT_OF_ORDER_FEED
    assert err.detail.startswith(
        f"fed {A}@0 on a channel recorded as no longer existing ({at(A, 0)}); ")
    assert "(docs/runbooks.md, OUT_OF_ORDER_FEED)" in err.detail
    assert_seed_shape(Reason.OUT_OF_ORDER_FEED, err.detail)


def test_covered_position_fed_invariant_guard() -> None:
    # No public path reaches it (docs/runbooks.md, COVERED_POSITION_FED): poke coverage
    # above the floor to show the branch refuses rather than dropping or delivering.
    e = engine(start={A: 3})
    e._advance_fed(A, 8)  # the invariant guard has no known public trigger
    err = refusal(e.receive, msg(A, 5))
    assert err.reason is Reason.COVERED_POSITION_FED
    assert err.detail == (
        f"fed {A}@5 which this execution's own coverage already records as fed or never "
        "arriving (fedUpTo=8), above the session floor of 2; the host's feed and the "
        "engine's record contradict each other. A restart resumes from the committed "
        f"record, and this refusal then does not recur. The record is {at(A, 5)} "
        "(docs/runbooks.md, COVERED_POSITION_FED).")
    assert_seed_shape(Reason.COVERED_POSITION_FED, err.detail)
    e2 = engine()
    e2._advance_fed(B, 8)
    err = refusal(e2.receive, msg(B, 1))
    assert err.reason is Reason.COVERED_POSITION_FED
    assert "above the session floor of none" in err.detail


def test_receive_before_start_and_undeclared_channel() -> None:
    e = ProcessEngine(InMemoryOrderingStore(), received=[A])
    with pytest.raises(RuntimeError):
        e.receive(msg(A, 0))
    e.start({})
    with pytest.raises(RuntimeError):
        e.start({})
    with pytest.raises(ValueError, match="undeclared channel"):
        e.receive(msg(B, 0))


# ------------------------------------------------------------------ metadata


@pytest.mark.parametrize(("headers", "diagnosis"), [
    ((("parsley.causes", b"\x01\xac"),), "truncated causes header"),
    ((("parsley.causes", b""),), "truncated causes header"),
    ((("parsley.causes", None),), "causes header present with null value"),
    ((("parsley.causes", b"\x01\x00"), ("parsley.causes", b"\x01\x00")),
     "duplicate parsley.causes headers"),
    ((("a", b"1"), ("parsley.causes", b"\x02\x00")), "unknown causes format version 2"),
])
def test_undecodable_metadata(headers: tuple[tuple[str, bytes | None], ...],
                              diagnosis: str) -> None:
    e = engine()
    err = refusal(e.receive, ReceivedMessage(B, 12, 0, None, None, headers))
    assert err.reason is Reason.UNDECODABLE_METADATA
    assert err.detail == (f"{B}@12: {diagnosis} ({at(B, 12)}). Find and fix the producer "
                          "that stamped the header; no restart passes the record "
                          "(docs/runbooks.md, UNDECODABLE_METADATA)")
    assert_seed_shape(Reason.UNDECODABLE_METADATA, err.detail)


def test_budget_at_receipt_is_checked_before_decoding() -> None:
    e = engine(budget_bytes=30)
    junk = b"\x09" * 31  # undecodable, but too long first
    err = refusal(e.receive, ReceivedMessage(A, 3, 0, None, None, (("parsley.causes", junk),)))
    assert err.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert err.detail.startswith(f"{A}@3 carries 31 bytes of causal metadata; the "
                                 f"configured budget is 30 bytes ({at(A, 3)}). ")
    assert err.detail.endswith("(docs/runbooks.md, METADATA_BUDGET_EXCEEDED)")
    assert_seed_shape(Reason.METADATA_BUDGET_EXCEEDED, err.detail)


def test_budget_at_merge_and_emission() -> None:
    # One topic's first channel costs 26 bytes; a second topic 26 more (54 total).
    e = engine(budget_bytes=53)
    e.receive(msg(A, 0, {X: 1}))
    assert e.frontier_bytes() == 28
    err = refusal(e.receive, msg(A, 1, {C: 1}))
    assert err.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert err.detail.startswith("the causal frontier reached 54 bytes (2 channels); the "
                                 "configured budget is 53 bytes.")
    assert_seed_shape(Reason.METADATA_BUDGET_EXCEEDED, err.detail)


def test_budget_at_emission() -> None:
    e = engine(budget_bytes=100)
    e.receive(msg(A, 0, {X: 1}))
    drain(e)
    e._budget = 40  # a budget lowered under a restored frontier
    err = refusal(e.causes_header)
    assert err.reason is Reason.METADATA_BUDGET_EXCEEDED
    assert err.detail.startswith("expressing the causal frontier needs 54 bytes (2 channels); "
                                 "the configured budget is 40 bytes")
    assert_seed_shape(Reason.METADATA_BUDGET_EXCEEDED, err.detail)


def test_budget_emission_after_restore_with_smaller_budget() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(A, 0, {X: 1}))
    drain(e)
    e.take_deltas()
    e2 = engine(InMemoryOrderingStore(store.items()), budget_bytes=50)
    err = refusal(e2.causes_header)
    assert err.reason is Reason.METADATA_BUDGET_EXCEEDED


def _causes_of_size(size: int) -> dict[ChannelId, int]:
    """Causes on one topic whose encoding is exactly ``size`` bytes (size >= 28)."""
    topic = UUID(int=0x77)
    n = (size - 19) // 9          # 2 + 17 + 9n with partitions below 128
    gap = size - (19 + 9 * n)     # each partition moved to >= 128 costs one byte more
    causes = {ChannelId(topic, p): 1 for p in range(n - gap)}
    causes.update({ChannelId(topic, 200 + i): 1 for i in range(gap)})
    assert encoded_size(causes) == size, "test setup"
    return causes


@pytest.mark.parametrize(("frontier_bytes", "warns"), [(800, True), (799, False), (1000, True)])
def test_budget_warning_at_80_percent_once(frontier_bytes: int, warns: bool) -> None:
    warnings: list[str] = []
    e = engine(budget_bytes=1000, on_warning=warnings.append, received=(A,))
    e.receive(msg(A, 0, _causes_of_size(frontier_bytes)))
    assert e.frontier_bytes() == frontier_bytes, "a frontier at the budget is not refused"
    assert len(warnings) == (1 if warns else 0), warnings
    if warns:
        reached = int(warnings[0].split("reached ")[1].split(" bytes")[0])
        assert 800 <= reached <= frontier_bytes, "warned at the merge that crossed 80%"
        assert "80% of the metadata budget of 1000 bytes" in warnings[0]
    grow = msg(A, 1, {ChannelId(UUID(int=0x77), 300): 1})  # 10 bytes more
    if frontier_bytes + 10 > 1000:
        assert refusal(e.receive, grow).reason is Reason.METADATA_BUDGET_EXCEEDED
    else:
        e.receive(grow)
        assert len(warnings) == 1, "the warning is issued exactly once, on reaching 80%"


def test_budget_warning_on_restore() -> None:
    store = InMemoryOrderingStore()
    e = engine(store, received=(A,))
    e.receive(msg(A, 0, _causes_of_size(820)))
    e.take_deltas()
    warnings: list[str] = []
    ProcessEngine(InMemoryOrderingStore(store.items()), received=[A], budget_bytes=1000,
                  on_warning=warnings.append)
    assert len(warnings) == 1, "a restored frontier at 80% warns too"


# ------------------------------------------------------------------ deltas


def test_first_deltas_stamp_the_version_first_and_only_once() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    rows = e.take_deltas()
    assert rows[0] == (b"v", b"\x01")
    assert e.take_deltas() == ()
    assert store.get(b"v") == b"\x01"
    e2 = engine(InMemoryOrderingStore(store.items()))
    assert all(k != b"v" for k, _ in e2.take_deltas()), "a versioned store is not re-stamped"


def test_received_and_delivered_in_one_step_writes_no_held_row() -> None:
    e = engine()
    e.take_deltas()
    e.receive(msg(A, 0, {X: 2}))
    assert drain(e) == [(A, 0)]
    rows = dict(e.take_deltas())
    assert not [k for k in rows if k[:1] == b"h"], rows
    assert rows == {
        sc.fed_key(A): sc.encode_long(0),
        sc.frontier_key(A): sc.encode_long(0),
        sc.frontier_key(X): sc.encode_long(2),
        sc.past_key(X): sc.encode_long(2),
    }


def test_held_body_is_persisted_dropped_from_memory_then_tombstoned() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 0, {A: 0}, ("app", b"h")))
    e.receive(msg(B, 1, {}))
    rows = dict(e.take_deltas())
    k0, k1 = sc.held_key(B, 0), sc.held_key(B, 1)
    assert sc.decode_held(rows[k0]) == sc.HeldMessage(
        1000, b"k0", b"v", (("app", b"h"),), ((A, 0),))
    assert k1 in rows
    assert not e._bodies, "held bodies must leave memory once persisted"
    assert store.get(k0) is not None, "take_deltas applies its rows to the store"
    e.receive(msg(A, 0))
    delivered = []
    while (d := e.deliver_next()) is not None:
        delivered.append(d)
    assert [(d.channel, d.position) for d in delivered] == [(A, 0), (B, 0), (B, 1)]
    assert delivered[1].headers == (("app", b"h"),) and delivered[1].key == b"k0"
    rows = dict(e.take_deltas())
    assert rows[k0] is None and rows[k1] is None, "delivered persisted holds are tombstoned"
    assert store.get(k0) is None


def test_deltas_are_latest_value_per_key() -> None:
    e = engine()
    e.take_deltas()
    for p in range(5):
        e.receive(msg(A, p, {X: p}))
    drain(e)
    rows = e.take_deltas()
    keys = [k for k, _ in rows]
    assert len(keys) == len(set(keys)), "one row per key"
    assert dict(rows)[sc.frontier_key(X)] == sc.encode_long(4)
    assert dict(rows)[sc.fed_key(A)] == sc.encode_long(4)


def test_a_held_head_absent_from_the_store_is_refused() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 0, {A: 0}))
    e.receive(msg(B, 1, {A: 0}))
    e.take_deltas()
    copy = InMemoryOrderingStore(store.items())
    e2 = engine(copy)
    copy.delete(sc.held_key(B, 1))  # the store loses a blob the buffer still names
    e2.receive(msg(A, 0))
    assert e2.deliver_next() is not None  # A@0
    assert e2.deliver_next() is not None  # B@0
    err = refusal(e2.deliver_next)
    assert err.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert err.detail.startswith(
        f"held message at {B}@1 is in the hold-back buffer but absent from the store "
        f"({at(B, 1)}). ")
    assert_seed_shape(Reason.UNKNOWN_ORDERING_STATE_FORMAT, err.detail)


def test_a_held_head_corrupted_in_the_store_is_refused_with_the_codecs_diagnosis() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 0, {A: 0}))
    e.take_deltas()
    copy = InMemoryOrderingStore(store.items())
    e2 = engine(copy)  # restored and validated; then the blob is damaged under it
    blob = copy.get(sc.held_key(B, 0))
    assert blob is not None
    copy.put(sc.held_key(B, 0), blob[:-3])
    e2.receive(msg(A, 0))
    err = refusal(e2.deliver_next)  # the decision reads B@0's causes from its blob
    assert err.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    with pytest.raises(ParsleyFailClosedError) as codec:
        sc.decode_held(blob[:-3])
    assert err.detail == codec.value.detail and err.detail.startswith("corrupt held blob: ")


# ------------------------------------------------------------------ restore


def test_restart_from_deltas_keeps_held_messages_and_coverage() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    e = engine()
    e.receive(msg(B, 0, {A: 1}))
    e.receive(msg(A, 0))
    drain(e)
    log += e.take_deltas()
    e2 = engine(InMemoryOrderingStore.from_records(log), start={A: 1, B: 1})
    assert e2.held_positions(B) == (0,)
    assert e2.covered(A) == 0 and e2.session_floor(B) == 0
    assert e2.receive(msg(A, 0)) is FeedOutcome.DUPLICATE_DROPPED
    e2.receive(msg(A, 1))
    assert drain(e2) == [(A, 1), (B, 0)]


def test_restore_refuses_held_on_a_channel_no_longer_received() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 4, {A: 0}))
    e.take_deltas()
    with pytest.raises(ParsleyFailClosedError) as info:
        ProcessEngine(InMemoryOrderingStore(store.items()), received=[A, C])
    assert info.value.reason is Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES
    assert info.value.detail.startswith(f"held message at {B}@4 but the channel is no longer "
                                        f"in the declared received-channel set ({at(B, 4)}). ")
    assert_seed_shape(Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES, info.value.detail)


def test_restore_refuses_unknown_state_format() -> None:
    store = InMemoryOrderingStore([(b"v", b"\x02")])
    with pytest.raises(ParsleyFailClosedError) as info:
        ProcessEngine(store, received=[A])
    assert info.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert "ordering store format not understood by this build" in info.value.detail
    store = InMemoryOrderingStore([(sc.fed_key(A), sc.encode_long(3))])
    with pytest.raises(ParsleyFailClosedError) as info:
        ProcessEngine(store, received=[A])
    assert info.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert "without its format version entry" in info.value.detail


def test_restore_refuses_a_held_message_above_its_channels_coverage() -> None:
    # Restored, A@10 would sit ahead of a later-fed A@7 and deliver [10, 7]: FIFO broken.
    held = sc.encode_held(sc.HeldMessage(0, b"k", b"v10", (), ()))
    store = InMemoryOrderingStore([(sc.VERSION_KEY, sc.VERSION_VALUE),
                                   (sc.fed_key(A), sc.encode_long(5)),
                                   (sc.held_key(A, 10), held)])
    with pytest.raises(ParsleyFailClosedError) as info:
        ProcessEngine(store, received=[A])
    assert info.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert info.value.detail.startswith(
        "held messages restored out of position order: "
        f"held message at {A}@10 above its channel's coverage (fedUpTo=5); "), info.value.detail
    assert_seed_shape(Reason.UNKNOWN_ORDERING_STATE_FORMAT, info.value.detail)


def test_restored_holds_from_real_deltas_sit_within_coverage() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    e = engine(received=(A, B))
    e.receive(msg(A, 3, {B: 0}))
    e.receive(msg(A, 4))
    log += e.take_deltas()
    e2 = ProcessEngine(InMemoryOrderingStore.from_records(log), received=[A, B])
    e2.start({})
    assert e2.held_count() == 2 and e2.covered(A) == 4


def test_start_clamps_coverage_to_delivered_past_and_start_positions() -> None:
    log: list[tuple[bytes, bytes | None]] = []
    e = engine(received=(A,))
    e.receive(msg(A, 0, {B: 6, C: 2}))
    drain(e)
    log += e.take_deltas()
    # B joins the received set; the delivered past says B@6 is behind us.
    e2 = ProcessEngine(InMemoryOrderingStore.from_records(log), received=[A, B, C])
    e2.start({C: 9, A: 0})
    assert e2.covered(B) == 6 and e2.session_floor(B) == 6, "join clamp"
    assert e2.covered(C) == 8, "start position 9 covers below it; coverage is never lowered"
    assert e2.covered(A) == 0
    assert e2.receive(msg(B, 6)) is FeedOutcome.DUPLICATE_DROPPED
    assert dict(e2.take_deltas())[sc.fed_key(B)] == sc.encode_long(6)


def test_a_restored_blocked_head_keeps_only_its_causes_in_memory() -> None:
    store = InMemoryOrderingStore()
    e = engine(store)
    e.receive(msg(B, 0, {A: 0}, value=b"x" * 1000))
    e.receive(msg(B, 1, {}, value=b"y" * 1000))
    e.take_deltas()
    e2 = engine(InMemoryOrderingStore(store.items()))
    assert e2.deliver_next() is None
    assert e2._head_causes == {B: ((A, 0),)}  # the decision needs these
    assert e2._loaded is None and not e2._bodies, "no held body stays in memory"
    assert e2.held_positions(B) == (0, 1)
