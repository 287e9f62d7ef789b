"""FrontierEncoding: incremental size and patched bytes equal the codec's, always."""

from __future__ import annotations

import random
from uuid import UUID

import pytest

from parsley.engine.channel import ChannelId
from parsley.engine.frontier import FrontierEncoding
from parsley.wire import encode_causes, encoded_size

pytestmark = pytest.mark.usefixtures("engine_impl")


@pytest.mark.parametrize("seed", range(20))
def test_size_and_header_track_the_codec(seed: int) -> None:
    rnd = random.Random(seed)
    topics = [UUID(int=rnd.getrandbits(128) | 1) for _ in range(4)]
    partitions = [0, 1, 5, 127, 128, 300, 16_383, 16_384, 2**31 - 1]
    frontier: dict[ChannelId, int] = {}
    enc = FrontierEncoding()
    for step in range(300):
        op = rnd.random()
        ch = ChannelId(rnd.choice(topics), rnd.choice(partitions))
        if op < 0.45:
            if ch in frontier:
                frontier[ch] += rnd.randrange(1, 2**40)
                enc.moved.append(ch)
            else:
                frontier[ch] = rnd.randrange(2**62)
                enc.added(ch)
        elif op < 0.55 and ch in frontier:
            del frontier[ch]
            enc.removed(ch)
        elif op < 0.6:
            enc.trim(len(frontier))
        assert enc.size() == encoded_size(frontier), f"size at step {step}"
        if rnd.random() < 0.5:
            assert enc.header(frontier) == encode_causes(frontier), f"bytes at step {step}"


def test_header_is_cached_until_something_moves() -> None:
    ch = ChannelId(UUID(int=7), 3)
    enc = FrontierEncoding()
    frontier = {ch: 1}
    enc.added(ch)
    first = enc.header(frontier)
    assert enc.header(frontier) is first
    frontier[ch] = 2
    enc.moved.append(ch)
    assert enc.header(frontier) == encode_causes(frontier) != first
    assert enc.size() == 28 and FrontierEncoding().size() == 2


def test_trim_bounds_pending_moves() -> None:
    ch = ChannelId(UUID(int=7), 3)
    enc = FrontierEncoding()
    frontier = {ch: 1}
    enc.added(ch)
    enc.header(frontier)
    for p in range(2, 10):
        frontier[ch] = p
        enc.moved.append(ch)
    enc.trim(len(frontier))
    assert enc.moved == [], "moves beyond the frontier's size are dropped for a re-encode"
    assert enc.header(frontier) == encode_causes(frontier)
