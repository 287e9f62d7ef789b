"""A wait on admin answers past its bound ends with ``CallStalled``, not the watchdog's exit
(docs/operations.md, "Bounded client calls").

A changelog read's offset listing (:func:`workers.admin.offset_bounds`: two answers of up
to 35 s per attempt, retried until the stall timeout) and a checkpoint's describe and
listings wait in Python on admin futures. Bounded by the watchdog alone (40 s and 30 s),
such a wait past the bound hard-exited the worker (``SUBSTRATE: list_offsets blocked
40.0 s (bound 40 s)``, seen under the 3-broker chaos test), so the fault reached the
coordinator's restart policy instead of being recovered in place. Bounded with
:func:`workers.calls.awaiting`, it ends at the bound with
:class:`workers.calls.CallStalled` and the worker recovers in place ("The task timeout").

Each call site runs in a child process (the watchdog's exit would end pytest) with the
bounds of ``list_offsets`` and ``describe_topics`` cut to :data:`BOUND_S`, a real watchdog
installed whose fatal action prints ``WATCHDOG <detail>``, and a fresh AdminClient against
the private broker (fixture ``private_kafka``, never the shared one) frozen with SIGSTOP:
no answer ever comes. Each must end with ``CallStalled`` naming its call about
:data:`BOUND_S` after it began, with no ``WATCHDOG`` line.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from devtools.private_broker import PrivateBroker

ROOT = Path(__file__).resolve().parents[2]

BOUND_S = 4.0
"""The bound the child gives ``list_offsets`` and ``describe_topics``, s."""
SLACK_S = 3.0
"""How long after the bound a call site may end, s (a loaded 2-core machine)."""

CHILD = """
import os, sys, time
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from workers import watchdog

bootstrap, case, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
watchdog.CALL_BOUNDS_S["list_offsets"] = bound
watchdog.CALL_BOUNDS_S["describe_topics"] = bound


def on_fatal(action):
    print(f"WATCHDOG {action.detail}", flush=True)
    os._exit(70)


dog = watchdog.Watchdog(on_fatal, 70, parent_pid=None)
dog.start(signals=False)
watchdog.install(dog)

# The client's first ApiVersion request waits out the freeze instead of timing out and
# falling back: nothing answers the calls below.
config = {"bootstrap.servers": bootstrap, "api.version.request.timeout.ms": 60000}
admin = AdminClient(config)
topic = "parsley-await-bound-changelog"
started = time.monotonic()
try:
    if case == "changelog_read":
        from workers.changelog import read_partition
        consumer = Consumer({**config, "group.id": "parsley-await-bound"})
        list(read_partition(consumer, admin, topic, 0))
    elif case == "checkpoint_listed":
        from workers.checkpoint import listed
        listed(admin, [(topic, 0)])
    else:
        from workers.checkpoint import _stable_end
        _stable_end(admin, TopicPartition(topic, 0), f"changelog {topic}[0]")
    print(f"ENDED {case} returned - {time.monotonic() - started:.1f}", flush=True)
except Exception as exc:
    print(f"ENDED {case} {type(exc).__name__} {getattr(exc, 'call', '-')} "
          f"{time.monotonic() - started:.1f} {exc}", flush=True)
os._exit(0)  # closing the clients would wait on the frozen broker
"""

CASES = {
    "changelog_read": "list_offsets",        # workers.changelog.read_partition
    "checkpoint_listed": "describe_topics",  # workers.checkpoint.listed
    "checkpoint_stable_end": "list_offsets",  # workers.checkpoint._stable_end
}


def test_admin_waits_end_with_call_stalled_at_their_bound_not_the_watchdog(
        private_kafka: PrivateBroker) -> None:
    broker = private_kafka.state
    os.kill(broker.pid, signal.SIGSTOP)
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        children = {case: subprocess.Popen(
            [sys.executable, "-c", CHILD, broker.bootstrap, case, str(BOUND_S)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True) for case in CASES}
        outputs = {case: child.communicate(timeout=BOUND_S + 30)
                   for case, child in children.items()}
    finally:
        os.kill(broker.pid, signal.SIGCONT)
        for child in children.values():
            if child.poll() is None:
                child.kill()
                child.wait(10)
    wrong = {}
    for case, call in CASES.items():
        out, err = outputs[case]
        lines = out.strip().splitlines()
        ended = [line.split(" ", 5) for line in lines if line.startswith("ENDED ")]
        fired = [line for line in lines if line.startswith("WATCHDOG")]
        if fired or len(ended) != 1:
            wrong[case] = (fired or lines or [f"no output; stderr: {err.strip()[-300:]}"])[0]
            continue
        _, _, kind, named, took, *_ = ended[0]
        if kind != "CallStalled" or named != call \
                or not BOUND_S - 0.5 <= float(took) <= BOUND_S + SLACK_S:
            wrong[case] = " ".join(ended[0])
    assert not wrong, "\n".join(f"{case}: {what}" for case, what in wrong.items())
