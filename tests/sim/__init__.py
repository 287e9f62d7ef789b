"""The verification kit: a seeded simulator and a happened-before oracle
(README.md, "The verification kit").

``generator`` draws a world from a seed, ``broker`` holds its logs (offsets
with markers and aborted records), ``host`` drives one ``ProcessEngine`` per
task under the host obligations, ``oracle`` judges the committed history from
ground truth, and ``world.run(seed)`` ties them together. Replay a failing
seed with ``PARSLEY_SIM_SEEDS=<seed> pytest tests/sim``.

``host`` re-implements the host step (feed, deliver, write deltas, commit,
crash and restore) rather than running ``workers/step.py``: the sweep covers
the engine under the host obligations, not the worker's step, which the broker
tests (``tests/integration/test_worker_*.py``) cover.
"""
