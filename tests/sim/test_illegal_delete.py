"""A received topic deleted while a running task holds messages from it, in the simulator.

``world.run(illegal_delete=True)`` deletes, once, a received topic from which a running
task holds messages, and steps that task at once (its next punctuation). With the
worker's running identity check (``workers.identity.apply_received_verdicts``) the step
refuses ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` naming the topic; without it (the
sabotage) the task steps on, reported ``D1`` — and the same seed with the check is
refused at that step (docs/failing-closed.md, "A received topic deleted while the
process runs").
"""

from __future__ import annotations

import pytest

from parsley.refusals import Reason
from tests.seed_shapes import assert_seed_shape
from tests.sim.world import D1, REFUSED, run

pytestmark = pytest.mark.usefixtures("engine_impl")

SEEDS = range(1, 61)


@pytest.mark.slow
def test_a_deletion_with_held_messages_is_refused_at_the_next_punctuation() -> None:
    deleted = 0
    for seed in SEEDS:
        result = run(seed, illegal_delete=True)
        assert D1 not in result.clauses(), result.report()
        if result.stats["illegal_deletes"] == 0:
            continue  # nothing was ever held while running in this world
        deleted += 1
        refused = [v for v in result.violations if v.clause == REFUSED]
        assert len(refused) == 1, result.report()
        assert refused[0].detail.startswith("CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES: "), \
            refused[0].detail
        detail = refused[0].detail.removeprefix("CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES: ")
        assert_seed_shape(Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES, detail)
        assert "The channel was topic '" in detail, detail
    assert deleted >= 5, f"only {deleted} of {len(SEEDS)} worlds held a message to delete under"


def test_sabotage_without_the_running_check_is_caught_by_d1() -> None:
    for seed in SEEDS:
        broken = run(seed, illegal_delete=True, deletion_check=False)
        if D1 in broken.clauses():
            guarded = run(seed, illegal_delete=True)
            assert D1 not in guarded.clauses()
            assert any(v.clause == REFUSED and "CHANNEL_DELETED_WITH_UNDELIVERED" in v.detail
                       for v in guarded.violations), guarded.report()
            return
    pytest.fail(f"the deletion-check sabotage survived seeds {SEEDS}")
