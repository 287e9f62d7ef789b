"""``parsley.session.TokenSigner``: URL-safe, authenticated, expiring, bounded tokens.

Every way a token can be wrong is refused with ``InvalidToken`` naming its ``problem``,
and the checks run in the documented order (nothing unauthenticated is parsed past its
length). Times are given explicitly (``now``), so no test depends on the clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
from uuid import UUID

import pytest

from parsley.engine.channel import ChannelId
from parsley.session import CausalPast, InvalidToken, TokenProblem, TokenSigner
from parsley.session.tokens import MAX_CLOCK_SKEW_MS

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
T = UUID("0102030405060708090a0b0c0d0e0f10")
U = UUID("f102030405060708090a0b0c0d0e0f10")
NOW = 1_800_000_000.0  # s since the epoch
PAST = CausalPast.of({ChannelId(T, 0): 41, ChannelId(T, 3): 7})


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _signed(body: bytes, key: bytes = KEY) -> str:
    """A token whose bytes are ``body`` and a valid tag: what only the key's holder can make."""
    tag = hmac.new(key, b"parsley.session.token\x00" + body, hashlib.sha256).digest()
    return _b64(body + tag)


def _problem(signer: TokenSigner, token: str, now: float = NOW) -> InvalidToken:
    with pytest.raises(InvalidToken) as caught:
        signer.open(token, now=now)
    return caught.value


def test_a_minted_token_opens_to_the_same_past() -> None:
    signer = TokenSigner(KEY, ttl_s=600)
    token = signer.mint(PAST, now=NOW)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token), token
    assert len(token) <= signer.max_token_chars
    assert signer.open(token, now=NOW + 1) == PAST
    assert signer.open(signer.mint(CausalPast.none(), now=NOW), now=NOW) is CausalPast.none()


def test_the_layout_is_version_mint_time_past_tag() -> None:
    token = TokenSigner(KEY, ttl_s=600).mint(PAST, now=NOW)
    body = struct.pack(">BQ", 1, int(NOW * 1000)) + PAST.encode()
    assert token == _signed(body)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"key": "k" * 32, "ttl_s": 1}, TypeError, "key must be bytes, got str"),
        ({"key": b"k" * 31, "ttl_s": 1}, ValueError, "at least 32 bytes, got 31"),
        ({"key": KEY, "ttl_s": 0}, ValueError, "ttl_s must be above 0 s"),
        ({"key": KEY, "ttl_s": 1, "max_entries": 0}, ValueError, "max_entries must be >= 1"),
    ],
)
def test_the_signer_refuses_bad_settings(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        TokenSigner(**kwargs)  # type: ignore[arg-type]


def test_an_altered_token_is_tampered() -> None:
    signer = TokenSigner(KEY, ttl_s=600)
    token = signer.mint(PAST, now=NOW)
    # Change one character well inside the token (the mint time's bytes): still canonical
    # base64, so only the signature can tell.
    altered = token[:4] + ("A" if token[4] != "A" else "B") + token[5:]
    error = _problem(signer, altered)
    assert error.problem is TokenProblem.TAMPERED, error
    assert "the signature does not match" in str(error)


def test_a_token_of_another_key_is_tampered() -> None:
    token = TokenSigner(OTHER_KEY, ttl_s=600).mint(PAST, now=NOW)
    assert _problem(TokenSigner(KEY, ttl_s=600), token).problem is TokenProblem.TAMPERED


def test_expiry_is_the_ttl_after_minting() -> None:
    signer = TokenSigner(KEY, ttl_s=60)
    token = signer.mint(PAST, now=NOW)
    assert signer.open(token, now=NOW + 60) == PAST
    error = _problem(signer, token, now=NOW + 60.001)
    assert error.problem is TokenProblem.EXPIRED
    assert str(error) == "expired session token: minted 60001 ms ago; the TTL is 60000 ms"


def test_a_token_from_the_future_beyond_the_skew_is_expired() -> None:
    signer = TokenSigner(KEY, ttl_s=60)
    skew_s = MAX_CLOCK_SKEW_MS / 1000
    assert signer.open(signer.mint(PAST, now=NOW + skew_s), now=NOW) == PAST
    error = _problem(signer, signer.mint(PAST, now=NOW + skew_s + 1), now=NOW)
    assert error.problem is TokenProblem.EXPIRED and "in the future" in str(error)


def test_too_long_a_token_is_over_broad_before_anything_is_read() -> None:
    signer = TokenSigner(KEY, ttl_s=60, max_entries=2)
    error = _problem(signer, "!" * (signer.max_token_chars + 1))  # not even base64
    assert error.problem is TokenProblem.OVER_BROAD
    assert f"at most {signer.max_token_chars} for 2 channels" in str(error)


def test_a_signed_token_naming_too_many_channels_is_over_broad() -> None:
    wide = CausalPast.of({ChannelId(T, p): p for p in range(3)})
    token = TokenSigner(KEY, ttl_s=60).mint(wide, now=NOW)
    narrow = TokenSigner(KEY, ttl_s=60, max_entries=2)
    assert len(token) <= narrow.max_token_chars, "the count, not the length, must refuse it"
    error = _problem(narrow, token)
    assert error.problem is TokenProblem.OVER_BROAD
    assert "names 3 channels; at most 2 are accepted" in str(error)
    assert isinstance(error.__cause__, Exception)


def test_mint_refuses_what_open_would_refuse() -> None:
    wide = CausalPast.of({ChannelId(T, p): p for p in range(3)})
    with pytest.raises(ValueError, match="names 3 channels; a token may name at most 2"):
        TokenSigner(KEY, ttl_s=60, max_entries=2).mint(wide)
    only_t = TokenSigner(KEY, ttl_s=60, channels={ChannelId(T, 0)})
    with pytest.raises(ValueError, match=f"names channel {U}-0, which tokens may not name"):
        only_t.mint(CausalPast.of({ChannelId(U, 0): 1}))
    with pytest.raises(TypeError, match="mint needs a CausalPast, got dict"):
        only_t.mint({})  # type: ignore[arg-type]


def test_an_unknown_channel_is_refused() -> None:
    token = TokenSigner(KEY, ttl_s=60).mint(CausalPast.of({ChannelId(U, 2): 5}), now=NOW)
    strict = TokenSigner(KEY, ttl_s=60, channels={ChannelId(T, p) for p in range(4)})
    error = _problem(strict, token)
    assert error.problem is TokenProblem.UNKNOWN_CHANNEL
    assert f"names channel {U}-2, which this tier does not accept" in str(error)
    assert strict.open(strict.mint(PAST, now=NOW), now=NOW) == PAST


@pytest.mark.parametrize(
    ("token", "detail"),
    [
        ("", "0 bytes; a token has at least 43"),
        ("AAAAA", "5 characters is not a base64 length"),
        ("AAAA+AAA", "not URL-safe base64"),
        ("AAAA/AAA", "not URL-safe base64"),
        ("AAAA=", "not URL-safe base64"),
        ("AAAA AAA", "not URL-safe base64"),
        ("AB", "not the canonical base64 spelling"),  # 'B' leaves a non-zero spare bit
    ],
)
def test_malformed_tokens(token: str, detail: str) -> None:
    error = _problem(TokenSigner(KEY, ttl_s=60), token)
    assert error.problem is TokenProblem.MALFORMED
    assert detail in str(error), error


def test_an_unknown_version_is_malformed_even_when_signed() -> None:
    token = _signed(struct.pack(">BQ", 2, int(NOW * 1000)) + PAST.encode())
    error = _problem(TokenSigner(KEY, ttl_s=60), token)
    assert error.problem is TokenProblem.MALFORMED and "unknown token version 2" in str(error)


def test_a_signed_past_is_decoded_as_strictly_as_a_header() -> None:
    # Two topics out of order: only the key's holder could have signed it, and it is still
    # refused with the engine's diagnosis, never salvaged.
    bad = ("0102" + U.hex + "0100" + "0000000000000001" + T.hex + "0100" + "0000000000000001")
    token = _signed(struct.pack(">BQ", 1, int(NOW * 1000)) + bytes.fromhex(bad))
    error = _problem(TokenSigner(KEY, ttl_s=60), token)
    assert error.problem is TokenProblem.MALFORMED
    assert str(error) == f"malformed session token: topics not strictly ascending at {T}"


def test_open_needs_a_str() -> None:
    with pytest.raises(TypeError, match="a token is a str, got bytes"):
        TokenSigner(KEY, ttl_s=60).open(b"AAAA")  # type: ignore[arg-type]


def test_invalid_token_is_a_value_error() -> None:
    assert issubclass(InvalidToken, ValueError)
