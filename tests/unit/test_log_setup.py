"""The coordinator's log lines from a script with no logging configured
(coordinator.log_setup; docs/operations.md, "Logging")."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import logging
    from coordinator.log_setup import ensure_log_handler
    ensure_log_handler()
    ensure_log_handler()  # a second start adds no second handler
    log = logging.getLogger("parsley.coordinator.supervisor")
    log.warning("task 0 stopped: REFUSAL X")
    log.info("not shown: the root's level is WARNING")
    CONFIGURE
    log.warning("after configuring")
""")


def _run(configure: str, before: str = "") -> str:
    code = before + SCRIPT.replace("CONFIGURE", configure)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    return res.stderr


def test_unconfigured_script_gets_formatted_lines_once() -> None:
    err = _run("").splitlines()
    assert len(err) == 2, err
    line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING \[coordinator pid \d+\] "
                      r"parsley\.coordinator\.supervisor: ")
    assert line.match(err[0]) and err[0].endswith("task 0 stopped: REFUSAL X"), err
    assert line.match(err[1]) and err[1].endswith("after configuring"), err


def test_logging_configured_later_takes_over_without_a_second_copy() -> None:
    err = _run('logging.basicConfig(format="APP %(message)s")').splitlines()
    assert err[1:] == ["APP after configuring"], err


def test_logging_configured_before_is_left_alone() -> None:
    err = _run("", before='import logging; logging.basicConfig(format="APP %(message)s")\n')
    assert err.splitlines() == ["APP task 0 stopped: REFUSAL X", "APP after configuring"], err
