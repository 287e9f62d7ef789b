"""parsley-coordinator: bootstrap, one worker per task, supervision, status, CLI and Python API.

Public names: :class:`Parsley` (``Parsley.start(config, *processes)``) and
:class:`ParsleyConfig`. They are imported lazily, so a submodule (the CLI's ``--help``,
the control plane) loads without the runtime and its dependencies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator.config import ParsleyConfig
    from coordinator.runtime.api import Parsley

__all__ = ["Parsley", "ParsleyConfig"]


def __getattr__(name: str) -> Any:
    if name == "Parsley":
        from coordinator.runtime.api import Parsley

        return Parsley
    if name == "ParsleyConfig":
        from coordinator.config import ParsleyConfig

        return ParsleyConfig
    raise AttributeError(f"module 'coordinator' has no attribute {name!r}")
