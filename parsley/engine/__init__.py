"""The pure ordering engine: channels, deliverability, the engine, ordering-state codec.

Imports only computation from the standard library and the pure ``parsley`` modules
(``parsley.wire``, ``parsley.refusals``, ``parsley.status``) and the native core
(``parsley._native``, chosen by ``parsley.native``); ``tests/unit/test_purity.py`` holds
it to that allowlist.

Two implementations of the engine give the same decisions, refusals, headers and
changelog rows: :class:`parsley.engine.engine.ProcessEngine` (pure Python, the
reference) and :class:`parsley.engine.native_engine.NativeProcessEngine` (Rust).
:func:`engine_type` returns the one ``PARSLEY_ENGINE`` selects (docs/operations.md,
"Choosing the engine").
"""

from __future__ import annotations

from typing import Any

__all__ = ["engine_type"]


def engine_type() -> type[Any]:
    """The engine class this process runs: native unless ``PARSLEY_ENGINE=python``.

    Returns:
        :class:`~parsley.engine.native_engine.NativeProcessEngine` when
        :data:`parsley.native.ENGINE` is ``"native"``, else
        :class:`~parsley.engine.engine.ProcessEngine`. Both take the same constructor
        arguments and have the same methods.
    """
    from parsley.native import ENGINE

    if ENGINE == "native":
        from parsley.engine.native_engine import NativeProcessEngine

        if NativeProcessEngine is not None:
            return NativeProcessEngine
    from parsley.engine.engine import ProcessEngine

    return ProcessEngine
