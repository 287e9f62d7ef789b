"""Every test of ``make test``'s serial phase sits in one of its three lanes.

The serial phase runs under ``-n 3 --dist loadgroup`` (Makefile, ``SERIAL_LANES``):
tests/conftest.py gives each ``serial`` test the ``xdist_group`` of the broker it starts
(``kafka_cluster``, ``private_kafka``) or ``shared_serial``. A serial test with no group
would be spread over the lanes by xdist and run beside a test of its own lane's broker;
one with a fourth group would start a fourth lane's worth of brokers on a 2-core machine.
The tests marked ``load`` share one lane, so that no two of them load the machine at once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import LOAD_LANE, SERIAL_BROKERS, SHARED_SERIAL_GROUP

REPORTER = '''
def pytest_collection_finish(session):
    with open(__import__("os").environ["LANES_OUT"], "w") as out:
        for item in session.items:
            groups = [m.args[0] for m in item.iter_markers("xdist_group")]
            load = "load" if item.get_closest_marker("load") else ""
            out.write(item.nodeid + "\\t" + ",".join(groups) + "\\t" + load + "\\n")
'''

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_each_serial_test_has_one_of_three_lanes(tmp_path: Path) -> None:
    (tmp_path / "lane_reporter.py").write_text(REPORTER)
    out = tmp_path / "lanes.tsv"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--phase", "serial", "--collect-only", "-q",
         "-p", "no:cacheprovider", "-p", "lane_reporter"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "LANES_OUT": str(out),
             "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    assert len(rows) >= 10, rows  # the phase has its cluster, private-broker and shared tests
    lanes = SERIAL_BROKERS | {SHARED_SERIAL_GROUP}
    wrong = [(node, groups) for node, groups, _ in rows
             if len(groups.split(",")) != 1 or groups not in lanes]
    assert not wrong, f"serial tests outside one of {sorted(lanes)}: {wrong}"
    assert {groups for _, groups, _ in rows} == lanes
    loads = [(node, groups) for node, groups, load in rows if load]
    assert loads and all(groups == LOAD_LANE for _, groups in loads), loads
