"""Which top-level lines a spawned worker would run again (coordinator.main_guard, pure)."""

from __future__ import annotations

import ast

from coordinator.main_guard import GUARD, _guarded, main_guard_message

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
