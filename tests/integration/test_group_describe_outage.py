"""A worker's group describes live through a broker outage (docs/operations.md, "A
librdkafka abort during broker outages").

librdkafka 2.16 aborts the process (``rd_kafka_enq_once_del_source_return: Assertion
'eonce->refcnt > 0' failed``) when a request routed to a group coordinator timed out
before the coordinator was reached and the same client reaches it later. The worker's
group check (:class:`workers.guards.GroupGuard`) and its successor check
(:func:`workers.verdicts.live_successor`) therefore give their describes a request timeout
that does not expire inside librdkafka
(:data:`workers.admin.COORDINATOR_REQUEST_TIMEOUT_S`) and bound their own wait.

Each check runs in a child process (an abort would end pytest) with a new AdminClient,
against the private broker (fixture ``private_kafka``, never the shared one) frozen with
SIGSTOP: the check gives up waiting, the broker is thawed, and the child keeps its client
until a new describe on it is answered (the client reached the group coordinator). Before
the change (request timeouts of 10 s and 5 s) both children died of SIGABRT there, every
run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from devtools.private_broker import PrivateBroker

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from workers.guards import GroupGuard
from workers.verdicts import live_successor

bootstrap, check = sys.argv[1], sys.argv[2]
# The client's first ApiVersion request waits out the freeze instead of timing out and
# re-bootstrapping, after which librdkafka may take long to find the group coordinator:
# the test needs this client to reach it soon after the thaw.
admin = AdminClient({"bootstrap.servers": bootstrap, "api.version.request.timeout.ms": 60000})
started = time.monotonic()
if check == "group_guard":
    GroupGuard("outage-app", 0, ()).check(admin, time.monotonic())
else:
    live_successor(admin, "outage-app", "outage-app-task-0", None, session_s=1.0, wait_s=4.0)
print(f"gave up after {time.monotonic() - started:.1f} s", flush=True)
sys.stdin.readline()  # the parent thawed the broker
# Once a new describe on the same client is answered, the client has reached the group
# coordinator: a request left behind by the check has met it too (and aborted the process
# when it had timed out inside librdkafka). The new describe never times out in librdkafka.
deadline = time.monotonic() + 30
while True:
    future = admin.describe_consumer_groups(["outage-app"], request_timeout=3600)["outage-app"]
    try:
        future.result(timeout=max(0.1, deadline - time.monotonic()))
        break
    except KafkaException:  # COORDINATOR_LOAD_IN_PROGRESS: the thawed broker catching up
        if time.monotonic() > deadline:
            raise
        time.sleep(0.5)
time.sleep(1.0)
print("alive", flush=True)
"""


def _child(bootstrap: str, check: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, bootstrap, check],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)


def test_group_and_successor_checks_survive_a_frozen_broker(
        private_kafka: PrivateBroker) -> None:
    broker = private_kafka.state
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        children = {check: _child(broker.bootstrap, check)
                    for check in ("group_guard", "live_successor")}
        for check, child in children.items():
            assert child.stdout is not None and child.stderr is not None
            line = child.stdout.readline()
            assert line.startswith("gave up after"), (check, line, child.stderr.read())
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    died = {}
    for check, child in children.items():
        out, err = child.communicate("thawed\n", timeout=60)
        # A child whose client reached the group coordinator printed "alive" and exited 0.
        if child.returncode != 0 or out.strip() != "alive":
            last = (err.strip().splitlines() or [""])[-1]
            died[check] = f"exit {child.returncode}: {last[-90:]}"
    assert not died, died
