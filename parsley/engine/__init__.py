"""The pure ordering engine: channels, deliverability, the engine, ordering-state codec.

Imports only the standard library and ``parsley.wire``/``parsley.refusals``.
"""
