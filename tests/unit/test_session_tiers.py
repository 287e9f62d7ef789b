"""``parsley.session.WriteTier`` and ``ReadTier``: topic names to channels at the two tiers.

A stamped record's headers are read back through the engine's own receipt path
(``parsley.wire.causes_from_headers``), so what the write tier stamps is what a Parsley
process downstream enforces.
"""

from __future__ import annotations

from uuid import UUID

import pytest

from parsley import Delivery, wire
from parsley.engine.channel import ChannelId
from parsley.session import CausalPast, ReadTier, WriteTier

COMMENTS = UUID("0102030405060708090a0b0c0d0e0f10")
THREADS = UUID("f102030405060708090a0b0c0d0e0f10")
IDS = {"app.comments": COMMENTS, "app.threads": THREADS}


def test_stamp_adds_one_causes_header_the_engine_reads_back() -> None:
    token = CausalPast.of({ChannelId(COMMENTS, 0): 12, ChannelId(THREADS, 1): 3})
    headers = WriteTier(IDS).stamp(token, [("trace", b"t-1"), ("empty", None)])
    assert headers[:2] == [("trace", b"t-1"), ("empty", None)]
    assert headers[2] == (wire.CAUSES_HEADER, token.encode())
    assert wire.causes_from_headers(headers, 262_144) == dict(token.causes)


def test_an_empty_token_stamps_no_header() -> None:
    assert WriteTier(IDS).stamp(CausalPast.none(), [("a", b"1")]) == [("a", b"1")]
    assert WriteTier(IDS).stamp(CausalPast.none()) == []


def test_stamp_refuses_a_reserved_application_header() -> None:
    with pytest.raises(ValueError, match=r"header 'parsley\.causes' uses the reserved prefix"):
        WriteTier(IDS).stamp(CausalPast.none(), [("parsley.causes", b"\x01\x00")])
    with pytest.raises(TypeError, match="stamp needs a CausalPast, got dict"):
        WriteTier(IDS).stamp({})  # type: ignore[arg-type]


def test_acknowledged_merges_the_records_own_coordinate() -> None:
    write = WriteTier(IDS)
    token = CausalPast.of({ChannelId(COMMENTS, 0): 12})
    after = write.acknowledged(token, "app.comments", 1, 40)
    assert after.causes == {ChannelId(COMMENTS, 0): 12, ChannelId(COMMENTS, 1): 40}
    assert write.acknowledged(after, "app.comments", 0, 5) is after


def test_acknowledged_refuses_a_failed_produce_and_an_unknown_topic() -> None:
    write = WriteTier(IDS)
    with pytest.raises(ValueError, match=r"offset -1001 .* not an acknowledged record's offset"):
        write.acknowledged(CausalPast.none(), "app.comments", 0, -1001)
    with pytest.raises(ValueError, match=r"topic 'app.other' has no topic id known to this tier "
                                         r"\(it knows 'app.comments', 'app.threads'\)"):
        write.acknowledged(CausalPast.none(), "app.other", 0, 1)


def test_record_merges_the_deliverys_own_coordinate() -> None:
    read = ReadTier(IDS)
    first = Delivery("app.comments", 2, 7, 0, "thread-a", {"text": "hi"})
    recorded = read.record(CausalPast.none(), first)
    assert recorded.causes == {ChannelId(COMMENTS, 2): 7}
    later = Delivery("app.comments", 2, 9, 0, "thread-b", {"text": "yo"})
    assert read.record(recorded, later).causes == {ChannelId(COMMENTS, 2): 9}
    with pytest.raises(ValueError, match="topic 'elsewhere' has no topic id"):
        read.record(recorded, Delivery("elsewhere", 0, 1, 0, None, None))


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        ([("a", COMMENTS)], TypeError, "topic_ids must map topic names"),
        ({"a": str(COMMENTS)}, TypeError, "must map str to uuid.UUID, got 'a': str"),
        ({"a": UUID(int=0)}, ValueError, "topic 'a' has the zero topic id"),
    ],
)
def test_tiers_refuse_bad_topic_ids(ids: object, error: type[Exception], message: str) -> None:
    for tier in (WriteTier, ReadTier):
        with pytest.raises(error, match=message):
            tier(ids)  # type: ignore[arg-type]


def test_topic_ids_are_copied() -> None:
    ids = dict(IDS)
    tier = WriteTier(ids)
    ids["app.comments"] = THREADS
    assert tier.channel("app.comments", 0) == ChannelId(COMMENTS, 0)
    assert tier.topic_ids == IDS
