"""RepeatFilter: librdkafka's repeated lines pass once per window, with a count after."""

from __future__ import annotations

import logging

from coordinator.bootstrap.common import RepeatFilter, unreachable_message


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("k", logging.ERROR, __file__, 1, msg, (), None)


def test_repeats_are_held_for_the_window_then_counted() -> None:
    now = [0.0]
    f = RepeatFilter(window_s=60.0, clock=lambda: now[0])
    line = "Connect to ipv4#127.0.0.1:9 failed: Connection refused (after {}ms in state CONNECT)"
    assert f.filter(_record(line.format(0)))
    passed = [f.filter(_record(line.format(i))) for i in range(1, 500)]
    assert not any(passed)
    assert f.filter(_record("another line"))
    now[0] = 61.0
    rec = _record(line.format(3))
    assert f.filter(rec)
    assert "499 similar line(s) suppressed in the last 60 s" in rec.getMessage()
    assert not f.filter(_record(line.format(4)))


def test_unreachable_message_names_the_address_not_acls() -> None:
    msg = unreachable_message("h:9", "_TRANSPORT")
    assert msg.startswith("could not reach the Kafka cluster at h:9 (_TRANSPORT)")
    assert "Describe" not in msg
