"""The class of a held head's blocker (parsley.status), and how status carries it (no broker).

docs/runbooks.md, "A message is held and not moving": behind, inside an open transaction,
not produced yet, at an offset no committed record occupies. The reference model below
restates the rule from the runbook's words; hypothesis compares the two.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.control.status import TaskStatus
from coordinator.control.status_view import blocker_text
from parsley.status import (
    Blocker,
    ChannelFigures,
    HeldChannel,
    HoldClass,
    TaskDiagnosis,
    classify_blocker,
)


def reference(required: int, lso: int, end: int, position: int | None,
              head: int | None) -> HoldClass:
    """The runbook's reading: the record does not exist yet (beyond the end); it exists but
    is uncommitted (from the last stable offset on); the reader passed the offset without a
    record there to hold (no record); otherwise the task has not delivered it (behind)."""
    exists = required < end
    stable = required < lso
    passed_without_record = (position is not None and position > required
                             and not (head is not None and head <= required))
    if not exists:
        return HoldClass.NOT_PRODUCED
    if not stable:
        return HoldClass.OPEN_TRANSACTION
    return HoldClass.NO_RECORD if passed_without_record else HoldClass.BEHIND


def test_the_issue_s_payment_is_inside_an_open_transaction() -> None:
    # needs 152 settled 151; kafka-get-offsets --time latest says 153 (the open record).
    assert classify_blocker(152, ChannelFigures(152, 153, 152), None) is \
        HoldClass.OPEN_TRANSACTION
    assert classify_blocker(152, ChannelFigures(152, 152, 152), None) is HoldClass.NOT_PRODUCED
    assert classify_blocker(152, ChannelFigures(160, 160, 140), None) is HoldClass.BEHIND
    # A commit marker at 152, the consumer at 153: no record there.
    assert classify_blocker(152, ChannelFigures(153, 153, 153), None) is HoldClass.NO_RECORD
    # A chain: the cause at 152 was fed and is itself held (head 150): behind, not no_record.
    assert classify_blocker(152, ChannelFigures(160, 160, 160), 150) is HoldClass.BEHIND


@given(required=st.integers(0, 40), lso=st.integers(0, 40), extra=st.integers(0, 5),
       position=st.none() | st.integers(0, 45), head=st.none() | st.integers(0, 40))
def test_the_class_matches_the_runbooks_reading(required: int, lso: int, extra: int,
                                                position: int | None,
                                                head: int | None) -> None:
    end = lso + extra
    assert classify_blocker(required, ChannelFigures(lso, end, position), head) is \
        reference(required, lso, end, position, head)


def test_a_diagnosis_is_classed_where_figures_are_known_and_round_trips() -> None:
    diagnosis = TaskDiagnosis((
        HeldChannel("payments", 0, 3, 12, (Blocker("orders", 0, 152, 151),
                                           Blocker("refunds", 0, 4, None))),
        HeldChannel("orders", 0, 1, 150, ()),
    ), 2, 54, 262144)
    classed = diagnosis.with_figures({("orders", 0): ChannelFigures(152, 153, 152)})
    first, unknown = classed.held[0].blockers
    assert (first.hold_class, first.last_stable, first.end) == (
        HoldClass.OPEN_TRANSACTION, 152, 153)
    assert (unknown.hold_class, unknown.last_stable, unknown.end) == (None, None, None)
    doc = classed.to_json()
    assert doc["held"][0]["blockers"][0] | {} == {
        "topic": "orders", "partition": 0, "required": 152, "settled": 151,
        "class": "open_transaction", "last_stable": 152, "end": 153}
    task = TaskStatus.from_json({"task": 0, "pid": 1, **doc})
    assert task.held == classed.held, "the coordinator reads back what the worker sent"
    assert blocker_text(first) == \
        "orders[0] needs 152 settled 151 (in open txn, LSO 152 end 153)"
    assert blocker_text(unknown) == "refunds[0] needs 4 settled -"
