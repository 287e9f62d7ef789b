"""Seeded worlds with a read-position fault injected once: each is cured or refused by name.

A world of :func:`tests.sim.world.run` with ``fault=`` injects, once, into a
task that has committed:

* a foreign commit: a consumer outside Parsley in the task's group reads one or
  two visible records and commits past them while the task is stopped, or an
  offset reset moves the position back; the task's next initialisation overrides
  it with coverage + 1 (``workers.positions.foreign_positions``), and the oracle
  must then find every record delivered once, in causal order;
* an emptied changelog partition: the task's ordering-changelog records are
  purged under the live process and the task rebuilds (a crash respawn); the
  rebuild must refuse ``ORDERING_STATE_LOST`` (``workers.positions.lost_positions``).

The same sweep without faults (``tests/sim/test_causal_order.py``) runs the
guards too, with markers at the log end and quiet partitions emptied by
retention, and must never refuse. The guards switched off are the sabotage
tests in ``tests/sim/test_sabotage.py``.
"""

from __future__ import annotations

import pytest

from tests.sim.seeds import sweep_seeds
from tests.sim.world import EMPTIED_CHANGELOG, FOREIGN_COMMIT, REFUSED, run

pytestmark = pytest.mark.usefixtures("engine_impl")

@pytest.mark.slow
@pytest.mark.parametrize("fault", [FOREIGN_COMMIT, EMPTIED_CHANGELOG])
def test_every_injected_fault_is_cured_or_refused_by_name(fault: str) -> None:
    injected = overridden = 0
    for seed in sweep_seeds():
        result = run(seed, fault=fault)
        if not result.stats["faults"]:
            continue  # the world quiesced before a task had committed
        injected += 1
        if fault == FOREIGN_COMMIT:
            assert not result.failed, result.report()
            assert result.stats["overrides"] >= 1, result.report()
            overridden += result.stats["overrides"]
            continue
        assert result.clauses() == {REFUSED}, result.report()
        detail = result.violations[0].detail
        assert detail.startswith("ORDERING_STATE_LOST:"), result.report()
    assert injected >= min(20, len(sweep_seeds()) // 3), f"only {injected} worlds injected"
    print(f"{fault}: {injected} worlds injected, {overridden} foreign commits overridden")
