"""load_image streams its input: one pass, each held body dropped once validated
(docs/performance.md).

A restore hands :func:`parsley.engine.state_codec.load_image` the ordering store's
lazy scan; holding every body at once (``list(items)``) cost ~100 MB for 10^5
held messages of 1 KiB. Bodies here are a ``bytes`` subclass counting its live
instances, so the test sees how many the decoder kept alive at once. The version
entry still decides first although ``'v'`` sorts after every state tag.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar
from uuid import UUID

import pytest

from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason

# Every test runs on both codec implementations (tests/conftest.py, "codecs").
pytestmark = pytest.mark.usefixtures("codecs")

CH = ChannelId(UUID("0102030405060708090a0b0c0d0e0f10"), 3)
BODY = sc.encode_held(sc.HeldMessage(7, b"k", b"x" * 1024, (), ()))
N = 2_000


class Body(bytes):
    """A held body that counts the live instances (peak kept in ``peak``)."""

    live: ClassVar[int] = 0
    peak: ClassVar[int] = 0

    def __new__(cls, data: bytes) -> Body:
        obj = super().__new__(cls, data)
        Body.live += 1
        Body.peak = max(Body.peak, Body.live)
        return obj

    def __del__(self) -> None:
        Body.live -= 1


def _entries(version: bytes | None = sc.VERSION_VALUE, corrupt_at: int | None = None
             ) -> Iterator[tuple[bytes, bytes]]:
    """A scan in key order: the coverage row, N held rows, then the version entry."""
    yield sc.fed_key(CH), sc.encode_long(N)
    for p in range(N):
        body = BODY[:-1] if p == corrupt_at else BODY
        yield sc.held_key(CH, p), Body(body)
    if version is not None:
        yield sc.VERSION_KEY, version


def test_held_bodies_are_not_all_alive_at_once() -> None:
    Body.live = Body.peak = 0
    image = sc.load_image(_entries())
    assert image.has_version and image.held == {CH: list(range(N))}
    assert Body.peak <= 2, Body.peak  # list(items) kept all N alive
    assert Body.live == 0


def test_a_corrupt_body_is_refused_after_the_version_verdict() -> None:
    # Good version: the corrupt body's own diagnosis.
    with pytest.raises(ParsleyFailClosedError) as good:
        sc.load_image(_entries(corrupt_at=5))
    assert good.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert "format not understood" not in good.value.detail
    assert "without its format version entry" not in good.value.detail
    # Unknown version: the version decides, although it arrives last.
    with pytest.raises(ParsleyFailClosedError) as unknown:
        sc.load_image(_entries(version=b"\x02", corrupt_at=5))
    assert unknown.value.detail.startswith("ordering store format not understood")
    # No version with state present: the lost head decides.
    with pytest.raises(ParsleyFailClosedError) as lost:
        sc.load_image(_entries(version=None, corrupt_at=0))
    assert lost.value.detail.startswith("ordering state present without its format version")
