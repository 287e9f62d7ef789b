"""The chaos test: a causal pipeline under load and a seeded fault schedule.

The harness lives in devtools/chaos/harness.py (shared with perf/soak.py).
"""
