"""Which incomplete assignments warn (workers.assignment, pure)."""

from __future__ import annotations

import logging

from workers.assignment import IncompleteAssignment


def test_a_start_logs_info_and_warns_only_past_the_grace() -> None:
    notice = IncompleteAssignment(grace_s=30.0)
    assert notice.assigned(False, 0.0) is None  # empty
    assert notice.assigned(True, 1.0) == logging.INFO
    assert notice.overdue(20.0) is None
    assert notice.assigned(True, 25.0) == logging.INFO  # the clock keeps its first start
    assert notice.overdue(31.0) == 30.0
    assert notice.overdue(40.0) is None  # once


def test_the_exact_assignment_in_time_never_warns_and_a_later_rebalance_does() -> None:
    notice = IncompleteAssignment(grace_s=30.0)
    assert notice.assigned(True, 0.0) == logging.INFO
    notice.running()
    assert notice.overdue(100.0) is None
    assert notice.assigned(True, 101.0) == logging.WARNING
    assert notice.overdue(200.0) is None
