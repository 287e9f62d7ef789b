"""The pure ordering engine: channels, deliverability, the engine, ordering-state codec.

Imports only computation from the standard library and the pure ``parsley`` modules
(``parsley.wire``, ``parsley.refusals``, ``parsley.status``); ``tests/unit/test_purity.py``
holds it to that allowlist.
"""
