"""The chaos harness: a causal pipeline under load, a seeded schedule of faults, a verdict.

Shared by the CI chaos test (tests/chaos/test_chaos.py) and the soak (perf/soak.py).
"""
