"""The native core is built where it must be, and the engine choice is what it says.

Under ``CI=true`` the extension module ``parsley._native`` must import and, unless
``PARSLEY_ENGINE=python`` asks for the reference, be the engine in use: CI never
falls back to the pure-Python core silently (parsley/native.py). Everywhere, the
choice must be consistent with what imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

from parsley import native, wire
from parsley.engine import state_codec


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def test_native_core_is_built_under_ci() -> None:
    if _ci():
        assert native.BUILT is not None, (
            f"CI=true but parsley._native does not import ({native.NATIVE_IMPORT_ERROR}); "
            "the Rust toolchain or the build is missing"
        )
        if os.environ.get(native.ENV_VAR, "").strip().lower() != "python":
            assert native.ENGINE == "native"
    if native.BUILT is None:
        assert native.ENGINE == "python" and native.NATIVE_IMPORT_ERROR


def test_the_chosen_engine_is_the_one_exported() -> None:
    if native.ENGINE == "native":
        assert native.NATIVE is native.BUILT is not None
        assert wire.decode_causes is native.BUILT.decode_causes
        assert state_codec.load_image is native.BUILT.load_image
    else:
        assert native.NATIVE is None
        assert wire.decode_causes is wire.reference_decode_causes
        assert state_codec.load_image is state_codec.reference_load_image


def _choice(value: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != native.ENV_VAR}
    if value is not None:
        env[native.ENV_VAR] = value
    return subprocess.run(
        [sys.executable, "-c", "from parsley import native, wire; "
         "print(native.ENGINE, wire.decode_causes.__module__ == 'parsley.wire')"],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )


def test_parsley_engine_selects_the_implementation() -> None:
    python = _choice("python")
    assert python.returncode == 0 and python.stdout.split() == ["python", "True"], python
    default = _choice(None)
    expected = "native" if native.BUILT is not None else "python"
    assert default.returncode == 0 and default.stdout.split()[0] == expected, default
    bogus = _choice("fast")
    assert bogus.returncode != 0
    assert "PARSLEY_ENGINE must be 'native' or 'python', got 'fast'" in bogus.stderr


_WITHOUT_NATIVE = (
    "import logging, sys; logging.basicConfig(level=logging.WARNING); "
    "sys.modules['parsley._native'] = None; "  # makes `from parsley import _native` fail
    "from parsley import native, wire; "
    "print(native.ENGINE, wire.decode_causes is wire.reference_decode_causes)"
)


def test_a_missing_native_core_falls_back_with_one_warning() -> None:
    env = {k: v for k, v in os.environ.items() if k != native.ENV_VAR}
    run = subprocess.run([sys.executable, "-c", _WITHOUT_NATIVE], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.split() == ["python", "True"], run
    warnings = [line for line in run.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1 and "parsley._native does not import" in warnings[0], run.stderr
    env[native.ENV_VAR] = "native"
    run = subprocess.run([sys.executable, "-c", _WITHOUT_NATIVE], env=env, capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode != 0
    assert "PARSLEY_ENGINE=native but the native core parsley._native does not import" in (
        run.stderr), run.stderr
