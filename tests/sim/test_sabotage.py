"""Sabotage meta-tests: every deliberately broken engine must be caught by the oracle.

For each :class:`parsley.engine.sabotage.Sabotage` mode the default sweep
(seeds 1-300, whatever ``PARSLEY_SIM_SEEDS`` says) is run against the broken
engine until a seed fails; the test asserts that one does, that the oracle
names the clause the fault breaks, and that the same seed passes with the
sound engine (so the catch is the fault's doing, not the world's). A harness
that cannot fail is not a harness (README.md, "The verification kit", V8).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pytest

from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine
from parsley.engine.sabotage import Sabotage, engine_class
from parsley.engine.shell import DEFAULT_BUDGET_BYTES
from parsley.engine.state_codec import TAG_FED, TAG_FRONTIER, TAG_PAST
from parsley.engine.store import OrderingStore
from tests.sim.oracle import M1, V1, V2_DUP, V2_LOSS, V5, X1
from tests.sim.seeds import DEFAULT_SEEDS, parse_seeds
from tests.sim.world import EMPTIED_CHANGELOG, FOREIGN_COMMIT, REFUSED, SimResult, run

pytestmark = pytest.mark.usefixtures("engine_impl")

EXPECTED: dict[Sabotage, set[str]] = {
    Sabotage.EAGER_DELIVERY: {V1},
    Sabotage.IGNORE_ONE_CAUSE: {V1},
    # Held messages forgotten on restore: their positions are covered, so they never
    # come back (lost below a later delivery, or missing at drain).
    Sabotage.DROP_HELD_ON_RESTART: {V2_LOSS, V5},
    # A cause no task can enforce, delivered without a word (docs/failing-closed.md).
    Sabotage.IGNORE_CROSS_PARTITION: {X1},
}


def _first_caught(mode: Sabotage) -> SimResult | None:
    broken = engine_class(mode)
    for seed in parse_seeds(DEFAULT_SEEDS):
        result = run(seed, broken)
        if result.clauses() & EXPECTED[mode]:
            return result
    return None


def test_every_mode_has_an_expectation() -> None:
    assert set(EXPECTED) == set(Sabotage), f"modes without a test: {set(Sabotage) - set(EXPECTED)}"


@pytest.mark.parametrize("mode", list(Sabotage), ids=lambda m: m.name)
def test_oracle_catches_sabotage(mode: Sabotage) -> None:
    caught = _first_caught(mode)
    assert caught is not None, (
        f"{mode.name} survived seeds {DEFAULT_SEEDS}: the oracle never reported "
        f"{sorted(EXPECTED[mode])}")
    seed = caught.scenario.seed
    sound = run(seed)
    assert not sound.failed, f"seed {seed} also fails with the sound engine:\n{sound.report()}"
    named = [v for v in caught.violations if v.clause in EXPECTED[mode]]
    assert named and all(v.detail for v in named), caught.report()


# Faults built from the engine's public API only, beyond the engine's own Sabotage
# modes: each loses one kind of changelog row, ignores the start positions, or
# sizes the frontier one byte wrong.
# They show which oracle clause guards which part of the ordering state.


class _ForgetsFrontier(ProcessEngine):
    """Frontier rows ('c') never reach the changelog: a restarted task under-states causes."""

    def take_deltas(self) -> tuple[tuple[bytes, bytes | None], ...]:
        return tuple(d for d in super().take_deltas() if d[0][0] != TAG_FRONTIER)


class _ForgetsCoverage(ProcessEngine):
    """Coverage rows ('f') never reach the changelog: replays below the start get accepted."""

    def take_deltas(self) -> tuple[tuple[bytes, bytes | None], ...]:
        return tuple(d for d in super().take_deltas() if d[0][0] != TAG_FED)


class _ForgetsDeliveredPast(ProcessEngine):
    """Delivered-past rows ('p') never reach the changelog: a joining channel is not clamped."""

    def take_deltas(self) -> tuple[tuple[bytes, bytes | None], ...]:
        return tuple(d for d in super().take_deltas() if d[0][0] != TAG_PAST)


class _BudgetOffByOne(ProcessEngine):
    """Counts the frontier one byte too large (as a budget one byte too small would)."""

    def __init__(self, store: OrderingStore, *, received: Iterable[ChannelId],
                 budget_bytes: int = DEFAULT_BUDGET_BYTES,
                 on_warning: Callable[[str], None] | None = None) -> None:
        super().__init__(store, received=received, budget_bytes=budget_bytes - 1,
                         on_warning=on_warning)


class _StartsFromZero(ProcessEngine):
    """Ignores the reported start positions (as if every channel started at offset 0)."""

    def start(self, start_positions: Mapping[ChannelId, int]) -> None:
        super().start(dict.fromkeys(start_positions, 0))


@pytest.mark.slow
@pytest.mark.parametrize(("broken", "clauses"), [
    (_ForgetsFrontier, {M1}),
    (_ForgetsCoverage, {V2_DUP}),
    (_ForgetsDeliveredPast, {V1}),
    (_BudgetOffByOne, {REFUSED}),  # worlds whose budget is exactly their largest frontier
    # Records below the start are fed again and accepted (a duplicate), or the run
    # never quiesces; which one a seed shows depends on its schedule.
    (_StartsFromZero, {V5, V2_DUP}),
], ids=lambda x: x.__name__ if isinstance(x, type) else "")
def test_oracle_catches_state_faults(broken: type[ProcessEngine], clauses: set[str]) -> None:
    for seed in parse_seeds(DEFAULT_SEEDS):
        result = run(seed, broken)
        if result.clauses() & clauses:
            assert not run(seed).failed, f"seed {seed} also fails with the sound engine"
            return
    raise AssertionError(f"{broken.__name__} survived seeds {DEFAULT_SEEDS}: "
                         f"no {sorted(clauses)} reported")


# The hosts' read-position guards (workers.positions, workers.offsets), each switched
# off in turn: the fault it guards against then reaches the oracle, which names it,
# while the guarded host cures the same seed (a foreign commit, overridden) or refuses
# it by name (an emptied changelog).


@pytest.mark.parametrize(("fault", "clauses"), [
    # Records a foreign consumer skipped are never delivered (loss), and what waits
    # on them is delivered around them or never.
    (FOREIGN_COMMIT, {V2_LOSS, V5, V1}),
    # Held messages and the frontier are gone with the changelog's records.
    (EMPTIED_CHANGELOG, {M1, V2_LOSS, V1}),
], ids=["FOREIGN_COMMIT", "EMPTIED_CHANGELOG"])
def test_oracle_catches_a_fault_with_its_guard_off(fault: str, clauses: set[str]) -> None:
    for seed in parse_seeds(DEFAULT_SEEDS):
        result = run(seed, guards=False, fault=fault)
        if result.stats["faults"] and result.clauses() & clauses:
            guarded = run(seed, fault=fault)
            # A foreign commit is overridden (nothing to report); an emptied changelog
            # is refused by name.
            want = set() if fault == FOREIGN_COMMIT else {REFUSED}
            assert guarded.clauses() == want, guarded.report()
            return
    raise AssertionError(f"{fault} with the guards off survived seeds {DEFAULT_SEEDS}: "
                         f"no {sorted(clauses)} reported")


def test_committing_at_a_trailing_marker_is_caught_when_retention_empties_the_partition(
) -> None:
    # Sabotage: positions stay at the last fed offset + 1 (the trailing commit marker);
    # retention then empties the quiet partition and the next fetch reports positions
    # discarded unread that never held a record.
    for seed in parse_seeds(DEFAULT_SEEDS):
        result = run(seed, markers=False)
        if result.clauses() & {REFUSED}:
            assert "POSITIONS_DISCARDED_UNREAD" in result.violations[0].detail
            assert not run(seed).failed, f"seed {seed} also fails with the sound host"
            return
    raise AssertionError(f"committing at markers survived seeds {DEFAULT_SEEDS}")
