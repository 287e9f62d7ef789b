"""Which implementation of the causal core runs: ``native`` (Rust) or ``python``.

The causal core (the ``parsley.causes`` codec, the ordering-state codec and the ordering
engine) exists twice: in Rust, the extension module ``parsley._native`` built from
``native/`` by ``pip install``, and in pure Python, the reference. Both give the same values,
bytes and refusals. The choice is made once, at import, from ``PARSLEY_ENGINE``:

* unset or empty: ``native`` when ``parsley._native`` imports, otherwise ``python`` with one
  logged warning (logger ``parsley.native``) naming why;
* ``native``: the Rust core; ``ImportError`` naming the fix when it is not built;
* ``python``: the pure-Python reference, even when the Rust core is built.

Any other value raises ``ValueError`` at import. The choice holds for the life of the
process (docs/operations.md, "Choosing the engine"). This is the one core module that reads
the environment or logs (``tests/unit/test_purity.py`` admits it for that only); the
modules that switch import :data:`ENGINE` and :data:`NATIVE` from here.
"""

from __future__ import annotations

import logging
import os
from types import ModuleType
from typing import Final, Literal

__all__ = ["BUILT", "ENGINE", "ENV_VAR", "NATIVE", "NATIVE_IMPORT_ERROR"]

ENV_VAR: Final = "PARSLEY_ENGINE"
"""The environment variable choosing the implementation: ``native`` or ``python``."""

_log = logging.getLogger("parsley.native")


def _load() -> tuple[ModuleType | None, str | None]:
    try:
        from parsley import _native
    except ImportError as exc:
        return None, f"{type(exc).__name__}: {exc}"
    return _native, None


def _choose(wanted: str, module: ModuleType | None, error: str | None) -> str:
    if wanted == "python":
        return "python"
    if wanted == "native":
        if module is None:
            raise ImportError(
                f"{ENV_VAR}=native but the native core parsley._native does not import "
                f"({error}); install a Rust toolchain (cargo, rustc) and reinstall the "
                f"project (pip install -e .), or set {ENV_VAR}=python"
            )
        return "native"
    if wanted:
        raise ValueError(f"{ENV_VAR} must be 'native' or 'python', got {wanted!r}")
    if module is None:
        _log.warning(
            "parsley: the native core parsley._native does not import (%s); running the "
            "pure-Python engine, several times slower. Install a Rust toolchain (cargo, "
            "rustc) and reinstall the project (pip install -e .), or set %s=python to "
            "choose it explicitly.",
            error,
            ENV_VAR,
        )
        return "python"
    return "native"


_module, NATIVE_IMPORT_ERROR = _load()
"""Why ``parsley._native`` did not import (``"ImportError: ..."``), or ``None``."""

ENGINE: Final[Literal["native", "python"]] = (
    "native"
    if _choose(os.environ.get(ENV_VAR, "").strip().lower(), _module, NATIVE_IMPORT_ERROR)
    == "native"
    else "python"
)
"""The implementation this process runs: ``"native"`` or ``"python"``."""

NATIVE: Final[ModuleType | None] = _module if ENGINE == "native" else None
"""The extension module ``parsley._native`` when :data:`ENGINE` is ``"native"``, else ``None``."""

BUILT: Final[ModuleType | None] = _module
"""The extension module when it imports, whichever engine was chosen (differential tests,
benchmarks and cache clearing use it); ``None`` when it is not built."""
