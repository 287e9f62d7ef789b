"""The gateway example's projection under ``parsley.testing`` (no broker).

Each row it sends carries the past recorded from the deliveries themselves
(``ReadTier.record``): the comments topic's channel at the comment's own offset. A cause
the comment carried on another topic (a token's entry) reaches the frontier, and so the
row's own ``parsley.causes``, but never the recorded past: a past built from the frontier
would vouch for what the projection never delivered (docs/session.md, "The read path").
"""

from __future__ import annotations

from uuid import UUID

import orjson
import pytest

from examples.gateway.projection import CLOCK_KEY, Topics, build
from parsley.engine.channel import ChannelId
from parsley.session import CausalPast, WriteTier
from parsley.testing import HandlerFailure, ParsleyTestDriver

TOPICS = Topics("app")
OTHER = UUID("0102030405060708090a0b0c0d0e0f10")


def _driver() -> tuple[ParsleyTestDriver, ChannelId]:
    probe = ParsleyTestDriver(build(TOPICS, {TOPICS.comments: OTHER}))
    comments_id = probe.topic_id(TOPICS.comments)
    driver = ParsleyTestDriver(build(TOPICS, {TOPICS.comments: comments_id}))
    return driver, ChannelId(comments_id, 0)


def test_rows_carry_the_past_recorded_from_each_delivery() -> None:
    driver, channel = _driver()
    first = driver.pipe(TOPICS.comments, {"id": "c1", "author": "ann", "text": "hi"}, key="t1")
    second = driver.pipe(TOPICS.comments, {"id": "c2", "author": "bob", "text": "yo"}, key="t2")
    rows = [orjson.loads(r.value_bytes or b"") for r in driver.read(TOPICS.threads)]
    assert [(row["thread"], [c["id"] for c in row["comments"]]) for row in rows] == [
        ("t1", ["c1"]), ("t2", ["c2"])]
    pasts = [CausalPast.decode(bytes.fromhex(row["past"])) for row in rows]
    assert pasts == [CausalPast.of({channel: first.offset}),
                     CausalPast.of({channel: second.offset})]
    assert driver.store("threads", "clock") == {CLOCK_KEY: rows[-1]["past"]}


def test_the_recorded_past_never_takes_the_frontier() -> None:
    driver, channel = _driver()
    # A client's token names a channel of a topic the projection does not receive.
    token = CausalPast.of({ChannelId(OTHER, 3): 99})
    stamped = WriteTier({TOPICS.comments: channel.topic_id}).stamp(token)
    record = driver.pipe(TOPICS.comments, {"id": "c1", "author": "ann", "text": "hi"},
                         key="t1", headers=stamped)
    [row_record] = driver.read(TOPICS.threads)
    row = orjson.loads(row_record.value_bytes or b"")
    assert CausalPast.decode(bytes.fromhex(row["past"])) == CausalPast.of(
        {channel: record.offset}), "the recorded past named a channel it never delivered"
    frontier = CausalPast.decode(row_record.causes_header)
    assert frontier.causes[ChannelId(OTHER, 3)] == 99, "the cause must still travel on"


def test_a_record_that_is_not_a_comment_stops_the_projection() -> None:
    driver, _ = _driver()
    with pytest.raises(HandlerFailure, match="not a gateway comment"):
        driver.pipe(TOPICS.comments, "plain text", key="t1")
