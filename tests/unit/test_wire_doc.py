"""docs/wire-format.md must not lie: its complete hex examples decode as it says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from parsley import wire
from parsley.refusals import ParsleyFailClosedError

# Every test runs on both codec implementations (tests/conftest.py, "codecs").
pytestmark = pytest.mark.usefixtures("codecs")

DOC = Path(__file__).resolve().parents[2] / "docs" / "wire-format.md"
ROW = re.compile(r"^\| `([0-9a-f ]+)` \| `([^`]+)` \|$")


def _refused_rows() -> list[tuple[str, str]]:
    return [m.groups() for line in DOC.read_text().splitlines() if (m := ROW.match(line))]


def test_doc_has_complete_refusal_examples() -> None:
    assert len(_refused_rows()) >= 5, "the refused-values table lost its complete examples"


@pytest.mark.parametrize(("hexvalue", "detail"), _refused_rows())
def test_doc_refusal_examples(hexvalue: str, detail: str) -> None:
    with pytest.raises(ParsleyFailClosedError) as caught:
        wire.decode_causes(bytes.fromhex(hexvalue.replace(" ", "")))
    assert caught.value.detail == detail


def _annotated_blocks() -> list[tuple[str, int]]:
    """Annotated examples: code blocks whose lines start with hex, and the byte count above."""
    text = DOC.read_text()
    blocks = []
    for m in re.finditer(r"\((\d+) bytes\):\n\n```\n(.*?)```", text, re.S):
        # the bytes are the first column; the annotation follows after 2+ spaces
        hexes = [re.split(r" {2,}", line.strip())[0].replace(" ", "")
                 for line in m.group(2).splitlines() if line.strip()]
        if all(re.fullmatch(r"[0-9a-f]+", h) for h in hexes):
            blocks.append(("".join(hexes), int(m.group(1))))
    return blocks


def test_doc_annotated_examples_are_valid_and_sized() -> None:
    blocks = _annotated_blocks()
    assert len(blocks) >= 2, "annotated examples not found"
    for hexvalue, size in blocks:
        value = bytes.fromhex(hexvalue)
        assert len(value) == size, f"{hexvalue}: doc says {size} bytes"
        assert wire.encode_causes(wire.decode_causes(value)) == value
