"""A bootstrap address that refuses the connection fails the start within seconds.

``parsley-coordinator run`` against ``127.0.0.1:<a closed port>`` exits FAILURE with the
message naming the address and the TCP probe's "connection refused", which ends the start
at once instead of the 10 s the first metadata request may take (docs/operations.md,
"Broker outage"); an address that accepts the connection but does not answer keeps that
wait (tests/unit/test_bootstrap_probe.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

from coordinator.cli.common import ExitCode
from tests.cli_support import CLI, RELAY_APP


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_run_against_a_closed_port_fails_fast_naming_the_address(tmp_path: Path) -> None:
    (tmp_path / "cliapp.py").write_text(RELAY_APP)
    port = _closed_port()
    env = dict(os.environ)
    env.update({"CLI_SRC": "refused-src", "CLI_OUT": "refused-out",
                "PYTHONPATH": os.pathsep.join([str(Path.cwd()), env.get("PYTHONPATH", "")])})
    began = time.monotonic()
    res = subprocess.run([*CLI, "run", "cliapp:processes", "--bootstrap-servers",
                          f"127.0.0.1:{port}", "--prefix", "refused", "--state-dir",
                          str(tmp_path / "state")], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - began
    print(f"run against a closed port exited after {took:.2f} s")
    assert res.returncode == ExitCode.FAILURE, res.stderr
    assert f"could not reach the Kafka cluster at 127.0.0.1:{port}" in res.stderr, res.stderr
    # "connection refused" is the TCP probe's answer, which ends the start at once; the
    # metadata request it spares would have waited REACH_TIMEOUT_S and named a librdkafka
    # error instead. The time (mostly the interpreter's start and imports, 9.5 s once on a
    # CI machine under load) is only printed; the bound is liveness, not speed.
    assert "connection refused" in res.stderr, res.stderr
    assert took < 45, f"took {took:.1f} s"
    assert not [ln for ln in res.stderr.splitlines() if ln.startswith("%")], res.stderr
