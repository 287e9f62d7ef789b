"""Which engine the engine tests run against: both, one after the other.

The pure-Python :class:`parsley.engine.engine.ProcessEngine` is the reference and
:class:`parsley.engine.native_engine.NativeProcessEngine` the native core; every engine
test module marks itself ``pytestmark = pytest.mark.usefixtures("engine_impl")`` and
``tests/conftest.py``'s ``engine_impl`` fixture runs the module once per engine, rebinding
the module's ``ProcessEngine`` and ``engine_class`` names and the simulator's default
engine (:func:`current_engine`).
"""

from __future__ import annotations

from typing import Any

ENGINES = ("python", "native")
"""The implementations every engine test runs against."""

_current = "python"


def engine_cls(name: str) -> type[Any]:
    """The sound engine class of implementation ``name`` (``python`` or ``native``).

    Raises:
        ImportError: ``native`` when ``parsley._native`` is not built (a failure, never a
            skip: the native core is part of the product).
    """
    from parsley.engine.sabotage import engine_class

    return engine_class(None, name)


def current_engine() -> type[Any]:
    """The engine the running test module is parametrized with (the simulator's default)."""
    return engine_cls(_current)


def set_current(name: str) -> str:
    """Make ``name`` the current implementation; returns the previous one."""
    global _current
    previous, _current = _current, name
    return previous
