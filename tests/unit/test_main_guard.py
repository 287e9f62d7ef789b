"""Which top-level lines a spawned worker would run again (coordinator.runtime.main_guard, pure)."""

from __future__ import annotations

import ast
import types

from coordinator.runtime.main_guard import (
    GUARD,
    _guarded,
    main_guard_message,
    reimported_in_workers,
)

SOURCE = '''\
import x
start()
if __name__ == "__main__":
    start()
if "__main__" == __name__:
    main()
if __name__ != "__main__":
    pass
else:
    start()
if __name__ == "__main__":
    pass
else:
    start()
'''


def test_only_lines_under_the_guard_count_as_guarded() -> None:
    tree = ast.parse(SOURCE)
    assert not _guarded(tree, 2)
    assert _guarded(tree, 4)
    assert _guarded(tree, 6)
    assert _guarded(tree, 10)
    assert not _guarded(tree, 14)


def test_the_message_is_one_line_naming_the_file_and_what_to_add() -> None:
    msg = main_guard_message("/app/run.py", 12)
    assert "\n" not in msg
    assert "/app/run.py, line 12" in msg and GUARD in msg


def _main(name: str | None, path: str | None) -> types.ModuleType:
    mod = types.ModuleType("__main__")
    mod.__spec__ = None if name is None else types.SimpleNamespace(name=name)  # type: ignore[assignment]
    if path is not None:
        mod.__file__ = path
    return mod


def test_which_main_modules_a_spawned_worker_runs_again() -> None:
    assert reimported_in_workers(_main(None, "/app/run.py"))
    assert reimported_in_workers(_main("app.run", "/app/run.py"))
    assert not reimported_in_workers(_main("app.__main__", "/app/__main__.py"))
    assert not reimported_in_workers(_main(None, "/venv/bin/ipython"))
    assert not reimported_in_workers(_main(None, None))  # python -c, a REPL
