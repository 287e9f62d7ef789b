"""A commit made while a fetched batch is unfed moves no read position past markers.

``Consumer.position`` counts every record ``consume`` returned. The loop handles a batch's
errors before it feeds its records, and an error's handling may commit (a deletion check
commits before it blocks: ``Worker._before_blocking``); a commit past trailing markers
then would pass records never fed, and the next start would never read them
(docs/failing-closed.md, "Read positions"). ``Worker.unfed`` marks that window.
"""

from __future__ import annotations

from workers.main import Worker


def test_past_markers_is_empty_while_records_are_unfed() -> None:
    worker = Worker.__new__(Worker)  # no clients: reading a position would fail
    worker.unfed = True
    assert worker._past_markers() == {}
