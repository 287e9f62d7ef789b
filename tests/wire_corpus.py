"""The fuzz corpus of the ``parsley.causes`` decoder, and its seeded mutations.

Shared by ``tests/unit/test_wire_fuzz.py`` (both decoders, 10^6 mutations) and
``tests/property/test_session_properties.py`` (``CausalPast.decode`` agrees with
``parsley.wire`` on every value): one corpus, so both judge the same inputs.
"""

from __future__ import annotations

import random
from uuid import UUID

from parsley import wire
from parsley.engine.channel import ChannelId

SEED = 20_261_130
"""The fuzz's seed: a failure names it with the iteration, so the case replays."""


def corpus(rnd: random.Random) -> list[bytes]:
    """Valid values of varied shape: empty, small, multi-byte varints, many partitions."""
    values = [wire.EMPTY_CAUSES]
    topics = [UUID(int=rnd.getrandbits(128) | 1) for _ in range(8)] + [UUID(int=1)]
    partitions = [0, 1, 2, 127, 128, 300, 16384, 2**28, 2**31 - 1]
    for size in (1, 1, 2, 3, 4, 6, 8, 16, 40):
        causes = {
            ChannelId(rnd.choice(topics), rnd.choice([*partitions, rnd.randrange(2**31)])):
                rnd.choice([0, 7, 2**31, 2**63 - 2, rnd.randrange(2**63 - 1)])
            for _ in range(size)
        }
        values.append(wire.encode_causes(causes))
    # 130 partitions of one topic: a two-byte partition count.
    values.append(wire.encode_causes({ChannelId(topics[0], p): p for p in range(130)}))
    # Small values are drawn more often: they reach every check as the large
    # ones do, at a fraction of the decode and re-encode cost.
    return [v for v in values for _ in range(8 if len(v) < 100 else 2 if len(v) < 300 else 1)]


def mutate(rnd: random.Random, values: list[bytes]) -> bytes:
    """One random mutation of a value drawn from ``values``: byte replacement, bit flip,
    truncation, insertion, deletion, splicing two values, or a run of random bytes."""
    uniform = rnd.random  # int(uniform() * n) is a cheaper randrange(n)
    getrandbits = rnd.getrandbits
    n_values = len(values)
    value = values[int(uniform() * n_values)]
    n = len(value)
    i = int(uniform() * n)
    kind = getrandbits(3)
    if kind <= 1:  # replace one byte with a random one
        return value[:i] + bytes((getrandbits(8),)) + value[i + 1:]
    if kind == 2:  # flip one bit
        return value[:i] + bytes((value[i] ^ (1 << getrandbits(3)),)) + value[i + 1:]
    if kind == 3:  # truncate
        return value[:i]
    if kind == 4:  # insert a byte
        return value[:i] + bytes((getrandbits(8),)) + value[i:]
    if kind == 5:  # delete a byte
        return value[:i] + value[i + 1:]
    if kind == 6:  # splice the head of one value onto the tail of another
        other = values[int(uniform() * n_values)]
        return value[:i] + other[int(uniform() * len(other)):]
    k = 1 + getrandbits(3)  # replace a run of bytes with random ones
    return value[:i] + rnd.randbytes(k) + value[i + k:]
