"""The identity check's pure rules: three answers make a verdict; the retry backoff (docs/model.md,
"Pruning")."""

from __future__ import annotations

from parsley.engine.engine import TopicVerdict
from tests.seed_shapes import assert_seed_shape
from workers.identity import Answer, Backoff, judge

S, U, E, D = Answer.SAME, Answer.UNKNOWN, Answer.ELSEWHERE, Answer.DENIED


def test_one_alive_or_denied_answer_is_alive() -> None:
    assert judge([S]) is TopicVerdict.ALIVE
    assert judge([D]) is TopicVerdict.ALIVE
    assert judge([U, U, S]) is TopicVerdict.ALIVE
    assert judge([U, D]) is TopicVerdict.ALIVE


def test_three_non_alive_answers_are_needed() -> None:
    assert judge([]) is None
    assert judge([U]) is None
    assert judge([U, E]) is None
    assert judge([U, U, U]) is TopicVerdict.DELETED


def test_any_answer_elsewhere_among_three_means_recreated() -> None:
    assert judge([U, E, U]) is TopicVerdict.RECREATED
    assert judge([E, E, E]) is TopicVerdict.RECREATED


def test_backoff_starts_at_the_status_interval_doubles_and_caps_at_a_minute() -> None:
    b = Backoff(first_s=1.0)
    assert b.due(0.0)
    delays = []
    now = 0.0
    for _ in range(9):
        b.failed(now)
        delays.append(b.delay_s)
        assert not b.due(now + b.delay_s - 0.01)
        assert b.due(now + b.delay_s)
        now += b.delay_s
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]



def test_a_deleted_received_topic_with_nothing_held_is_named_for_the_stop() -> None:
    import uuid

    from parsley.engine.channel import ChannelId, kafka_topic_id
    from workers.identity import settled_detail

    a, b = ChannelId(uuid.UUID(int=1), 0), ChannelId(uuid.UUID(int=2), 3)
    channels = {"a": a, "b": b}
    detail = settled_detail({b.topic_id: TopicVerdict.DELETED, a.topic_id: TopicVerdict.ALIVE},
                            channels)
    assert detail is not None and detail.startswith(
        f"received topic 'b' partition 3 (topic id {kafka_topic_id(b.topic_id)}) was deleted "
        "while the process ran; nothing was held on it")
    assert "docs/runbooks.md" in detail
    assert settled_detail({a.topic_id: TopicVerdict.ALIVE}, channels) is None


def test_a_deleted_topic_read_past_its_coverage_is_refused_with_the_offsets() -> None:
    import uuid

    from parsley.engine.channel import ChannelId, kafka_topic_id
    from parsley.refusals import Reason
    from workers.identity import unread_on_deleted

    a, b = ChannelId(uuid.UUID(int=1), 0), ChannelId(uuid.UUID(int=2), 0)
    channels = {"a": a, "b": b}
    deleted = {b.topic_id: TopicVerdict.DELETED, a.topic_id: TopicVerdict.ALIVE}
    coverage: dict[ChannelId, int | None] = {a: 9, b: 4}
    # b was read to offset 6 (end 7) but its state covers only up to 4: 5 and 6 lost.
    refusal = unread_on_deleted(deleted, channels, {("a", 0): 20, ("b", 0): 7},
                                coverage.get)
    assert refusal is not None
    assert refusal.reason is Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES
    assert refusal.detail.startswith(
        f"2 received message(s) from {b} remain undelivered but the channel's topic no longer "
        "exists; their place in causal order can no longer be preserved. At most that many: "
        f"offsets 5 to 6 of topic 'b' partition 0, topic id {kafka_topic_id(b.topic_id)} "
        "were read but their read was never committed"), refusal.detail
    assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, refusal.detail)
    assert "docs/runbooks.md" in refusal.detail
    # Nothing ever covered on b: every offset read from the start is lost.
    whole = unread_on_deleted(deleted, channels, {("b", 0): 7}, {a: 9}.get)
    assert whole is not None
    assert whole.detail.startswith(f"7 received message(s) from {b} remain undelivered")


def test_a_deleted_topic_covered_to_what_was_read_or_alive_or_unread_is_not_refused() -> None:
    import uuid

    from parsley.engine.channel import FED_TO_END, ChannelId
    from workers.identity import unread_on_deleted

    a, b = ChannelId(uuid.UUID(int=1), 0), ChannelId(uuid.UUID(int=2), 0)
    channels = {"a": a, "b": b}
    deleted = {b.topic_id: TopicVerdict.DELETED}
    assert unread_on_deleted(deleted, channels, {("b", 0): 7}, {b: 6}.get) is None
    assert unread_on_deleted(deleted, channels, {("b", 0): 7}, {b: FED_TO_END}.get) is None
    assert unread_on_deleted(deleted, channels, {("a", 0): 7}, {}.get) is None
    assert unread_on_deleted({b.topic_id: TopicVerdict.ALIVE}, channels, {("b", 0): 7},
                             {}.get) is None
