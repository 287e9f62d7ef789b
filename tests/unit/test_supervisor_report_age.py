"""How long a worker's report waited before the coordinator read it
(``coordinator.runtime.supervisor.intake._in_flight_s``; docs/operations.md, "Status")."""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.runtime.supervisor.intake import _in_flight_s


def _msg(sent: Any) -> dict[str, Any]:
    return {"kind": "status", "sent_ms": sent}


def test_a_report_sent_earlier_waited_that_long() -> None:
    assert 4.9 <= _in_flight_s(_msg(int(time.time() * 1000) - 5_000)) <= 6.0


@pytest.mark.parametrize("sent", [None, True, "1765000000000", [1], {}])
def test_a_missing_or_unreadable_stamp_counts_as_no_wait(sent: Any) -> None:
    assert _in_flight_s(_msg(sent)) == 0.0
    assert _in_flight_s({"kind": "status"}) == 0.0


def test_a_stamp_from_the_future_counts_as_no_wait() -> None:
    assert _in_flight_s(_msg(int(time.time() * 1000) + 60_000)) == 0.0
