"""Session tokens a browser can carry: a `CausalPast`, signed (HMAC-SHA256) and expiring.

:class:`TokenSigner` mints a URL-safe string from a past and opens one back, refusing a
malformed, tampered, expired, over-broad or foreign-channel token with
:class:`InvalidToken`. The token layout and the advice it follows (treat tokens as
untrusted, bound entries and positions, reject unknown channels, a TTL well short of
retention) are in docs/session.md, "Tokens".

HMAC-SHA256 comes from the standard library (``hmac``, ``hashlib``), so the core's
dependencies stay as they are. A token is signed, not encrypted: it shows the topic ids
and offsets it names to whoever holds it (docs/session.md, "Tokens").
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import struct
import time
from collections.abc import Container
from typing import Final

from parsley.engine.channel import ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from parsley.session.past import CausalPast, max_encoded_bytes

__all__ = [
    "DEFAULT_TOKEN_ENTRIES",
    "MAX_CLOCK_SKEW_MS",
    "MIN_KEY_BYTES",
    "TOKEN_VERSION",
    "InvalidToken",
    "TokenProblem",
    "TokenSigner",
]

TOKEN_VERSION: Final = 1
"""The first byte of every token's signed bytes."""

DEFAULT_TOKEN_ENTRIES: Final = 64
"""How many channels a token may name unless the signer is told otherwise."""

MIN_KEY_BYTES: Final = 32
"""The shortest signing key accepted: HMAC-SHA256's output length (RFC 2104, section 3)."""

MAX_CLOCK_SKEW_MS: Final = 60_000
"""How far in the future a token's mint time may lie (gateways' clocks differ), ms."""

_TAG_BYTES: Final = 32  # HMAC-SHA256
_HEAD = struct.Struct(">BQ")  # version, minted at (ms since the epoch)
_LABEL: Final = b"parsley.session.token\x00"  # keeps this key's MACs apart from other uses
_URL_SAFE = re.compile(r"[A-Za-z0-9_-]*")
_MIN_BYTES: Final = _HEAD.size + len(b"\x01\x00") + _TAG_BYTES


class TokenProblem(enum.Enum):
    """What is wrong with a refused token (:attr:`InvalidToken.problem`)."""

    MALFORMED = "malformed"
    """Not a token this signer's format knows: bad characters, length or layout."""
    TAMPERED = "tampered"
    """The signature does not match: altered, or minted under another key."""
    EXPIRED = "expired"
    """Minted longer ago than the signer's TTL, or too far in the future."""
    OVER_BROAD = "over-broad"
    """Names more channels than the signer accepts."""
    UNKNOWN_CHANNEL = "unknown channel"
    """Names a channel the signer was not told to accept."""


class InvalidToken(ValueError):
    """A session token that must not be trusted; treat the request as having a bad token,
    never as having none (docs/session.md, "Tokens").

    Attributes:
        problem: the :class:`TokenProblem`; branch on this, never on the text.
    """

    def __init__(self, problem: TokenProblem, detail: str) -> None:
        super().__init__(f"{problem.value} session token: {detail}")
        self.problem = problem


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


class TokenSigner:
    """Mints and opens session tokens under one secret key.

    A token is the URL-safe base64 (no padding) of ``version (1 byte, 1) | minted at (8 bytes,
    ms since the epoch, big-endian) | the past (CausalPast.encode()) | HMAC-SHA256 tag (32
    bytes)`` over the bytes before the tag (docs/session.md, "Tokens").

    Args:
        key: the secret, at least 32 bytes; every gateway instance that opens a token needs
            the same key. Rotate it by minting under a new signer: old tokens then fail as
            ``TAMPERED``.
        ttl_s: how long a token stays valid after it was minted, s (> 0). Keep it well short
            of the retention of the topics it names (docs/session.md, "Tokens").
        max_entries: the most channels a token may name (>= 1); wider ones are refused at
            mint (``ValueError``) and at open (``OVER_BROAD``).
        channels: the channels a token may name (a set, or any container), or ``None`` to
            accept any: pass the partitions of the topics this tier writes and reads, so
            that a token naming anything else is refused (``UNKNOWN_CHANNEL``).

    Raises:
        TypeError: ``key`` is not bytes.
        ValueError: a key shorter than 32 bytes, ``ttl_s`` not above 0, ``max_entries``
            below 1.
    """

    __slots__ = ("_channels", "_key", "_max_chars", "_max_entries", "_ttl_ms")

    def __init__(self, key: bytes, *, ttl_s: float, max_entries: int = DEFAULT_TOKEN_ENTRIES,
                 channels: Container[ChannelId] | None = None) -> None:
        if not isinstance(key, bytes | bytearray):
            raise TypeError(f"key must be bytes, got {type(key).__name__}")
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be above 0 s, got {ttl_s}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._key = bytes(key)
        self._ttl_ms = int(ttl_s * 1000)
        self._max_entries = max_entries
        self._channels = channels
        longest = _HEAD.size + max_encoded_bytes(max_entries) + _TAG_BYTES
        self._max_chars = len(_b64(bytes(longest)))

    @property
    def max_token_chars(self) -> int:
        """The longest token this signer mints or opens, in characters."""
        return self._max_chars

    def mint(self, past: CausalPast, *, now: float | None = None) -> str:
        """A token carrying ``past``, minted at ``now``.

        Args:
            past: the session's causal past.
            now: the mint time, s since the epoch; ``None`` for the wall clock.

        Returns:
            The token: URL-safe characters only (``A-Z a-z 0-9 - _``), at most
            :attr:`max_token_chars` long.

        Raises:
            TypeError: ``past`` is not a CausalPast.
            ValueError: ``past`` names more than ``max_entries`` channels, or a channel
                outside ``channels``; such a token would be refused when opened.
        """
        if not isinstance(past, CausalPast):
            raise TypeError(f"mint needs a CausalPast, got {type(past).__name__}")
        if len(past) > self._max_entries:
            raise ValueError(f"the past names {len(past)} channels; a token may name at most "
                             f"{self._max_entries}")
        foreign = self._foreign(past)
        if foreign is not None:
            raise ValueError(f"the past names channel {foreign}, which tokens may not name")
        minted_ms = int((time.time() if now is None else now) * 1000)
        body = _HEAD.pack(TOKEN_VERSION, minted_ms) + past.encode()
        return _b64(body + self._tag(body))

    def open(self, token: str, *, now: float | None = None) -> CausalPast:
        """The past a token carries, once it is proven ours, unexpired and within bounds.

        Checked in this order, so nothing unauthenticated is parsed past its length: length,
        characters, base64, signature, version, mint time, the past (decoded exactly as
        strictly as a ``parsley.causes`` header, :meth:`CausalPast.decode`), its channels.

        Args:
            token: the token as the client sent it.
            now: the time to judge expiry by, s since the epoch; ``None`` for the wall clock.

        Returns:
            The past.

        Raises:
            TypeError: ``token`` is not a str.
            InvalidToken: ``problem`` says which check failed: ``MALFORMED`` (characters
                outside the URL-safe alphabet, a length base64 cannot have, a non-canonical
                spelling, too short, an unknown version, or a signed past that does not
                decode), ``OVER_BROAD`` (longer than :attr:`max_token_chars`, or naming more
                than ``max_entries`` channels), ``TAMPERED`` (the signature does not match),
                ``EXPIRED`` (minted more than ``ttl_s`` before ``now``, or more than
                :data:`MAX_CLOCK_SKEW_MS` after it), ``UNKNOWN_CHANNEL``.
        """
        if not isinstance(token, str):
            raise TypeError(f"a token is a str, got {type(token).__name__}")
        if len(token) > self._max_chars:
            raise InvalidToken(TokenProblem.OVER_BROAD,
                               f"{len(token)} characters; at most {self._max_chars} for "
                               f"{self._max_entries} channels")
        if not _URL_SAFE.fullmatch(token):
            raise InvalidToken(TokenProblem.MALFORMED, "not URL-safe base64")
        try:
            raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except binascii.Error:
            raise InvalidToken(TokenProblem.MALFORMED,
                               f"{len(token)} characters is not a base64 length") from None
        if _b64(raw) != token:
            raise InvalidToken(TokenProblem.MALFORMED, "not the canonical base64 spelling")
        if len(raw) < _MIN_BYTES:
            raise InvalidToken(TokenProblem.MALFORMED,
                               f"{len(raw)} bytes; a token has at least {_MIN_BYTES}")
        body, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
        if not hmac.compare_digest(tag, self._tag(body)):
            raise InvalidToken(TokenProblem.TAMPERED,
                               "the signature does not match (altered, or another key)")
        version, minted_ms = _HEAD.unpack_from(body)
        if version != TOKEN_VERSION:
            raise InvalidToken(TokenProblem.MALFORMED, f"unknown token version {version}")
        now_ms = int((time.time() if now is None else now) * 1000)
        if now_ms - minted_ms > self._ttl_ms:
            raise InvalidToken(TokenProblem.EXPIRED,
                               f"minted {now_ms - minted_ms} ms ago; the TTL is "
                               f"{self._ttl_ms} ms")
        if minted_ms - now_ms > MAX_CLOCK_SKEW_MS:
            raise InvalidToken(TokenProblem.EXPIRED,
                               f"minted {minted_ms - now_ms} ms in the future")
        try:
            past = CausalPast.decode(body[_HEAD.size:], max_entries=self._max_entries)
        except ParsleyFailClosedError as exc:
            problem = (TokenProblem.OVER_BROAD if exc.reason is Reason.METADATA_BUDGET_EXCEEDED
                       else TokenProblem.MALFORMED)
            raise InvalidToken(problem, exc.detail) from exc
        foreign = self._foreign(past)
        if foreign is not None:
            raise InvalidToken(TokenProblem.UNKNOWN_CHANNEL,
                               f"names channel {foreign}, which this tier does not accept")
        return past

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._key, _LABEL + body, hashlib.sha256).digest()

    def _foreign(self, past: CausalPast) -> ChannelId | None:
        """The first channel of ``past`` outside ``channels``, if any."""
        if self._channels is None:
            return None
        for channel in past.causes:
            if channel not in self._channels:
                return channel
        return None
