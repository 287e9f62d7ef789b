"""The pure rules of the worker's liveness: the watchdog's verdict and the transaction pacing."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from workers.calls import WATCHDOG_MARGIN_S
from workers.pacing import (
    MAX_BATCH,
    MAX_DELIVERY_BATCH,
    BatchSizer,
    close_after_s,
    delivery_batches,
)
from workers.watchdog import (
    CALL_BOUNDS_S,
    STOP_GRACE_S,
    ActionKind,
    Armed,
    Watchdog,
    bound_of,
    decide,
)


def test_no_action_while_calls_are_within_their_bounds() -> None:
    armed = (Armed("consume", 0.0, 30.0), Armed("abort_transaction", 1.0, 25.0))
    assert decide(20.0, armed, stop_asked_at=None, parent_alive=True) is None


def test_the_innermost_expired_call_is_named_with_its_duration_and_bound() -> None:
    armed = (Armed("consume", 0.0, 30.0), Armed("abort_transaction", 1.0, 25.0))
    action = decide(26.5, armed, stop_asked_at=None, parent_alive=True)
    assert action is not None and action.kind is ActionKind.CALL_EXPIRED
    assert action.detail.startswith("abort_transaction blocked 25.5 s (bound 25 s)")


def test_a_stop_waits_the_grace_for_a_blocked_call_and_not_for_an_idle_loop() -> None:
    armed = (Armed("send_offsets_to_transaction", 0.0, 25.0),)
    assert decide(4.0, armed, stop_asked_at=0.0, parent_alive=True) is None
    action = decide(STOP_GRACE_S, armed, stop_asked_at=0.0, parent_alive=True)
    assert action is not None and action.kind is ActionKind.STOP_BLOCKED
    assert "send_offsets_to_transaction" in action.detail
    assert decide(100.0, (), stop_asked_at=0.0, parent_alive=True) is None


def test_the_parent_gone_comes_first() -> None:
    action = decide(0.0, (Armed("consume", 0.0, 30.0),), stop_asked_at=None,
                    parent_alive=False)
    assert action is not None and action.kind is ActionKind.PARENT_GONE


def test_every_bound_is_at_most_40_s_below_the_coordinators_default_60_s_backstop() -> None:
    assert all(0 < b <= 40 for b in CALL_BOUNDS_S.values())
    with pytest.raises(KeyError):
        bound_of("not a call")


def test_a_watchdog_refuses_to_begin_a_call_once_its_parent_changed() -> None:
    fired: list[ActionKind] = []
    dog = Watchdog(lambda a: fired.append(a.kind), 12, parent_pid=os.getppid() + 1_000_000)
    dog._fatal = lambda action: fired.append(action.kind)  # type: ignore[assignment,method-assign,union-attr]
    with dog.bounded("consume"):
        pass
    assert fired == [ActionKind.PARENT_GONE]


def test_a_transaction_closes_at_half_the_timeout() -> None:
    assert close_after_s(10_000) == 5.0


def test_batches_follow_the_measured_handler_cost() -> None:
    sizer = BatchSizer(target_s=1.25)
    assert sizer.size() == MAX_BATCH
    sizer.observe(100, 6.0)  # 60 ms per message
    assert sizer.size() == 20
    sizer.observe(0, 3.0)  # nothing delivered: no measure
    assert sizer.size() == 20
    for _ in range(30):
        sizer.observe(500, 0.05)  # cheap again
    assert sizer.size() == MAX_BATCH
    sizer.observe(1, 10.0)  # one very slow message
    assert sizer.size() >= 1


def test_delivery_batches_start_at_one_head_and_take_a_tenth_of_the_shorter_bound() -> None:
    # close after 5 s, a pass of 0.5 s: one batch should take about 50 ms.
    sizer = delivery_batches(close_after_s(10_000), 0.5)
    assert sizer.size() == 1, "before any measure, one head: its cost is unknown"
    sizer.observe(1, 0.060)  # a 60 ms handler
    assert sizer.size() == 1
    sizer = delivery_batches(close_after_s(10_000), 0.5)
    sizer.observe(1, 0.004)  # 4 ms: 12 heads take about 50 ms
    assert sizer.size() == 12
    for _ in range(30):
        sizer.observe(64, 64 * 20e-6)  # a relay's 20 us
    assert sizer.size() == MAX_DELIVERY_BATCH
    # No pass length: the close time bounds the batch; neither: 0.1 s.
    only_close = delivery_batches(5.0, None)
    only_close.observe(1, 0.004)
    assert only_close.size() == MAX_DELIVERY_BATCH
    only_close.observe(1, 0.1)
    assert 1 < only_close.size() < MAX_DELIVERY_BATCH
    assert delivery_batches(None, None).target_s == pytest.approx(0.1)
    with pytest.raises(ValueError):
        BatchSizer(1.0, max_records=4, initial=5)


def test_the_stop_grace_counts_from_the_later_of_the_stop_and_the_calls_start() -> None:
    # A clean stop's final commit begun 5.25 s after SIGTERM has its own 5 s grace.
    late = (Armed("send_offsets_to_transaction", 5.25, 25.0),)
    assert decide(5.25, late, stop_asked_at=0.0, parent_alive=True) is None
    assert decide(5.25 + STOP_GRACE_S - 0.1, late, stop_asked_at=0.0, parent_alive=True) is None
    action = decide(5.25 + STOP_GRACE_S, late, stop_asked_at=0.0, parent_alive=True)
    assert action is not None and action.kind is ActionKind.STOP_BLOCKED
    assert f"blocked in send_offsets_to_transaction for {STOP_GRACE_S:.1f} s" in action.detail
    # A call blocked since before the stop: the grace counts from the stop.
    early = (Armed("commit_transaction", 0.0, 25.0),)
    assert decide(3.0 + STOP_GRACE_S - 0.1, early, stop_asked_at=3.0, parent_alive=True) is None
    action = decide(3.0 + STOP_GRACE_S, early, stop_asked_at=3.0, parent_alive=True)
    assert action is not None and action.kind is ActionKind.STOP_BLOCKED
    assert "for 8.0 s" in action.detail


def test_a_watchdog_exit_never_claims_that_nothing_was_committed() -> None:
    # The call runs on in C while the final report is pushed: a commit may complete.
    armed = (Armed("commit_transaction", 0.0, 25.0),)
    expired = decide(25.5, armed, stop_asked_at=None, parent_alive=True)
    blocked = decide(STOP_GRACE_S, armed, stop_asked_at=0.0, parent_alive=True)
    for action in (expired, blocked):
        assert action is not None
        assert "may have committed the transaction in flight" in action.detail
        assert "without committing" not in action.detail


def test_learning_upstream_names_gives_up_on_list_topics_at_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A real client on an address nobody answers: list_topics blocks its full timeout.
    from confluent_kafka.admin import AdminClient

    from workers import admin as admin_queries
    from workers import watchdog
    from workers.identity import IdentityChecker

    admin = AdminClient({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    checker = IdentityChecker(admin, deadline_s=1.5)
    seen: list[Armed] = []
    fired: list[str] = []
    dog = Watchdog(lambda a: None, 12, parent_pid=None)
    dog._fatal = lambda action: fired.append(action.detail)  # type: ignore[assignment,method-assign,union-attr]
    real_decide = watchdog.decide

    def watching(now: float, armed: tuple[Armed, ...], **kw: object) -> object:
        seen.extend(armed)
        return real_decide(now, armed, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(watchdog, "decide", watching)
    # A bound shorter than the call (deadline 1.5 s - 1 s): the worker gives up on the
    # call itself (workers.calls), before the client's own 1.5 s, and the watchdog, armed
    # with a margin over the bound, never fires.
    monkeypatch.setattr(admin_queries, "LIST_TOPICS_MARGIN_S", -1.0)
    watchdog.install(dog)
    try:
        dog.start(signals=False)
        began = time.monotonic()
        assert checker.learn_names({uuid.uuid4()}) == {}
        took = time.monotonic() - began
    finally:
        watchdog.install(None)
    assert {(a.call, a.bound_s) for a in seen} == {("list_topics", 0.5 + WATCHDOG_MARGIN_S)}
    assert took < 1.4, f"list_topics was not given up at its 0.5 s bound ({took:.2f} s)"
    assert not fired


def test_a_handler_that_slows_down_cuts_the_next_delivery_batch_to_the_slowest_cost() -> None:
    # Close after 5 s (transaction.timeout.ms=10 s): 64 heads at 1 ms each.
    sizer = delivery_batches(close_after_s(10_000), None)
    for _ in range(10):
        sizer.observe(64, 64 * 0.001, 0.001)
    assert sizer.size() == MAX_DELIVERY_BATCH
    # The downstream slows to 150 ms per message. The next batch is sized at 150 ms,
    # not at the moving average (which still says about 46 ms).
    sizer.observe(64, 64 * 0.150, 0.150)
    assert sizer.size() * 0.150 <= sizer.target_s
    # One slow message in an otherwise fast batch counts as well.
    sizer = delivery_batches(close_after_s(10_000), None)
    for _ in range(10):
        sizer.observe(64, 64 * 0.001, 0.001)
    sizer.observe(64, 63 * 0.001 + 0.150, 0.150)
    assert sizer.size() * 0.150 <= sizer.target_s


def test_a_delivery_batch_never_takes_more_than_the_time_left_at_the_slowest_cost() -> None:
    sizer = delivery_batches(close_after_s(10_000), None)
    for _ in range(10):
        sizer.observe(64, 64 * 0.001, 0.001)
    # 4.9 s into the 5 s close time: 0.1 s left, 1 ms per message: at most 100 ms of work.
    assert sizer.limit(0.1) * 0.001 <= 0.1
    sizer.observe(1, 0.150, 0.150)
    for left in (4.0, 1.0, 0.5, 0.3):
        assert sizer.limit(left) * 0.150 <= left
    # Past the bound: still one head, so a pass always makes progress.
    assert sizer.limit(0.0) == 1 and sizer.limit(-1.0) == 1
    # The peak fades by halves over fast batches: the size grows back.
    for _ in range(12):
        sizer.observe(64, 64 * 0.001, 0.001)
    assert sizer.limit(5.0) == MAX_DELIVERY_BATCH
