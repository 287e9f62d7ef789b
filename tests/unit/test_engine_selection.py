"""Which engine a process runs: ``PARSLEY_ENGINE`` and ``parsley.engine.engine_type()``.

The native core is the default when ``parsley._native`` imports; ``PARSLEY_ENGINE=python``
chooses the pure-Python reference (docs/operations.md, "Choosing the engine"). Each case
runs in a fresh interpreter, since the choice is made once per process.
"""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = ("from parsley.engine import engine_type; from parsley.native import ENGINE; "
         "print(ENGINE, engine_type().__name__)")


def choice(value: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PARSLEY_ENGINE"}
    if value is not None:
        env["PARSLEY_ENGINE"] = value
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, timeout=60, check=True)
    return done.stdout.strip()


def test_native_is_the_default_when_built() -> None:
    from parsley.engine.native_engine import NativeProcessEngine

    if NativeProcessEngine is None:  # not built: the reference, with a warning (below)
        assert choice(None) == "python ProcessEngine"
    else:
        assert choice(None) == "native NativeProcessEngine"
        assert choice("native") == "native NativeProcessEngine"


def test_python_chooses_the_reference_engine() -> None:
    assert choice("python") == "python ProcessEngine"


def test_the_native_engine_is_there_when_the_core_imports_and_always_under_ci() -> None:
    from parsley.engine.native_engine import NativeProcessEngine
    from parsley.native import NATIVE_IMPORT_ERROR

    assert (NativeProcessEngine is None) == (NATIVE_IMPORT_ERROR is not None)
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        assert NativeProcessEngine is not None, f"not built: {NATIVE_IMPORT_ERROR}"
