"""Both implementations of the codecs, side by side, for differential tests.

``PYTHON`` is the pure-Python reference (``parsley.wire.reference_*``,
``parsley.engine.state_codec.reference_*``); ``NATIVE`` the Rust codec in
``parsley._native`` when it is built (``None`` otherwise; under ``CI=true``
``tests/unit/test_native_built.py`` fails the run when it is not). ``ALL`` lists
those present, for ``pytest.mark.parametrize``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from parsley import wire
from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId
from parsley.native import BUILT


@dataclass(frozen=True)
class Codecs:
    """One implementation's codec functions (the names of the public API)."""

    name: str
    decode_causes: Callable[[bytes | None], dict[ChannelId, int]]
    encode_causes: Callable[[Mapping[ChannelId, int]], bytes]
    encoded_size: Callable[[Mapping[ChannelId, int]], int]
    decode_held: Callable[[bytes], sc.HeldMessage]
    encode_held: Callable[[sc.HeldMessage], bytes]
    validate_held: Callable[[bytes], None]
    load_image: Callable[[Iterable[tuple[bytes, bytes]]], sc.OrderingImage]

    def __str__(self) -> str:
        return self.name


PYTHON = Codecs(
    "python",
    wire.reference_decode_causes,
    wire.reference_encode_causes,
    wire.reference_encoded_size,
    sc.reference_decode_held,
    sc.reference_encode_held,
    sc.reference_validate_held,
    sc.reference_load_image,
)


def _native(m: Any) -> Codecs:
    return Codecs(
        "native",
        m.decode_causes,
        m.encode_causes,
        m.encoded_size,
        m.decode_held,
        m.encode_held,
        m.validate_held,
        m.load_image,
    )


NATIVE = _native(BUILT) if BUILT is not None else None
ALL = [PYTHON] if NATIVE is None else [PYTHON, NATIVE]
WIRE_FUNCTIONS = ("decode_causes", "encode_causes", "encoded_size")
STATE_FUNCTIONS = ("decode_held", "encode_held", "validate_held", "load_image")
