"""``parsley-coordinator run APP``: how the APP spec is loaded and how each mistake is reported.

Every mistake is a ``click.BadParameter`` (exit 2, usage) naming what is wrong,
never a traceback with the exit status reserved for Parsley's own bugs.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import click
import pytest

from coordinator.cli.common import load_app
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES


def _module(tmp_path: Path, source: str) -> str:
    name = f"app_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(source)
    sys.path.insert(0, str(tmp_path))
    return name


def test_a_process_list_loads(tmp_path: Path) -> None:
    name = _module(tmp_path, "from parsley import Channel, Effects, Process\n"
                             "from parsley.serdes import BYTES\n"
                             "P = [Process('p').receives(Channel('t', BYTES, BYTES),"
                             " lambda d, s: Effects.none())]\n")
    processes = load_app(f"{name}:P")
    assert [p.name for p in processes] == ["p"]
    assert isinstance(processes[0], Process)
    assert Channel and Effects and BYTES  # the public names the app uses exist


@pytest.mark.parametrize(("source", "attr", "expected"), [
    ("x = 1/0\n", "P", "raised ZeroDivisionError: division by zero (at "),
    ("P = 1\n", "Q", "has no attribute 'Q'"),
    ("P = 1\n", "P", "Process"),
])
def test_mistakes_are_usage_errors_naming_the_problem(
    tmp_path: Path, source: str, attr: str, expected: str
) -> None:
    name = _module(tmp_path, source)
    with pytest.raises(click.BadParameter) as info:
        load_app(f"{name}:{attr}")
    assert expected in str(info.value.message), info.value.message


def test_a_spec_without_a_colon_is_refused() -> None:
    with pytest.raises(click.BadParameter, match="APP must be module:attribute"):
        load_app("nocolon")


def test_a_module_that_does_not_exist_is_named() -> None:
    with pytest.raises(click.BadParameter, match="cannot import 'no_such_module_xyz'") as info:
        load_app("no_such_module_xyz:P")
    text = " ".join(info.value.message.split())
    assert "imported from the current directory" in text and "no_such_module_xyz.py" in text
