"""Refusal details open with their reason's runbook shape (docs/failing-closed.md, "Detail
shapes"; the shapes: ``tests/seed_shapes.py``).

The details themselves are checked where a real occurrence is provoked (the engine, frame,
state codec, bootstrap and worker tests call :func:`tests.seed_shapes.assert_seed_shape`).
Here: the shape table is the runbooks' (every reason but ours has one, and
docs/runbooks.md shows each shape), the regexes built from it accept a detail that opens
with a shape and reject one that does not, and every reason with a shape has a test that
matches a real detail against it.
"""

from __future__ import annotations

import re
from pathlib import Path
from uuid import UUID

import pytest

from parsley import refusal_shapes as shapes
from parsley.engine.channel import ChannelId
from parsley.refusals import Reason
from tests.seed_shapes import DEVIATIONS, SHAPES, WRITTEN_AS, assert_seed_shape, shape_regex

ROOT = Path(__file__).resolve().parents[2]
A0, A1 = ChannelId(UUID(int=1), 0), ChannelId(UUID(int=1), 1)


def test_every_reason_of_the_java_implementation_has_its_runbook_shapes() -> None:
    assert set(SHAPES) == set(Reason) - {Reason.CROSS_PARTITION_CAUSE}
    assert all(SHAPES[r] for r in SHAPES)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_docs_runbooks_show_every_shape() -> None:
    runbooks = _flat((ROOT / "docs" / "runbooks.md").read_text(encoding="utf-8"))
    for reason, shaped in SHAPES.items():
        for shape in WRITTEN_AS.get(reason, shaped):
            for seed, ours in DEVIATIONS.items():
                shape = shape.replace(seed, ours)
            assert _flat(shape) in runbooks, f"docs/runbooks.md lacks {reason.name}'s {shape!r}"


def test_a_shape_regex_needs_the_seed_channel_and_the_literal_text() -> None:
    uuid = "0000000a-0000-0000-0000-00000000000b"
    regex = shape_regex(SHAPES[Reason.UNDECODABLE_METADATA][0])
    assert regex.match(f"{uuid}-3@12: truncated causes header (topic 'a' partition 3 ...)")
    assert not regex.match("topic 'a' partition 3 offset 12 (topic id AAAA): truncated")
    assert not regex.match(f"x{uuid}-3@12: truncated"), "anchored at the start"
    regex = shape_regex(SHAPES[Reason.OUT_OF_ORDER_FEED][0])
    assert not regex.match(f"fed {uuid}-0@2 after this execution was already fed offset 5 of "
                           "the same partition"), "the pre-shape wording is refused"
    with pytest.raises(AssertionError, match="does not open with its runbook's shape"):
        assert_seed_shape(Reason.TASK_WIDTH_CHANGED, "the task count changed")


@pytest.mark.parametrize(("reason", "detail"), [
    (Reason.CHANNEL_REMOVED_WITH_HELD_MESSAGES, shapes.channel_removed_at_start([A0, A1])),
    (Reason.CHANNEL_IDENTITY_CHANGED, shapes.channel_identity_changed_at_start(["a", "b"])),
    (Reason.TASK_WIDTH_CHANGED, shapes.task_width_changed(2, 3)),
    (Reason.SUBSTRATE_MISCONFIGURED, shapes.substrate_no_topic_id("t")),
])
def test_the_start_only_shapes_open_as_the_runbook_says(reason: Reason, detail: str) -> None:
    # These sites run only inside a start against a cluster; their real occurrences are
    # provoked in tests/integration/test_bootstrap.py, except a broker below 3.7.0.
    assert_seed_shape(reason, detail)


def test_every_reason_with_a_shape_has_a_test_matching_a_real_detail() -> None:
    """A reason counts as tested when a test module that calls ``assert_seed_shape``
    names it (``Reason.<NAME>`` or ``"<NAME>"``) outside this module."""
    here = Path(__file__).resolve()
    texts = [p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py")
             if p.resolve() != here]
    checking = [t for t in texts if "assert_seed_shape(" in t]
    untested = [r.name for r in SHAPES
                if not any(f"Reason.{r.name}" in t or f'"{r.name}"' in t for t in checking)]
    assert untested == [], f"no test matches a real detail of {untested} against its shape"
