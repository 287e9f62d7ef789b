"""Three coordinators share a process's tasks (docs/operations.md, "Several coordinators").

The chaos pipeline (``devtools.chaos.app``: a causal input ``B`` whose records name ``A``
records, some not produced yet, so tasks hold messages; a store per task) runs over
3 input partitions, so 3 tasks, under three ``parsley-coordinator run --join``
coordinators on one machine (separate state dirs and control sockets), while a
producer writes at a steady rate. Then:

1. one coordinator that runs a task is SIGKILLed: its tasks move to the survivors;
2. it is started again: it takes its share back;
3. a rolling restart: each coordinator in turn is stopped (SIGTERM) and started again.

After each step every task is RUNNING on exactly one coordinator, and the time the
tasks took to move is printed. Finally the producer stops, the pipeline drains, and an
independent ``read_committed`` reader judges: 0 lost, 0 duplicated, 0 causal
violations, 0 store violations.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest
from confluent_kafka.admin import AdminClient

from coordinator.control.auth import KEYS_ENV, make_keys
from coordinator.control.status import parse_status
from coordinator.control.status_socket import NoReplyError, request
from devtools.chaos import app
from devtools.chaos.harness import LoadProducer, _read
from devtools.chaos.verdict import InputRecord, OutputRecord, Verdict, judge
from parsley.wire import CAUSES_HEADER, decode_causes

REPO = Path(__file__).resolve().parents[2]
TASKS = 3
COORDINATORS = 3
MOVE_BOUND_S = 90.0
"""Generous liveness bound on tasks moving after one coordinator event, s."""


class _Cluster:
    """Three coordinators of one prefix, each with its own state dir and control socket."""

    def __init__(self, bootstrap: str, topics: dict[str, Any], root: Path,
                 tasks: int = TASKS, keys: Path | None = None) -> None:
        self.bootstrap = bootstrap
        self.tasks = tasks
        self.keys = keys  # CURVE on tcp:// control sockets when given
        self.ports: dict[int, int] = {}
        self.topics = topics
        self.root = root
        self.prefix = f"scale-{uuid.uuid4().hex[:6]}"
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.known: dict[int, psutil.Process] = {}
        self.overlaps: list[str] = []
        self.last: str = ""

    def endpoint(self, i: int) -> str:
        if self.keys is None:
            return f"ipc://{self.root / f'c{i}.ipc'}"
        if i not in self.ports:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.ports[i] = probe.getsockname()[1]
        return f"tcp://127.0.0.1:{self.ports[i]}"

    def start(self, i: int) -> None:
        env = dict(os.environ)
        env.update({app.ENV_A: self.topics["A"].name, app.ENV_B: self.topics["B"].name,
                    app.ENV_OUT: self.topics["OUT"].name,
                    "PARSLEY_STATUS_INTERVAL_MS": "500",
                    **({KEYS_ENV: str(self.keys)} if self.keys is not None else {}),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                env.get("PYTHONPATH")]))})
        argv = [sys.executable, "-m", "coordinator.cli", "run", "devtools.chaos.app:processes",
                "--join", "--bootstrap-servers", self.bootstrap, "--prefix", self.prefix,
                "--state-dir", str(self.root / f"state{i}"), "--listen", self.endpoint(i),
                "--restart", "transient", "--stop-deadline", "10",
                "--log-status-every", "0"]
        with open(self.root / f"c{i}.log", "ab") as log:
            proc = subprocess.Popen(argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.procs[i] = proc
        self.known[proc.pid] = psutil.Process(proc.pid)

    def track(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    self.known.setdefault(child.pid, child)

    def owners(self) -> dict[int, list[tuple[int, str, int, int, bool]]]:
        """``{task: [(coordinator, state, held, lag, stale)]}`` over the live coordinators."""
        self.track()
        out: dict[int, list[tuple[int, str, int, int, bool, int]]] = {}
        for i, proc in self.procs.items():
            if proc.poll() is not None:
                continue
            try:
                reply = request(self.endpoint(i), {"op": "status", "local": True},
                                timeout_s=3.0)
            except NoReplyError:
                continue
            if reply.get("outcome") != "OK":
                continue
            st = parse_status(reply["status"]).get(app.PROCESS_NAME)
            if st is None:
                continue
            assert st.refusal_reason is None, f"coordinator {i}: {st}"
            for t in st.tasks:
                out.setdefault(t.task, []).append(
                    (i, t.state, t.held_count, int(t.lag or 0), bool(t.stale), t.pid))
        return out

    def all_running(self, want: Callable[[dict[int, int]], str | None] | None = None
                    ) -> str | None:
        """``None`` when each task is RUNNING (fresh) on exactly one coordinator and
        ``want(owner by task)`` has nothing to say; else what is missing."""
        owners = self.owners()
        for task, rows in owners.items():
            # A claim: a fresh RUNNING entry, or a stale one whose worker is still alive (a
            # stale entry alone says its coordinator has not heard from the worker for three
            # status intervals, not that the worker runs).
            running = [r for r in rows if r[1] == "RUNNING" and (not r[4] or _alive_pid(r[5]))]
            if len(running) > 1:
                self.overlaps.append(f"task {task} RUNNING on coordinators "
                                     f"{[r[0] for r in running]}: {rows}")
        if set(owners) != set(range(self.tasks)):
            return f"tasks reporting {sorted(owners)}"
        for task, rows in owners.items():
            if len(rows) != 1 or rows[0][1] != "RUNNING" or rows[0][4]:
                return f"task {task}: {rows}"
        by_task = {task: rows[0][0] for task, rows in owners.items()}
        self.last = f"owners {by_task}"
        return None if want is None else want(by_task)

    def wait(self, what: str, missing: Callable[[], str | None],
             bound_s: float = MOVE_BOUND_S) -> float:
        start = time.monotonic()
        gap = "not checked"
        while time.monotonic() - start < bound_s:
            gap = missing()
            if gap is None:
                return time.monotonic() - start
            time.sleep(0.5)
        tails = {i: (self.root / f"c{i}.log").read_text()[-3000:] for i in self.procs}
        raise AssertionError(f"{what} not within {bound_s:g} s: {gap}; logs: {tails}")

    def stop_all(self) -> list[str]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(45)
        time.sleep(0.5)
        leftovers = []
        for pid, p in self.known.items():
            with contextlib.suppress(psutil.Error):
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    p.kill()
                    leftovers.append(str(pid))
        return leftovers


@pytest.mark.slow
def test_three_coordinators_share_tasks_through_kill_rejoin_and_rolling_restart(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any
) -> None:
    topics = {"A": create_topic(partitions=TASKS), "B": create_topic(partitions=TASKS),
              "OUT": create_topic(partitions=1)}
    root = Path(tempfile.mkdtemp(prefix="pscale-", dir="/tmp"))  # short ipc paths
    cluster = _Cluster(kafka_bootstrap, topics, root)
    producer = LoadProducer(kafka_bootstrap, topics["A"], topics["B"], rate=30.0, seed=13,
                            tasks=TASKS)
    producer.start()
    moves: list[str] = []
    try:
        for i in range(COORDINATORS):
            cluster.start(i)
        took = cluster.wait("the first start", lambda: cluster.all_running(
            lambda by: None if len(set(by.values())) == COORDINATORS
            else f"tasks on coordinators {by}"))
        moves.append(f"first start, one task per coordinator: {took:.1f} s ({cluster.last})")

        # Any coordinator's status shows the whole application, each task with its runner.
        # A rebalance after every task was first seen RUNNING (a worker released on one
        # coordinator leaving the group late) shows the application REBALANCING for a while
        # (seen in CI): the status is asked until it settles.
        deadline = time.monotonic() + MOVE_BOUND_S
        while True:
            doc = request(cluster.endpoint(0), {"op": "status"}, timeout_s=20.0)["status"]
            if doc["processes"][app.PROCESS_NAME]["state"] == "RUNNING" \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        pids = {i: p.pid for i, p in cluster.procs.items()}
        rows = doc["processes"][app.PROCESS_NAME]["tasks"]
        assert sorted(t["task"] for t in rows) == list(range(TASKS)), doc
        assert {t["coordinator"]["pid"] for t in rows} == set(pids.values()), doc
        assert sorted(c["pid"] for c in doc["coordinators"]) == sorted(pids.values()), doc
        assert all(c["answered"] for c in doc["coordinators"]), doc
        assert sum(len(c["tasks"][app.PROCESS_NAME]) for c in doc["coordinators"]) == TASKS
        assert doc["processes"][app.PROCESS_NAME]["state"] == "RUNNING", doc
        table = subprocess.run([sys.executable, "-m", "coordinator.cli", "status", "--endpoint",
                                cluster.endpoint(2), "--timeout", "20"], cwd=REPO,
                               capture_output=True, text=True, timeout=60)
        assert table.returncode == 0, table.stderr
        assert sum(f"coordinator {os.uname().nodename} pid {pid} " in table.stdout
                   for pid in pids.values()) == COORDINATORS, table.stdout

        # 1. SIGKILL a coordinator that runs a task: its task moves to a survivor.
        owners = {task: rows[0][0] for task, rows in cluster.owners().items()}
        victim = owners[0]
        cluster.track()
        dead_workers = [p for p in cluster.known.values()
                        if p.pid != cluster.procs[victim].pid and
                        any(a.pid == cluster.procs[victim].pid for a in
                            _parents(p))]
        cluster.procs[victim].send_signal(signal.SIGKILL)  # the coordinator only
        cluster.procs[victim].wait(10)
        took = cluster.wait("the killed coordinator's tasks moving", lambda: cluster.all_running(
            lambda by: f"task 0 still on {victim}" if by[0] == victim else None))
        assert not [p.pid for p in dead_workers if _alive(p)]
        moves.append(f"coordinator {victim} SIGKILLed, its task moved: {took:.1f} s "
                     f"({cluster.last})")

        # 2. Start it again: it takes its share.
        cluster.start(victim)
        took = cluster.wait("the restarted coordinator taking its share",
                            lambda: cluster.all_running(
                                lambda by: None if victim in by.values()
                                else f"nothing on {victim}: {by}"))
        moves.append(f"coordinator {victim} started again, took a task: {took:.1f} s "
                     f"({cluster.last})")

        # 3. Rolling restart of all three.
        for i in range(COORDINATORS):
            t0 = time.monotonic()
            cluster.procs[i].send_signal(signal.SIGTERM)
            code = cluster.procs[i].wait(45)
            stopped = time.monotonic() - t0
            took = cluster.wait(f"coordinator {i}'s tasks moving at its stop",
                                lambda: cluster.all_running())
            cluster.start(i)
            back = cluster.wait(f"coordinator {i} taking its share after its restart",
                                lambda k=i: cluster.all_running(
                                    lambda by: None if k in by.values()
                                    else f"nothing on {k}: {by}"))
            moves.append(f"rolling restart of coordinator {i}: stopped in {stopped:.1f} s "
                         f"(exit {code}), tasks moved in {took:.1f} s, back with a task in "
                         f"{back:.1f} s ({cluster.last})")

        # Drain and judge.
        producer.stop()
        stable: list[float] = []

        def drained() -> str | None:
            gap = cluster.all_running()
            if gap is None:
                busy = [(task, rows[0]) for task, rows in cluster.owners().items()
                        if rows[0][2] or rows[0][3]]
                gap = f"held or lagging: {busy}" if busy else None
            if gap is not None:
                stable.clear()
                return gap
            stable.append(time.monotonic())
            return None if stable[-1] - stable[0] >= 2.0 else "lag 0 for less than 2 s"

        took = cluster.wait("the drain", drained)
        moves.append(f"drained in {took:.1f} s")

        # stop --all against one coordinator stops all three.
        t0 = time.monotonic()
        res = subprocess.run([sys.executable, "-m", "coordinator.cli", "stop", "--all",
                              "--endpoint", cluster.endpoint(1), "--deadline", "10"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (res.stdout, res.stderr)
        codes = {i: p.wait(60) for i, p in cluster.procs.items()}
        assert codes == {i: 0 for i in range(COORDINATORS)}, codes
        moves.append(f"stop --all: every coordinator exited 0 in {time.monotonic() - t0:.1f} s")
    finally:
        if producer.is_alive():
            producer.stop(10.0)
        leftovers = cluster.stop_all()
    verdict = _verdict(kafka_bootstrap, topics, TASKS)
    print("\n".join(["", *moves, verdict.summary(), f"produced {producer.acked}"]))
    assert verdict.clean, verdict.summary()
    assert verdict.inputs == producer.acked
    assert not cluster.overlaps, cluster.overlaps
    assert not leftovers, f"processes alive after the stop: {leftovers}"
    # Started together, the coordinators pre-committed once: the owner of task 0 did.
    logs = [(root / f"c{i}.log").read_text() for i in range(COORDINATORS)]
    assert sum(text.count("committed initial positions") for text in logs) == 1, \
        [text.count("committed initial positions") for text in logs]
    shutil.rmtree(root, ignore_errors=True)


def _verdict(bootstrap: str, topics: dict[str, Any], tasks: int) -> Verdict:
    """The independent read_committed verdict over the chaos pipeline's topics."""
    names = {topics["A"].topic_id: topics["A"].name, topics["B"].topic_id: topics["B"].name}
    inputs = []
    for topic in (topics["A"], topics["B"]):
        for rec in _read(bootstrap, topic.name, range(tasks)):
            raw = dict(rec.headers() or ()).get(CAUSES_HEADER)
            causes = {(names.get(ch.topic_id, str(ch.topic_id)), ch.partition): off
                      for ch, off in decode_causes(raw).items()} if raw else {}
            inputs.append(InputRecord((topic.name, rec.partition() or 0), rec.offset() or 0,
                                      causes))
    outputs = []
    for rec in _read(bootstrap, topics["OUT"].name, (0,)):
        src, partition, offset, n = app.parse_relay_value(rec.value() or b"")
        outputs.append(OutputRecord((src, partition), offset, n))
    return judge(inputs, outputs, {t: (topics["A"].name, topics["B"].name) for t in range(tasks)})


def _parents(p: psutil.Process) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(p.parents())
    return []


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False



@pytest.mark.slow
def test_a_partitioned_coordinators_worker_is_fenced_by_its_successor(
    kafka_bootstrap: str, kafka_admin: AdminClient, create_topic: Any,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator frozen (SIGSTOP: as if cut off from Kafka) loses its task when its
    session in the coordinators' group expires; the survivor runs it, and the frozen
    coordinator's worker, still running, is fenced by its successor (the same static
    group.instance.id and transactional id). Thawed, the coordinator takes the fenced
    exit as its task moving away (not a failure), rejoins and takes its share again.
    The verdict stays clean. The control sockets are tcp:// with CURVE keys: the
    application's status comes through peers that authenticate each other, and a
    client without keys gets no answer."""
    tasks = 2
    topics = {"A": create_topic(partitions=tasks), "B": create_topic(partitions=tasks),
              "OUT": create_topic(partitions=1)}
    root = Path(tempfile.mkdtemp(prefix="pscale-", dir="/tmp"))
    make_keys(root / "keys")
    monkeypatch.setenv(KEYS_ENV, str(root / "keys"))  # this test's requests use CURVE too
    cluster = _Cluster(kafka_bootstrap, topics, root, tasks=tasks, keys=root / "keys")
    producer = LoadProducer(kafka_bootstrap, topics["A"], topics["B"], rate=30.0, seed=17,
                            tasks=tasks)
    producer.start()
    notes: list[str] = []
    try:
        for i in range(2):
            cluster.start(i)
        cluster.wait("the first start", lambda: cluster.all_running(
            lambda by: None if len(set(by.values())) == 2 else f"tasks on {by}"))
        # Both peers answer within a generous bound (a peer's reply may miss one 3 s try
        # under load; the application's status is asked again until the deadline).
        deadline = time.monotonic() + 90.0
        while True:
            doc = request(cluster.endpoint(1), {"op": "status"}, timeout_s=20.0)["status"]
            if [c["answered"] for c in doc["coordinators"]] == [True, True] \
                    or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        assert [c["answered"] for c in doc["coordinators"]] == [True, True], doc
        assert len(doc["processes"][app.PROCESS_NAME]["tasks"]) == tasks, doc
        monkeypatch.delenv(KEYS_ENV)
        with pytest.raises(NoReplyError):
            request(cluster.endpoint(1), {"op": "ping"}, timeout_s=1.5)
        monkeypatch.setenv(KEYS_ENV, str(root / "keys"))
        owners = {task: rows[0][0] for task, rows in cluster.owners().items()}
        frozen = owners[0]
        cluster.track()
        frozen_pid = cluster.procs[frozen].pid
        workers = [p for p in cluster.known.values() if p.pid != frozen_pid
                   and any(a.pid == frozen_pid for a in _parents(p))
                   and "resource_tracker" not in " ".join(_cmdline(p))]
        os.kill(frozen_pid, signal.SIGSTOP)
        t0 = time.monotonic()
        try:
            took = cluster.wait("the frozen coordinator's task running on the survivor",
                                lambda: cluster.all_running(
                                    lambda by: None if set(by.values()) == {1 - frozen}
                                    else f"owners {by}"))
            notes.append(f"task moved off the frozen coordinator in {took:.1f} s")
            fenced = cluster.wait("the zombie worker exiting, fenced",
                                  lambda: None if not [p for p in workers if _alive(p)]
                                  else "the frozen coordinator's worker still runs")
            notes.append(f"its worker exited (fenced) {time.monotonic() - t0:.1f} s after "
                         f"the freeze (+{fenced:.1f} s)")
        finally:
            os.kill(frozen_pid, signal.SIGCONT)
        producer.stop()
        stable: list[float] = []

        def drained() -> str | None:
            gap = cluster.all_running()
            if gap is None:
                busy = [(t, rows[0]) for t, rows in cluster.owners().items()
                        if rows[0][2] or rows[0][3]]
                gap = f"held or lagging: {busy}" if busy else None
            if gap is not None:
                stable.clear()
                return gap
            stable.append(time.monotonic())
            return None if stable[-1] - stable[0] >= 2.0 else "lag 0 for less than 2 s"

        took = cluster.wait("the drain", drained)
        notes.append(f"drained in {took:.1f} s")
        # The thawed coordinator took the fenced exit as its task moving, not as a failure.
        assert cluster.procs[frozen].poll() is None, cluster.procs[frozen].returncode
        back = cluster.wait("the thawed coordinator taking its share again",
                            lambda: cluster.all_running(
                                lambda by: None if frozen in by.values() else f"owners {by}"))
        notes.append(f"the thawed coordinator runs a task again after {back:.1f} s")
    finally:
        if producer.is_alive():
            producer.stop(10.0)
        leftovers = cluster.stop_all()
    verdict = _verdict(kafka_bootstrap, topics, tasks)
    print("\n".join(["", *notes, verdict.summary()]))
    assert verdict.clean, verdict.summary()
    assert verdict.inputs == producer.acked
    assert not cluster.overlaps, cluster.overlaps
    assert not leftovers, f"processes alive after the stop: {leftovers}"
    shutil.rmtree(root, ignore_errors=True)


def _alive_pid(pid: int) -> bool:
    """``pid`` is a live process (not a zombie)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _cmdline(p: psutil.Process) -> list[str]:
    with contextlib.suppress(psutil.Error):
        return list(p.cmdline())
    return []
