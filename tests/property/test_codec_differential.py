"""Differential properties: the Rust codec and the Python reference on the same inputs.

Hypothesis feeds both implementations (tests/codec_impls.py) the same random and
mutated bytes, cause sets, held messages and ordering-state images, and compares
the whole outcome: the value returned (dict order included), or the refusal's
reason and detail, or another exception's type and text. Anything that differs
fails with the input, so the case replays.

Without a built ``parsley._native`` the reference is compared with itself (a
determinism check); under ``CI=true`` tests/unit/test_native_built.py fails the
run in that case, so CI always runs the real comparison.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from parsley.engine import state_codec as sc
from parsley.engine.channel import FED_TO_END, ChannelId
from parsley.native import BUILT
from parsley.refusals import ParsleyFailClosedError
from tests.codec_impls import NATIVE, PYTHON
from tests.property.test_wire_properties import cause_sets, topic_ids

OTHER = NATIVE or PYTHON


def outcome(fn: Callable[..., Any], *args: Any) -> tuple[Any, ...]:
    """What a call did: ("ok", value, order) or ("refused", reason, detail) or ("error", ...)."""
    try:
        value = fn(*args)
    except ParsleyFailClosedError as exc:
        return ("refused", exc.reason, exc.detail)
    except Exception as exc:
        return ("error", type(exc).__name__, str(exc))
    order = list(value.items()) if isinstance(value, dict) else None
    if isinstance(value, sc.OrderingImage):
        order = [list(getattr(value, f).items())
                 for f in ("fed", "frontier", "past", "names", "held")]
    return ("ok", value, order)


def same(name: str, *args: Any) -> tuple[Any, ...]:
    a = outcome(getattr(PYTHON, name), *args)
    b = outcome(getattr(OTHER, name), *args)
    assert a == b, f"{name} differs on {args!r}:\n python {a!r}\n native {b!r}"
    return a


# ------------------------------------------------------------------ parsley.causes


def mutate(value: bytes, kind: int, where: int, byte: int, length: int) -> bytes:
    i = where % (len(value) + 1)
    return [
        value[:i] + bytes((byte,)) + value[i + 1:],
        value[:i],
        value[:i] + bytes((byte,)) + value[i:],
        value[:i] + value[i + 1:],
        value[:i] + bytes((value[i] ^ (1 << (byte % 8)),)) + value[i + 1:] if i < len(value)
        else value,
        value[:i] + bytes([byte]) * length + value[i + length:],
    ][kind % 6]


mutations = st.tuples(st.integers(0, 5), st.integers(0, 2**16), st.integers(0, 255),
                      st.integers(1, 8))


@pytest.mark.slow
@settings(max_examples=600)
@given(cause_sets, st.lists(mutations, max_size=3))
def test_decode_mutated_headers_alike(causes: dict[ChannelId, int], edits: list[Any]) -> None:
    value = PYTHON.encode_causes(causes)
    assert OTHER.encode_causes(causes) == value
    for edit in edits:
        value = mutate(value, *edit)
    got = same("decode_causes", value)
    same("decode_causes", bytearray(value))
    same("decode_causes", memoryview(value))
    if got[0] == "ok":
        assert OTHER.encode_causes(got[1]) == value
    if BUILT is not None:  # the pairs form: the same entries, the same refusals
        pairs = outcome(BUILT.decode_pairs, value)
        assert pairs[0] == got[0] and (
            pairs[1] == tuple(got[1].items()) if got[0] == "ok" else pairs == got), pairs


@settings(max_examples=400)
@given(st.one_of(st.none(), st.binary(max_size=80), st.binary(max_size=60).map(
    lambda b: b"\x01" + b)))
def test_decode_random_bytes_alike(value: bytes | None) -> None:
    same("decode_causes", value)


wide_positions = st.one_of(
    st.integers(0, FED_TO_END - 1),
    st.sampled_from([-1, -(2**63), FED_TO_END, 2**63, 2**64, -(2**70), True]),
)
loose_channels = st.builds(
    ChannelId, st.one_of(topic_ids, st.just(UUID(int=0))), st.integers(0, 2**31 - 1)
)


@settings(max_examples=400)
@given(st.one_of(cause_sets, st.dictionaries(loose_channels, wide_positions, max_size=12)))
def test_encode_and_size_alike(causes: dict[ChannelId, int]) -> None:
    same("encode_causes", causes)
    same("encoded_size", causes)


def test_encode_refusals_alike_on_foreign_keys() -> None:
    for causes in ({1: 2}, {"x": 1}, {ChannelId(UUID(int=1), 0): 1.5},
                   {ChannelId(UUID(int=1), 0): "7"}, {ChannelId(UUID(int=1), 0): None}):
        same("encode_causes", causes)
        same("encoded_size", causes)


# ------------------------------------------------------------------ held blobs

INT64 = st.integers(-(2**63), 2**63 - 1)
channels = st.builds(ChannelId, topic_ids, st.integers(0, 2**31 - 1))
payloads = st.one_of(st.none(), st.binary(max_size=24))
header_keys = st.one_of(st.text(max_size=8), st.sampled_from(["", "\u00e9", "\U0001f600",
                                                               "parsley.x"]))
headers = st.lists(st.tuples(header_keys, payloads), max_size=4).map(tuple)
causes_flat = st.lists(st.tuples(channels, INT64), max_size=4).map(tuple)
messages = st.builds(sc.HeldMessage, INT64, payloads, payloads, headers, causes_flat)


@pytest.mark.slow
@settings(max_examples=500)
@given(messages, st.lists(mutations, max_size=3))
def test_held_blobs_alike(m: sc.HeldMessage, edits: list[Any]) -> None:
    blob = same("encode_held", m)[1]
    for edit in edits:
        blob = mutate(blob, *edit)
    got = same("decode_held", blob)
    same("validate_held", blob)
    same("decode_held", bytearray(blob))
    if got[0] == "ok":
        assert OTHER.encode_held(got[1]) == blob


@given(st.binary(max_size=80))
def test_held_random_bytes_alike(blob: bytes) -> None:
    same("decode_held", blob)
    same("validate_held", blob)
    same("validate_held", b"\x01" + blob)


def test_encode_held_errors_alike() -> None:
    ch = ChannelId(UUID(int=3), 1)
    for m in (
        sc.HeldMessage(2**63, b"k", None),
        sc.HeldMessage(1, bytearray(b"k"), memoryview(b"v")),  # type: ignore[arg-type]
        sc.HeldMessage(1, None, None, (("\ud800", b"x"),)),
        sc.HeldMessage(1, None, None, (("k", bytearray(b"x")),)),  # type: ignore[arg-type]
        sc.HeldMessage(1, None, None, (), ((ch, 2**64),)),
        sc.HeldMessage(1, "s", None),  # type: ignore[arg-type]
        sc.HeldMessage(1.5, None, None),  # type: ignore[arg-type]
    ):
        same("encode_held", m)


# ------------------------------------------------------------------ ordering-state images

positions = st.one_of(st.integers(0, 40), st.sampled_from([-1, FED_TO_END, -(2**63)]))
small_channels = st.builds(ChannelId, st.sampled_from([UUID(int=0), UUID(int=1), UUID(int=2**127)]),
                           st.integers(0, 2))
good_blob = sc.reference_encode_held(sc.HeldMessage(1, b"k", None, (("h", b"v"),)))


def _key(kind: str, ch: ChannelId, position: int, name: str) -> bytes:
    if kind == "h":
        return b"h" + ch.to_bytes() + (position % 2**64).to_bytes(8, "big")
    if kind == "n":
        return b"n" + name.encode("utf-8", "surrogatepass")
    if kind == "v":
        return b"v"
    return kind.encode() + ch.to_bytes()


def _value(kind: str, ch: ChannelId, position: int, raw: bytes | None) -> bytes:
    if raw is not None:
        return raw
    if kind == "h":
        return good_blob
    if kind == "n":
        return sc.encode_binding(ch.topic_id)
    if kind == "v":
        return b"\x01"
    return (position % 2**64).to_bytes(8, "big")


entries = st.builds(
    lambda kind, ch, position, name, raw, cut: (
        _key(kind, ch, position, name)[: cut or None],
        _value(kind, ch, position, raw),
    ),
    st.sampled_from(["f", "c", "p", "h", "n", "v", "v", "z", "\x00"]),
    small_channels,
    positions,
    st.text(max_size=4),
    st.one_of(st.none(), st.none(), st.binary(max_size=24),
              st.just(b"\x02"), st.just(good_blob[:-1])),
    st.one_of(st.none(), st.none(), st.none(), st.integers(0, 30)),
)


@pytest.mark.slow
@settings(max_examples=500)
@given(st.lists(entries, max_size=10), st.booleans())
def test_images_alike(items: list[tuple[bytes, bytes]], sort: bool) -> None:
    if sort:
        items = sorted(dict(items).items())
    same("load_image", items)
    # A one-pass iterator, as OrderingStore.scan() gives: each implementation its own.
    a = outcome(PYTHON.load_image, iter(items))
    b = outcome(OTHER.load_image, iter(items))
    assert a == b, f"load_image differs on iter({items!r}):\n python {a!r}\n native {b!r}"
