"""Refuse a start left at a script's top level, outside an ``if __name__ == "__main__":`` block.

Each worker is a process spawned with the ``spawn`` start method (``multiprocess``), and
a spawned process imports the parent's main module again (as ``__mp_main__``) before it
runs the worker, so that the handlers defined there exist in it. A ``Parsley.start`` at
the script's top level would then run again in every worker, which multiprocessing
refuses ("An attempt has been made to start a new process before the current process
has finished its bootstrapping phase") only after that second start's bootstrap.
:func:`check_main_guard` finds such a call before anything starts and names the line
(docs/operations.md, "Starting from a script").
"""

from __future__ import annotations

import ast
import os
import sys
from types import FrameType, ModuleType
from typing import Final

__all__ = [
    "GUARD",
    "check_main_guard",
    "main_guard_message",
    "reimported_in_workers",
    "unguarded_call_site",
]

GUARD: Final = 'if __name__ == "__main__":'
"""The line a script must put its start under."""


def main_guard_message(filename: str, line: int | None) -> str:
    """The one-line refusal for a start at ``filename``'s top level (``line``, 1-based)."""
    where = filename if line is None else f"{filename}, line {line}"
    return (f"Parsley.start was called at the top level of {where}, outside an "
            f"'{GUARD}' block: every worker is a spawned process that imports this script "
            f"again, so the start would run again in each; put the start and what follows "
            f"it under {GUARD} (docs/operations.md, \"Starting from a script\")")


def _is_main_test(test: ast.expr) -> tuple[bool, bool]:
    """``(is a __name__ vs "__main__" comparison, compares with ==)``."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq | ast.NotEq)):
        return False, False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return bool(names and mains), isinstance(test.ops[0], ast.Eq)


def _guarded(tree: ast.AST, line: int) -> bool:
    """Whether ``line`` lies in a block only run when ``__name__ == "__main__"`` (pure)."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.If):
            continue
        is_main, equal = _is_main_test(node.test)
        block = node.body if equal else node.orelse
        if is_main and block and block[0].lineno <= line <= (block[-1].end_lineno or 0):
            return True
    return False


def reimported_in_workers(main: ModuleType) -> bool:
    """Whether a spawned process runs ``main`` (the parent's ``__main__``) again.

    The rule of ``multiprocess.spawn`` (as ``multiprocessing.spawn``): a module run
    with ``-m`` is imported again by name unless it is a package's ``__main__``; a
    script is run again by path unless it is IPython's launcher; ``python -c`` and an
    interactive session are not.
    """
    name = getattr(getattr(main, "__spec__", None), "name", None)
    if name is not None:
        return not (name == "__main__" or name.endswith(".__main__"))
    path = getattr(main, "__file__", None)
    return path is not None and os.path.splitext(os.path.basename(path))[0] != "ipython"


def _module_frame(main: ModuleType, frame: FrameType | None) -> FrameType | None:
    while frame is not None:
        if frame.f_globals is main.__dict__ and frame.f_code.co_name == "<module>":
            return frame
        frame = frame.f_back
    return None


def unguarded_call_site(frame: FrameType | None = None) -> tuple[str, int] | None:
    """Where the main module's top level calls into this start unguarded, if it does.

    Args:
        frame: the frame to walk outwards from (the caller's by default).

    Returns:
        ``(file, line)`` of the main module's top-level statement that leads to the
        call, when the main module is one a spawned worker runs again
        (:func:`reimported_in_workers`) and that statement is not under
        ``if __name__ == "__main__":``; ``None`` otherwise, and when the source
        cannot be read (nothing is refused on a guess).
    """
    main = sys.modules.get("__main__")
    if main is None or not reimported_in_workers(main):
        return None
    top = _module_frame(main, frame if frame is not None else sys._getframe(1))
    if top is None:
        return None
    filename, line = top.f_code.co_filename, top.f_lineno
    try:
        with open(filename, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return None
    return None if _guarded(tree, line) else (filename, line)


def _in_spawned_bootstrap() -> bool:
    """Whether this process is a spawned child still importing its parent's main module."""
    for name in ("multiprocess", "multiprocessing"):
        mod = sys.modules.get(name)
        if mod is None:
            continue
        try:
            if getattr(mod.current_process(), "_inheriting", False):
                return True
        except Exception:  # a half-initialised module: not ours to judge
            continue
    return False


def check_main_guard() -> None:
    """Refuse a start the spawned workers would run again (see the module docstring).

    Raises:
        StartError: in the parent, a start reached from the main module's top level
            outside ``if __name__ == "__main__":``; in a spawned child still importing
            that module, any start (the parent's check could not read the source).
            The message is :func:`main_guard_message`.
    """
    from coordinator.bootstrap.common import StartError

    site = unguarded_call_site(sys._getframe(1))
    if site is not None:
        raise StartError(main_guard_message(*site))
    if _in_spawned_bootstrap():
        main = sys.modules.get("__main__")
        raise StartError(main_guard_message(
            str(getattr(main, "__file__", None) or "the main module"), None))
