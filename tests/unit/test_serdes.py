"""Built-in serdes, the serde check and serde equivalence (parsley/serdes.py)."""

from __future__ import annotations

import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from parsley.serdes import (
    BYTES,
    JSON,
    STRING,
    BytesSerde,
    JsonSerde,
    Serde,
    StringSerde,
    check_serde,
    decoder,
    encoder,
    equivalent_serdes,
)

_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    encoded = BYTES.serialize(data)
    assert encoded == data, "BYTES must not change the bytes"
    assert BYTES.deserialize(encoded) == data


@given(st.text())
def test_string_round_trip_is_utf8(text: str) -> None:
    encoded = STRING.serialize(text)
    assert encoded == text.encode("utf-8"), "STRING must write UTF-8"
    assert STRING.deserialize(encoded) == text


@given(_json_values)
def test_json_round_trip(value: Any) -> None:
    if value is None:
        assert JSON.serialize(value) is None, "None is a null payload, not b'null'"
        return
    encoded = JSON.serialize(value)
    assert encoded == orjson.dumps(value), "JSON must write orjson's compact encoding"
    assert JSON.deserialize(encoded) == value


def test_known_encodings() -> None:
    assert STRING.serialize("é") == b"\xc3\xa9"
    assert JSON.serialize({"a": [1, "x"]}) == b'{"a":[1,"x"]}'
    assert BYTES.serialize(bytearray(b"ab")) == b"ab"
    assert BYTES.serialize(memoryview(b"cd")) == b"cd"


@pytest.mark.parametrize("serde", [BYTES, STRING, JSON])
def test_none_maps_to_none_both_ways(serde: Serde[Any]) -> None:
    assert serde.serialize(None) is None
    assert serde.deserialize(None) is None


def test_type_and_encoding_failures_raise() -> None:
    with pytest.raises(TypeError, match="BYTES serializes bytes, got str"):
        BYTES.serialize("text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="STRING serializes str, got int"):
        STRING.serialize(1)  # type: ignore[arg-type]
    with pytest.raises(UnicodeDecodeError):
        STRING.deserialize(b"\xff\xfe")
    with pytest.raises(UnicodeEncodeError):
        STRING.serialize("\ud800")
    with pytest.raises(ValueError):
        JSON.deserialize(b"{")
    with pytest.raises(TypeError):
        JSON.serialize(object())


def test_builtins_pickle_to_equal_values() -> None:
    for serde in (BYTES, STRING, JSON):
        copy = pickle.loads(pickle.dumps(serde))
        assert copy == serde, f"{serde!r} must compare equal after pickling"
        assert equivalent_serdes(copy, serde)


class _Upper:
    """A user serde: no base class, no __eq__."""

    def __init__(self, suffix: str = "") -> None:
        self.suffix = suffix

    def serialize(self, value: str) -> bytes:
        return (value.upper() + self.suffix).encode()

    def deserialize(self, data: bytes | None) -> str | None:
        return None if data is None else data.decode()


class _NoDeserialize:
    def serialize(self, value: object) -> bytes:
        return b""


class _EqRaises(_Upper):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing")

    __hash__ = object.__hash__


def test_any_object_with_both_methods_is_a_serde() -> None:
    check_serde(_Upper(), "channel 'x' key serde")
    assert isinstance(_Upper(), Serde), "the protocol is structural"


def test_check_serde_names_the_missing_method() -> None:
    with pytest.raises(TypeError, match=r"channel 'x' key serde must have callable serialize\(\) "
                                        r"and deserialize\(\); _NoDeserialize has no deserialize"):
        check_serde(_NoDeserialize(), "channel 'x' key serde")


def test_equivalence() -> None:
    assert equivalent_serdes(_Upper("!"), _Upper("!")), "same type, same state"
    assert not equivalent_serdes(_Upper("!"), _Upper("?")), "same type, other state"
    assert not equivalent_serdes(_Upper(), StringSerde()), "other type"
    assert not equivalent_serdes(BytesSerde(), StringSerde())
    assert equivalent_serdes(JsonSerde(), JSON)
    assert not equivalent_serdes(_EqRaises(), _EqRaises()), "a raising __eq__ is not equality"
    serde = _EqRaises()
    assert equivalent_serdes(serde, serde), "the same object is always equivalent"


def _outcome(fn: Any, arg: Any) -> tuple[str, Any]:
    try:
        return ("ok", fn(arg))
    except Exception as exc:  # the frame reports type and message: both must match
        return (type(exc).__name__, str(exc))


@given(st.binary() | st.text().map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_the_frames_decoders_behave_as_the_builtin_serdes(data: bytes) -> None:
    # Matched by type, so a pickled copy (another instance) gets the fast decoder too.
    for serde in (BYTES, STRING, JSON, *pickle.loads(pickle.dumps((BYTES, STRING, JSON)))):
        assert _outcome(decoder(serde), data) == _outcome(serde.deserialize, data), serde
        assert _outcome(decoder(serde), memoryview(data)) == \
            _outcome(serde.deserialize, memoryview(data)), serde
    assert decoder(BYTES)(data) is data, "BYTES hands the fetched bytes over as they are"


@given(st.binary() | st.text() | st.integers() | st.none()
       | st.binary().map(bytearray) | st.just("\ud800"))
def test_the_frames_encoders_behave_as_the_builtin_serdes(value: Any) -> None:
    for serde in (BYTES, STRING, JSON):
        encode, with_headers, exact = encoder(serde)
        assert not with_headers and exact
        got = _outcome(encode, value)
        assert got == _outcome(serde.serialize, value)
        assert got[0] != "ok" or got[1] is None or type(got[1]) is bytes


def test_a_headers_aware_serde_is_called_with_the_headers_and_its_output_checked() -> None:
    class Tagging:
        def serialize(self, value: str) -> bytes:
            return value.encode()

        def serialize_with_headers(self, value: str, headers: list[Any]) -> bytes:
            headers.append(("tag", b"1"))
            return value.encode()

        def deserialize(self, data: bytes) -> str:
            return data.decode()

    encode, with_headers, exact = encoder(Tagging())
    headers: list[Any] = []
    assert with_headers and not exact
    assert encode("x", headers) == b"x" and headers == [("tag", b"1")]
    assert decoder(Tagging())(b"y") == "y"
