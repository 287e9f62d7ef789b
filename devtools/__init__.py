"""Developer tools: the local Kafka broker, and the helpers tests and benchmarks share.

Not part of the product: nothing under parsley/, workers/ or coordinator/ imports it
(tests/unit/test_layering.py). See docs/architecture.md for the layer map.
"""
