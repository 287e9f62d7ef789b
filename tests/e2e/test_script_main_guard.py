"""``Parsley.start`` from a plain script: without a ``__main__`` guard it fails at once.

Workers are spawned processes; a spawned process imports the script that started the
coordinator again (as ``__mp_main__``), so a start left at the script's top level would
run again in every worker. The start refuses before anything runs, in one line that says
what to add; the same script with the guard runs (docs/operations.md, "Starting from a
script").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]

SCRIPT = '''
import sys
from coordinator.runtime.api import Parsley
from coordinator.config import ParsleyConfig
from parsley import Channel, Effects, Process
from parsley.serdes import STRING

TOPIC = {topic!r}

def relay(delivery, state):
    return Effects.builder().build()

process = Process("relay").receives(Channel(TOPIC, STRING, STRING), relay)
config = ParsleyConfig({bootstrap!r}, {prefix!r}, state_dir={state!r})
'''

UNGUARDED = SCRIPT + '''
with Parsley.start(config, process, control=None) as parsley:
    parsley.await_stopped(timeout=30)
'''

GUARDED = SCRIPT + '''
def main():
    with Parsley.start(config, process, control=None) as parsley:
        deadline = 60
        import time
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            status = parsley.status()["relay"]
            if status.state.name == "RUNNING":
                print("RUNNING", flush=True)
                return 0
            time.sleep(0.2)
        return 1

if __name__ == "__main__":
    sys.exit(main())
'''


def _run(tmp_path: Path, name: str, body: str, bootstrap: str, topic: str
         ) -> tuple[subprocess.CompletedProcess[str], float]:
    script = tmp_path / f"{name}.py"
    script.write_text(body.format(topic=topic, bootstrap=bootstrap,
                                  prefix=f"guard-{uuid.uuid4().hex[:8]}",
                                  state=str(tmp_path / f"state-{name}")))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - began


def test_a_script_without_the_guard_fails_at_once_saying_what_to_add(
        kafka_bootstrap: str, create_topic: Any, tmp_path: Path) -> None:
    topic = f"guard{uuid.uuid4().hex[:8]}"
    create_topic(topic, partitions=2)
    done, took = _run(tmp_path, "plain", UNGUARDED, kafka_bootstrap, topic)
    assert done.returncode != 0, done.stdout + done.stderr
    assert took < 10, f"took {took:.1f} s: {done.stderr[-2000:]}"
    assert 'if __name__ == "__main__":' in done.stderr, done.stderr[-2000:]
    assert "bootstrapping phase" not in done.stderr, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if 'if __name__ == "__main__":' in ln]
    assert lines and "plain.py" in lines[-1], lines


@pytest.mark.slow
def test_the_same_script_with_the_guard_runs(
        kafka_bootstrap: str, create_topic: Any, tmp_path: Path) -> None:
    topic = f"guard{uuid.uuid4().hex[:8]}"
    create_topic(topic, partitions=2)
    done, _took = _run(tmp_path, "guarded", GUARDED, kafka_bootstrap, topic)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "RUNNING" in done.stdout
