"""Every test of ``make test``'s serial phase sits in one of its three lanes, and the load
phase holds exactly the 3-broker cluster's tests and those marked ``load``.

The serial phase runs under ``-n 3 --dist loadgroup`` (Makefile, ``SERIAL_LANES``):
tests/conftest.py gives each ``serial`` test the ``xdist_group`` of the private broker it
starts (``private_kafka`` or ``private_kafka_b``, one per half of those tests) or
``shared_serial``. A serial test with no group would be spread over the lanes by xdist
and run beside a test of its own lane's broker; one with a fourth group would start a
fourth lane on a 2-core machine. The load phase (``--phase load``) runs the tests that
load the machine after the others, one at a time or in two lanes (the 3-broker
cluster's, ``load``'s: Makefile, ``LOAD_LANES``): one
of them in the serial phase would run beside the private broker's recovery tests, which
then miss their bounds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    LOAD_LANE,
    LOAD_SECOND_LANE,
    PRIVATE_SECOND_LANE,
    PRIVATE_SECOND_MODULES,
    SHARED_SERIAL_GROUP,
)

REPORTER = '''
def pytest_collection_finish(session):
    with open(__import__("os").environ["LANES_OUT"], "w") as out:
        for item in session.items:
            groups = [m.args[0] for m in item.iter_markers("xdist_group")]
            load = "load" if item.get_closest_marker("load") else ""
            cluster = "cluster" if "kafka_cluster" in item.fixturenames else ""
            out.write("\\t".join([item.nodeid, ",".join(groups), load, cluster]) + "\\n")
'''

ROOT = Path(__file__).resolve().parents[2]


def _phase(phase: str, tmp_path: Path) -> list[list[str]]:
    """``(nodeid, groups, "load" or "", "cluster" or "")`` of each test ``--phase`` keeps."""
    (tmp_path / "lane_reporter.py").write_text(REPORTER)
    out = tmp_path / f"{phase}.tsv"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "tests", "--phase", phase, "--collect-only", "-q",
         "-p", "no:cacheprovider", "-p", "lane_reporter"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "LANES_OUT": str(out),
             "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [line.split("\t") for line in out.read_text().splitlines()]


@pytest.mark.slow
def test_each_serial_test_has_one_of_three_lanes_and_the_load_tests_two_of_their_own(
        tmp_path: Path) -> None:
    serial = _phase("serial", tmp_path)
    assert len(serial) >= 10, serial  # the private broker's tests and the shared ones
    lanes = {"private_kafka", PRIVATE_SECOND_LANE, SHARED_SERIAL_GROUP}
    wrong = [(node, groups) for node, groups, load, cluster in serial
             if groups not in lanes or load or cluster]
    assert not wrong, f"serial tests outside one of {sorted(lanes)}, or load tests: {wrong}"
    assert {groups for _, groups, _, _ in serial} == lanes
    # Each module the second private lane names exists and lands there (a renamed one
    # would fall back to the first lane unseen).
    second = {Path(node.split("::")[0]).name for node, groups, _, _ in serial
              if groups == PRIVATE_SECOND_LANE}
    assert second == PRIVATE_SECOND_MODULES, (second, PRIVATE_SECOND_MODULES)

    load = _phase("load", tmp_path)
    assert any(cluster for *_, cluster in load) and any(marked for _, _, marked, _ in load)
    wrong = [(node, groups) for node, groups, marked, cluster in load
             if groups != (LOAD_LANE if cluster else LOAD_SECOND_LANE) or not (marked or cluster)]
    assert not wrong, f"load-phase tests outside their lane, or that neither load nor use " \
        f"the cluster: {wrong}"
