"""A seeded plain-loop fuzz of the ``parsley.causes`` decoder.

10^6 random mutations by default (``PARSLEY_FUZZ_SIZE`` overrides) of a corpus
of valid values (``tests/wire_corpus.py``, shared with the session token's test):
byte replacement, bit flip, truncation, insertion, deletion, splicing two values.
Every mutated value must either raise
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

import pytest

from parsley.refusals import ParsleyFailClosedError, Reason
from tests.codec_impls import ALL, Codecs
from tests.wire_corpus import SEED, corpus, mutate

SIZE = int(os.environ.get("PARSLEY_FUZZ_SIZE", str(10**6)))


@pytest.mark.slow
@pytest.mark.parametrize("codec", ALL, ids=str)
def test_fuzz_mutations_fail_closed_or_decode_canonically(codec: Codecs) -> None:
    rnd = random.Random(SEED)
    values = corpus(rnd)
    decode = codec.decode_causes
    encode = codec.encode_causes
    for value in values:
        assert encode(decode(value)) == value, "corpus must be valid"
    undecodable = Reason.UNDECODABLE_METADATA
    decoded_ok = 0
    refused = 0
    for iteration in range(SIZE):
        mutated = mutate(rnd, values)
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
