"""Oracle self-test (V8): hand-built histories, one per clause, must be caught; a clean one not.

No engine runs here: each history is written out as the simulator would
report it (committed source records, committed task steps), so a broken
oracle cannot hide behind a correct engine. Also checks the simulated broker's
offsets (markers and aborted records take offsets a reader never sees).

Source: README.md, "The verification kit" (V8, Java's ``OracleSelfTest``);
docs/model.md, "The frontier, and what a header means".
"""

from __future__ import annotations

from uuid import UUID

from parsley.engine.channel import ChannelId
from tests.sim.broker import Broker, Outgoing
from tests.sim.generator import TopicSpec
from tests.sim.oracle import (
    M1,
    M2,
    V1,
    V2_DUP,
    V2_FIFO,
    V2_INTEGRITY,
    V2_LOSS,
    V5,
    Body,
    Delivered,
    Oracle,
    Sent,
)

A = ChannelId(UUID(int=0xA), 0)
B = ChannelId(UUID(int=0xB), 0)
C = ChannelId(UUID(int=0xC), 0)


def body(n: int) -> Body:
    return Body(1000 + n, b"k", f"m{n}:0".encode(), (("app", b"x"),))


def d(ch: ChannelId, pos: int, n: int) -> Delivered:
    return Delivered(ch, pos, body(n))


def diamond() -> Oracle:
    """Source wrote A@0 and A@2 (A@1 a marker); P (receives A) delivered A@0 and sent B@5.

    Q receives A and B, so B@5 must wait for A@0 at Q.
    """
    oracle = Oracle({"P#0": [A], "Q#0": [A, B], "R#0": [C, B]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(A, 2, body(2), {})
    oracle.on_commit("P#0", [d(A, 0, 0), d(A, 2, 2)], [Sent(B, 5, body(5), 0)])
    return oracle


def clauses(oracle: Oracle) -> list[str]:
    return [v.clause for v in oracle.violations]


def finish_clauses(oracle: Oracle) -> list[str]:
    return [v.clause for v in oracle.finish()]


def test_clean_history_has_no_violation() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 0, 0)], [])
    oracle.on_commit("Q#0", [d(B, 5, 5), d(A, 2, 2)], [])
    oracle.on_commit("R#0", [d(B, 5, 5)], [])
    assert oracle.finish() == [], "a causally ordered, complete history was flagged"


def test_effect_before_its_cause_is_v1() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(B, 5, 5), d(A, 0, 0), d(A, 2, 2)], [])
    assert clauses(oracle) == [V1], oracle.violations
    assert "b-0@5 before its cause 00000000-0000-0000-0000-00000000000a-0@0" in (
        oracle.violations[0].detail), oracle.violations[0]


def test_cause_through_a_chain_is_v1() -> None:
    # Q delivers B@5 (after A@0, fine) and sends C@1; R receives C and B: C@1 needs B@5 first.
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 0, 0), d(B, 5, 5)], [Sent(C, 1, body(9), 1)])
    oracle.on_commit("R#0", [d(C, 1, 9)], [])
    assert clauses(oracle) == [V1], "a transitive cause on a received channel was not required"


def test_cause_on_unreceived_channel_imposes_nothing() -> None:
    # R receives C and B, not A: C@1 caused by A@0 only (sent by P before B mattered).
    oracle = Oracle({"P#0": [A], "R#0": [C, B]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_commit("P#0", [d(A, 0, 0)], [Sent(C, 1, body(9), 0)])
    oracle.on_commit("R#0", [d(C, 1, 9)], [])
    assert oracle.finish() == [], oracle.violations


def test_sends_are_not_causes() -> None:
    # P sends B@5 then C@6 from the same delivery: C@6 does not need B@5.
    oracle = Oracle({"P#0": [A], "R#0": [C, B]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_commit("P#0", [d(A, 0, 0)], [Sent(B, 5, body(5), 0), Sent(C, 6, body(6), 0)])
    oracle.on_commit("R#0", [d(C, 6, 6), d(B, 5, 5)], [])
    assert oracle.finish() == [], oracle.violations


def test_source_causes_bind_receivers() -> None:
    # A source read A up to 2 and wrote C@0; Q2 receives A and C.
    oracle = Oracle({"Q2#0": [A, C]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(A, 2, body(2), {})
    assert oracle.observed_past({A: 2}) == {A: 2}
    oracle.on_source_record(C, 0, body(7), {A: 2})
    oracle.on_commit("Q2#0", [d(A, 0, 0), d(C, 0, 7), d(A, 2, 2)], [])
    assert clauses(oracle) == [V1], "a source's observed position was not a cause"


def test_reordered_channel_is_fifo() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 2, 2), d(A, 0, 0), d(B, 5, 5)], [])
    oracle.on_commit("R#0", [d(B, 5, 5)], [])
    # Reported twice: A@2 jumped ahead of A@0, then A@0 came after A@2.
    assert clauses(oracle) == [V2_FIFO, V2_FIFO], oracle.violations
    assert oracle.finish() == oracle.violations[:2], "a late delivery was also counted lost"


def test_second_delivery_is_duplicate() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 0, 0)], [])
    oracle.on_commit("Q#0", [d(A, 0, 0)], [])
    assert clauses(oracle) == [V2_DUP], oracle.violations


def test_skipped_record_is_loss_and_missing_tail_is_liveness() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 2, 2)], [])
    oracle.on_commit("R#0", [d(B, 5, 5)], [])
    assert finish_clauses(oracle) == [V2_FIFO, V2_LOSS, V5], oracle.violations
    assert "a-0@0 though" in oracle.violations[1].detail, oracle.violations[1]
    assert "b-0@5" in oracle.violations[2].detail, oracle.violations[2]


def test_undelivered_at_drain_is_v5() -> None:
    oracle = diamond()
    assert finish_clauses(oracle) == [V5, V5, V5], oracle.violations
    assert [v.detail.split()[0] for v in oracle.violations] == ["Q#0", "Q#0", "R#0"]


def test_aborted_offset_and_altered_body_are_integrity() -> None:
    oracle = diamond()
    oracle.on_commit("Q#0", [d(A, 1, 1)], [])  # A@1 is a marker, not a record
    leaked = Delivered(A, 0, Body(1000, b"k", b"m0:0", (("app", b"x"), ("parsley.causes", b""))))
    oracle.on_commit("Q#0", [leaked], [])
    assert clauses(oracle) == [V2_INTEGRITY, V2_INTEGRITY], oracle.violations
    oracle.on_commit("P#0", [d(B, 5, 5)], [])
    assert clauses(oracle)[-1] == V2_INTEGRITY, "delivery from an unreceived channel passed"


def test_delivered_causes_must_be_the_header() -> None:
    oracle = diamond()  # B@5's header (no explicit claim) is its true past {A: 0}
    oracle.on_commit("R#0", [Delivered(B, 5, body(5), {A: 0})], [])
    assert oracle.violations == [], "causes equal to the header were flagged"
    oracle = diamond()
    oracle.on_commit("R#0", [Delivered(B, 5, body(5), {A: 2})], [])
    assert clauses(oracle) == [V2_INTEGRITY], "causes differing from the header passed"


def test_broker_offsets_skip_markers_and_aborts() -> None:
    topic = TopicSpec("t", UUID(int=7), 1)
    (ch,) = topic.channels()
    broker = Broker([topic])

    def out(n: int) -> Outgoing:
        return Outgoing(ch, n, None, f"v{n}".encode(), ())

    assert [r.offset for r in broker.transaction([out(0), out(1)], commit=True)] == [0, 1]
    assert [r.offset for r in broker.transaction([out(2)], commit=False)] == [3]
    assert broker.produce(out(3)).offset == 5
    assert broker.logs[ch].layout() == "DDMAMD"
    assert [broker.fetch(ch, p).offset for p in range(6)] == [0, 1, 5, 5, 5, 5]
    assert broker.fetch(ch, 6) is None
    broker.delete_topic("t")
    assert broker.fetch(ch, 0) is None and not broker.exists(topic.topic_id)


def test_header_missing_a_cause_is_m1_and_over_approximation_is_fine() -> None:
    oracle = Oracle({"P#0": [A]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(A, 2, body(2), {})
    # Sent after delivering A@0 only: {A: 2} over-approximates (A@2 was received), fine.
    oracle.on_commit("P#0", [d(A, 0, 0)], [Sent(B, 0, body(5), 0, {A: 2})])
    assert oracle.violations == []
    oracle.on_commit("P#0", [d(A, 2, 2)], [Sent(B, 1, body(6), 0, {A: 0})])
    assert clauses(oracle) == [M1], oracle.violations
    assert "omits its cause 00000000-0000-0000-0000-00000000000a-0@2" in (
        oracle.violations[0].detail)


def test_header_naming_no_record_or_its_own_offset_is_m2() -> None:
    oracle = Oracle({"P#0": [A, B]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(A, 2, body(2), {})
    oracle.on_commit("P#0", [d(A, 0, 0)], [Sent(B, 3, body(5), 0, {A: 1})])  # A@1: a marker
    oracle.on_commit("P#0", [d(A, 2, 2)], [Sent(B, 4, body(6), 0, {A: 2, B: 4})])
    assert clauses(oracle) == [M2, M2, M2], oracle.violations
    assert "own channel" in oracle.violations[-1].detail


def test_deleted_channel_may_be_dropped_from_headers() -> None:
    oracle = Oracle({"P#0": [A, C]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(C, 0, body(1), {})
    oracle.on_delete(A.topic_id)
    oracle.on_commit("P#0", [d(A, 0, 0), d(C, 0, 1)], [Sent(B, 0, body(5), 1, {C: 0})])
    assert oracle.finish() == [], oracle.violations


def test_late_start_owes_nothing_below_it() -> None:
    oracle = diamond()  # A@0, A@2 committed; B@5 caused by A@0
    oracle.on_start("Q#0", {A: 1, B: 0})
    oracle.on_commit("Q#0", [d(B, 5, 5), d(A, 2, 2)], [])
    oracle.on_commit("R#0", [d(B, 5, 5)], [])
    assert oracle.finish() == [], "a cause below the start position was still required"
    oracle.on_commit("Q#0", [d(A, 0, 0)], [])
    assert clauses(oracle) == [V1], "a cause delivered after its effect passed"
    oracle = diamond()
    oracle.on_start("Q#0", {A: 1, B: 0})
    oracle.on_commit("Q#0", [d(A, 0, 0)], [])
    assert clauses(oracle) == [V2_INTEGRITY], "a delivery below the start position passed"


def joined() -> Oracle:
    """X sent B@5 after delivering A@0 only; its header claims A@2 (it had received
    A@2): an allowed over-approximation. P receives B, delivers B@5, then joins A."""
    oracle = Oracle({"P#0": [B], "X#0": [A]})
    oracle.on_source_record(A, 0, body(0), {})
    oracle.on_source_record(A, 2, body(2), {})
    oracle.on_source_record(A, 3, body(3), {})
    oracle.on_commit("X#0", [d(A, 0, 0)], [Sent(B, 5, body(5), 0, {A: 2})])
    oracle.on_commit("X#0", [d(A, 2, 2), d(A, 3, 3)], [])
    oracle.on_commit("P#0", [d(B, 5, 5)], [])
    oracle.on_join("P#0", {A: 0})
    assert oracle.clamps == 1, "the join clamp reached past the start but was not counted"
    return oracle


def test_joining_channel_owes_only_what_lies_beyond_the_delivered_past() -> None:
    oracle = joined()
    oracle.on_commit("P#0", [d(A, 3, 3)], [])
    assert oracle.finish() == [], "records within the delivered past were still owed"


def test_joining_channel_delivering_its_delivered_past_is_caught() -> None:
    oracle = joined()
    oracle.on_commit("P#0", [d(A, 2, 2)], [])  # claimed, not a true cause: the clamp rule
    assert clauses(oracle) == [V2_INTEGRITY], oracle.violations
    oracle = joined()
    oracle.on_commit("P#0", [d(A, 0, 0)], [])  # a true cause of B@5, delivered after it
    assert clauses(oracle) == [V1], oracle.violations


def test_broker_log_start_and_truncation() -> None:
    topic = TopicSpec("t", UUID(int=7), 1)
    (ch,) = topic.channels()
    broker = Broker([topic], {ch: 2**31 - 1})
    first = broker.produce(Outgoing(ch, 0, None, b"a", ()))
    second = broker.produce(Outgoing(ch, 1, None, b"b", ()))
    assert (first.offset, second.offset) == (2**31 - 1, 2**31), "base offset not honoured"
    broker.truncate(ch, 2**31)
    assert broker.log_start(ch) == 2**31
    assert broker.fetch(ch, 2**31) == second
    try:
        broker.fetch(ch, 2**31 - 1)
    except AssertionError as exc:
        assert "below the log start" in str(exc)
    else:
        raise AssertionError("a fetch below the log start was answered")
