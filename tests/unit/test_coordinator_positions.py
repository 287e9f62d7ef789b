"""The bootstrap's pre-commit rule, pure (docs/operations.md, "Running", bootstrap step 3; no
broker)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.bootstrap import initial_position
from parsley.declarations import InitialPosition
from parsley.engine.channel import FED_TO_END
from parsley.refusals import ParsleyFailClosedError, Reason

EARLY, LATE = InitialPosition.EARLIEST, InitialPosition.LATEST
offsets = st.integers(min_value=0, max_value=2**62).flatmap(
    lambda e: st.tuples(st.just(e), st.integers(min_value=e, max_value=2**62)))
coverage = st.integers(min_value=0, max_value=FED_TO_END) | st.none()


def test_each_rule_on_an_example() -> None:
    # prior state covering the channel: covered + 1
    assert initial_position(True, 41, True, EARLY, 5, 90) == 42
    assert initial_position(True, 0, True, LATE, 5, 90) == 1
    assert initial_position(True, FED_TO_END - 1, True, EARLY, 5, 90) == FED_TO_END
    # the fed-to-end sentinel: earliest, never sentinel + 1
    assert initial_position(True, FED_TO_END, True, EARLY, 5, 90) == 5
    # named but never covered: 0; never named: earliest
    assert initial_position(True, None, True, LATE, 5, 90) == 0
    assert initial_position(True, None, False, LATE, 5, 90) == 5
    # first start: the declared position
    assert initial_position(False, None, False, EARLY, 5, 90) == 5
    assert initial_position(False, None, False, LATE, 5, 90) == 90
    assert initial_position(False, None, True, LATE, 5, 90) == 90


@pytest.mark.parametrize("covered", [-1, -(2**63), FED_TO_END + 1, 2**64])
def test_coverage_out_of_range_is_refused(covered: int) -> None:
    with pytest.raises(ParsleyFailClosedError) as info:
        initial_position(True, covered, True, EARLY, 0, 10, where="<channel>",
                         source="a-0, ordering changelog app-ordering-changelog[0]")
    assert info.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
    assert info.value.detail.startswith(
        f"restored coverage names position {covered} on <channel>, which no channel can "
        "assign (a-0, ordering changelog app-ordering-changelog[0]): a covered position is "
        f"in 0..{FED_TO_END}")


@pytest.mark.parametrize(("earliest", "latest"), [(-1, 0), (5, 4), (-3, -1)])
def test_offsets_out_of_order_are_a_callers_error(earliest: int, latest: int) -> None:
    with pytest.raises(ValueError, match="earliest"):
        initial_position(False, None, False, EARLY, earliest, latest)


@given(st.booleans(), coverage, st.booleans(), st.sampled_from(list(InitialPosition)), offsets)
def test_the_position_is_always_a_committable_offset(
    prior: bool, covered: int | None, named: bool, declared: InitialPosition,
    edges: tuple[int, int],
) -> None:
    earliest, latest = edges
    got = initial_position(prior, covered, named, declared, earliest, latest)
    assert 0 <= got <= FED_TO_END, "never overflows a signed 64-bit offset"
    if not prior:
        assert got == (latest if declared is LATE else earliest), "first start: declared"
    elif covered is not None and covered != FED_TO_END:
        assert got == covered + 1
    elif covered is None and named:
        assert got == 0
    else:
        assert got == earliest


@given(st.booleans(), st.integers(max_value=-1) | st.integers(min_value=FED_TO_END + 1),
       st.booleans(), st.sampled_from(list(InitialPosition)), offsets)
def test_any_coverage_out_of_range_is_refused_first_start_included(
    prior: bool, covered: int, named: bool, declared: InitialPosition, edges: tuple[int, int],
) -> None:
    with pytest.raises(ParsleyFailClosedError) as info:
        initial_position(prior, covered, named, declared, *edges)
    assert info.value.reason is Reason.UNKNOWN_ORDERING_STATE_FORMAT
