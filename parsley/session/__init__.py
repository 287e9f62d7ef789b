"""Session consistency for clients outside Kafka: causal tokens, and the tiers that use them.

A web or mobile client holds its causal past as a token the server mints. The write tier
stamps the token on the records it produces and merges the acknowledged coordinate back;
the read tier serves a projection's data only when the past recorded beside it covers the
token. That buys read-your-writes, monotonic reads and writes-follow-reads across a Parsley
pipeline (docs/session.md).

* :class:`CausalPast`, :class:`Coverage`: the past and the coverage verdict (``past.py``).
* :class:`TokenSigner`, :class:`InvalidToken`, :class:`TokenProblem`: signed, expiring
  URL-safe tokens (``tokens.py``).
* :class:`WriteTier`, :class:`ReadTier`: topic names to channels at the two tiers
  (``tiers.py``).

Nothing in the engine reads a token, and holding one grants no delivery guarantee.
"""

from parsley.session.past import DEFAULT_MAX_ENTRIES, CausalPast, Coverage
from parsley.session.tiers import ReadTier, WriteTier
from parsley.session.tokens import InvalidToken, TokenProblem, TokenSigner

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "CausalPast",
    "Coverage",
    "InvalidToken",
    "ReadTier",
    "TokenProblem",
    "TokenSigner",
    "WriteTier",
]
