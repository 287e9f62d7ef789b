"""Lost store changelogs in the simulator: refused, never a silent reset; and the
guard is live (a sabotaged host without it is caught by ``S1``).

A task's store changelog is deleted, recreated empty or purged after the task
committed deliveries (``world.run(store_loss=...)``), and the task is rebuilt from
it. With the worker's rule (``workers.store_changelogs``) every such run ends in
``ORDERING_STATE_LOST`` and no ``S1``; without it (the sabotage) a seed shows ``S1``,
the store restored with fewer counts than were committed, and the same seed with the
rule is refused (docs/failing-closed.md, "Store changelogs").
"""

from __future__ import annotations

import pytest

from tests.sim.host import S1
from tests.sim.world import REFUSED, run

pytestmark = pytest.mark.usefixtures("engine_impl")

SEEDS = range(1, 41)


@pytest.mark.parametrize("how", ["delete", "recreate", "purge"])
def test_a_lost_store_changelog_is_refused_in_every_world(how: str) -> None:
    lost = 0
    for seed in SEEDS:
        result = run(seed, store_loss=how)
        assert S1 not in result.clauses(), result.report()
        if result.stats["store_losses"] == 0:
            assert not result.failed, result.report()  # the world quiesced before a loss
            continue
        lost += 1
        refused = [v for v in result.violations if v.clause == REFUSED]
        assert refused and all(v.detail.startswith("ORDERING_STATE_LOST") for v in refused), \
            result.report()
    assert lost >= len(SEEDS) // 2, f"only {lost} of {len(SEEDS)} worlds lost a changelog"


@pytest.mark.parametrize("how", ["delete", "recreate", "purge"])
def test_sabotage_without_the_store_rule_is_caught_by_s1(how: str) -> None:
    for seed in SEEDS:
        broken = run(seed, store_loss=how, store_guard=False)
        if S1 in broken.clauses():
            named = [v for v in broken.violations if v.clause == S1]
            assert all("silently reset" in v.detail for v in named)
            guarded = run(seed, store_loss=how)
            assert S1 not in guarded.clauses()
            assert any(v.clause == REFUSED and "ORDERING_STATE_LOST" in v.detail
                       for v in guarded.violations), guarded.report()
            return
    pytest.fail(f"the store sabotage ({how}) survived seeds {SEEDS}")
