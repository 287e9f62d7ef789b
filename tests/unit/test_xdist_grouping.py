"""``--dist loadgroup`` keeps an ``xdist_group`` on one worker in this environment.

``make test``'s parallel phase relies on it: tests/conftest.py puts the tests of each
broker started on demand in one ``xdist_group``, so that only one worker starts that broker
(``ON_DEMAND_BROKERS``). Under pytest 9.2 with pytest-xdist 3.8 the grouping silently did
nothing (every worker started its own broker), which setup.cfg's pin now prevents; this
runs a small session the way conftest.py marks it and fails if the group is spread.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = '''
import pytest

@pytest.fixture(scope="session")
def shared():
    return 1

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "shared" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("shared"))
'''

TESTS = '''
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_grouped(shared, i):
    with open(os.path.join(os.environ["GROUPING_OUT"], f"ran-{i}"), "w") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"])

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    pass
'''


@pytest.mark.slow
def test_a_group_marked_at_collection_runs_on_one_worker(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_grouped.py").write_text(TESTS)
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup", "-p",
         "no:cacheprovider", "--basetemp", str(tmp_path / "bt"), str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "GROUPING_OUT": str(out)})
    assert done.returncode == 0, done.stdout + done.stderr
    ran = list(out.glob("ran-*"))
    workers = {p.read_text() for p in ran}
    assert len(ran) == 6, done.stdout
    assert len(workers) == 1, f"the group ran on {sorted(workers)}"
