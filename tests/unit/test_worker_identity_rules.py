"""The identity check's pure rules: three answers make a verdict; the retry backoff (facts §5)."""

from __future__ import annotations

from parsley.engine.engine import TopicVerdict
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
