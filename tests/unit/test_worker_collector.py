"""The worker process's garbage-collector settings (workers.process_setup.tune_collector).

Run in a fresh interpreter: the settings are process-wide, and the test process keeps its own.
"""

from __future__ import annotations

import subprocess
import sys

from workers.process_setup import GC_YOUNG_THRESHOLD

PROBE = """
import gc
before = gc.get_threshold()
from workers.process_setup import tune_collector
tune_collector()
after = gc.get_threshold()
print(after[0], before[1:] == after[1:], gc.get_freeze_count() > 0, gc.isenabled())
"""


def test_tune_collector_raises_the_young_threshold_and_freezes_the_startup_heap() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(GC_YOUNG_THRESHOLD), "True", "True", "True"]


def test_cycles_are_still_collected_after_tuning() -> None:
    probe = """
import gc, weakref
from workers.process_setup import tune_collector
tune_collector()
class Node: pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
for _ in range(3):
    junk = [[i] for i in range(GC_YOUNG_THRESHOLD + 1)]
    del junk
print(gone() is None)
""".replace("GC_YOUNG_THRESHOLD", str(GC_YOUNG_THRESHOLD))
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]
