"""A seeded plain-loop fuzz of the ``parsley.causes`` decoder.

10^6 random mutations by default (``PARSLEY_FUZZ_SIZE`` overrides) of a corpus
of valid values: byte replacement, bit flip, truncation, insertion, deletion,
splicing two values. Every mutated value must either raise
``ParsleyFailClosedError(UNDECODABLE_METADATA)`` or decode to causes that
re-encode to exactly the mutated bytes (the grammar admits one spelling per
cause set). Anything else (another exception, another reason, a non-canonical
decode) fails with the seed, iteration and hex, so the case replays.

It runs against both decoders (``codec``: the Python reference and the Rust
codec, tests/codec_impls.py); for the Rust one, a panic surfaces as
``pyo3_runtime.PanicException`` (a ``BaseException``) and fails the test, and a
crash would end the test process.

A plain loop rather than Hypothesis so that a million cases take seconds.
"""

from __future__ import annotations

import os
import random
from uuid import UUID

import pytest

from parsley import wire
from parsley.engine.channel import ChannelId
from parsley.refusals import ParsleyFailClosedError, Reason
from tests.codec_impls import ALL, Codecs

SEED = 20_261_130
SIZE = int(os.environ.get("PARSLEY_FUZZ_SIZE", str(10**6)))


def _corpus(rnd: random.Random) -> list[bytes]:
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


@pytest.mark.parametrize("codec", ALL, ids=str)
def test_fuzz_mutations_fail_closed_or_decode_canonically(codec: Codecs) -> None:
    rnd = random.Random(SEED)
    corpus = _corpus(rnd)
    decode = codec.decode_causes
    encode = codec.encode_causes
    for value in corpus:
        assert encode(decode(value)) == value, "corpus must be valid"
    undecodable = Reason.UNDECODABLE_METADATA
    uniform = rnd.random  # int(uniform() * n) is a cheaper randrange(n)
    getrandbits = rnd.getrandbits
    n_corpus = len(corpus)
    decoded_ok = 0
    refused = 0
    for iteration in range(SIZE):
        value = corpus[int(uniform() * n_corpus)]
        n = len(value)
        i = int(uniform() * n)
        kind = getrandbits(3)
        if kind <= 1:  # replace one byte with a random one
            mutated = value[:i] + bytes((getrandbits(8),)) + value[i + 1:]
        elif kind == 2:  # flip one bit
            mutated = value[:i] + bytes((value[i] ^ (1 << getrandbits(3)),)) + value[i + 1:]
        elif kind == 3:  # truncate
            mutated = value[:i]
        elif kind == 4:  # insert a byte
            mutated = value[:i] + bytes((getrandbits(8),)) + value[i:]
        elif kind == 5:  # delete a byte
            mutated = value[:i] + value[i + 1:]
        elif kind == 6:  # splice the head of one value onto the tail of another
            other = corpus[int(uniform() * n_corpus)]
            mutated = value[:i] + other[int(uniform() * len(other)):]
        else:  # replace a run of bytes with random ones
            k = 1 + getrandbits(3)
            mutated = value[:i] + rnd.randbytes(k) + value[i + k:]
        try:
            causes = decode(mutated)
        except ParsleyFailClosedError as exc:
            if exc.reason is not undecodable:
                pytest.fail(f"{codec}: seed {SEED} iteration {iteration}: reason {exc.reason} "
                            f"for {mutated.hex()}")
            refused += 1
            continue
        except Exception as exc:  # anything else is a codec bug
            pytest.fail(f"{codec}: seed {SEED} iteration {iteration}: {type(exc).__name__}: {exc} "
                        f"for {mutated.hex()}")
        if encode(causes) != mutated:
            pytest.fail(f"{codec}: seed {SEED} iteration {iteration}: {mutated.hex()} decoded to "
                        f"{causes} which does not re-encode to the same bytes")
        decoded_ok += 1
    assert decoded_ok + refused == SIZE
    # Both outcomes must actually occur, or the mutations are not exercising the decoder.
    assert decoded_ok > SIZE // 20 and refused > SIZE // 20, (decoded_ok, refused)
