"""The chaos test: a causal pipeline under load and a seeded schedule of faults (harness.py)."""
