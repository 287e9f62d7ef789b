"""The chaos harness: a 2-task causal pipeline under load and a seeded schedule of faults.

One implementation for the CI test (``tests/chaos/test_chaos.py``) and the soak
(``python -m perf.soak``). What a run does, step by step, and its bounds: docs/operations.md,
"Chaos test and soak". :func:`run_chaos` starts a private broker, the producer
(:class:`LoadProducer`) and ``parsley-coordinator run devtools.chaos.app:processes``, plays the
schedule (``devtools.chaos.schedule``), drains, and judges with an independent
``read_committed`` reader (``devtools.chaos.verdict``).

Nothing here waits without a deadline: Kafka calls run in a helper thread joined with a
timeout (a client's own timeout is not trusted), and a recovery that does not happen within
``recovery_s`` ends the run naming the fault, what was missing and the last status.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psutil
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from coordinator.control.status import ProcessState, ProcessStatus, parse_status
from coordinator.control.status_socket import NoReplyError, request
from coordinator.control.status_view import held_line
from devtools import devbroker, devbroker_cluster
from devtools.chaos import app
from devtools.chaos.load import LoadProducer
from devtools.chaos.schedule import CLUSTER_KINDS, KINDS, Fault, schedule
from devtools.chaos.verdict import InputRecord, OutputRecord, Verdict, judge
from devtools.dev_cluster import DevCluster
from devtools.kafka_support import QUIET, TopicInfo, create_topic
from parsley.wire import CAUSES_HEADER, decode_causes

T = TypeVar("T")

REPO = Path(__file__).resolve().parents[2]
TASKS = 2
"""The pipeline's task count (input partitions)."""
POLL_S = 0.5
"""Seconds between status polls while waiting."""
ORPHAN_EXIT_S = 10.0
"""Bound on a killed coordinator's workers exiting on their own, s: a generous
multiple of the 2 s a worker has to notice its coordinator's death
(docs/operations.md, "Chaos test and soak")."""
STATUS_INTERVAL_MS = 500
"""The tasks' status interval; an entry is stale past three of them."""
STALE_TASK_MS = 6_000
"""The coordinator's bound on a silent worker before it kills it by PID (its
``stale_task_ms``, docs/operations.md "Supervision"): shorter than the longest
SIGSTOP of the schedule, so some stopped workers are killed and respawned."""


class ChaosFailure(Exception):
    """A recovery, the drain or the shutdown did not happen in its bound; the message says which."""


def bounded(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Run ``fn`` in a daemon thread and return its result within ``timeout_s`` seconds.

    Raises:
        TimeoutError: ``fn`` did not return in time (its thread is left behind).
        Exception: whatever ``fn`` raised.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"bounded-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TimeoutError(f"{what} did not return within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


@dataclass
class ChaosSettings:
    """What a run does.

    Attributes:
        seed: seeds the schedule and the producer's choices.
        faults: number of faults to play (``None``: as many as fit in ``minutes``).
        minutes: with ``faults=None``, play faults until this many minutes passed.
        kinds: the fault kinds to draw from (``devtools.chaos.schedule.KINDS``).
        rate: ``A`` records per second (about 60% more ``B`` records name them).
        recovery_s: bound on each recovery, s.
        drain_s: bound on the final drain (RUNNING, lag 0, nothing held), s.
        gap_s: (low, high) seconds of running between a recovery and the next fault.
        workdir: the run's directory (broker data, state, logs); a new temp dir if None.
        brokers: 1 (a private broker) or 3 (a private KRaft cluster, for the kinds of
            ``devtools.chaos.schedule.CLUSTER_KINDS``).
        restart: the coordinator's ``--restart`` policy; ``never`` proves the broker faults
            never reach it (docs/operations.md, "The task timeout").
        cluster: a running cluster to play on (a test session's, shared): healed, not
            stopped, at the end; ``None`` starts a private one when ``brokers`` > 1.
        stale_task_ms: the coordinator's stale bound (:data:`STALE_TASK_MS`, shorter than
            the longest worker SIGSTOP; the product's 60 s default where no worker is
            stopped).
        say: progress lines (default: print to stderr).
    """

    seed: int = 1
    faults: int | None = 4
    minutes: float | None = None
    kinds: Sequence[str] = KINDS
    rate: float = 40.0
    recovery_s: float = 90.0
    drain_s: float = 120.0
    gap_s: tuple[float, float] = (2.0, 5.0)
    workdir: Path | None = None
    brokers: int = 1
    restart: str = "transient"
    cluster: DevCluster | None = None
    stale_task_ms: int = STALE_TASK_MS
    say: Callable[[str], None] = field(default=lambda line: print(line, file=sys.stderr,
                                                                   flush=True))


@dataclass
class FaultResult:
    """One played fault: when (s since the run started), and its recovery time or failure."""

    fault: Fault
    at_s: float
    recovered_s: float | None = None
    note: str = ""

    def line(self) -> str:
        """E.g. ``#0 broker_restart for 3.1 s after 2.0 s at 21.4 s: recovered in 12.3 s``."""
        outcome = (f"recovered in {self.recovered_s:.1f} s" if self.recovered_s is not None
                   else "DID NOT RECOVER")
        return f"{self.fault.describe()} at {self.at_s:.1f} s: {outcome}" + \
            (f" ({self.note})" if self.note else "")


@dataclass
class ChaosResult:
    """A run's outcome.

    Attributes:
        seed: the seed.
        faults: the faults played, in order, with their recovery times.
        verdict: the independent reader's verdict, or ``None`` when the run failed first.
        failure: what did not happen in its bound, or ``None``.
        all_running: every task was RUNNING with lag 0 at the end.
        produced: ``A`` and ``B`` records acknowledged to the producer.
        produce_errors: deliveries the producer was told failed (not counted as lost:
            the verdict judges what the input topics hold).
        peak_held: the most messages held at once in any status seen (B records
            waiting for their A cause: the causal check had something to judge).
        restarts: the most restarts the coordinator's policy had made for the process, in
            any status seen (respawns included).
        leftovers: processes of the run still alive after the final stop (killed).
        coordinator_exit: the last coordinator's exit status, or ``None``.
        log_dir: where the coordinators' logs are.
        seconds: the run's duration.
    """

    seed: int
    faults: list[FaultResult] = field(default_factory=list)
    verdict: Verdict | None = None
    failure: str | None = None
    all_running: bool = False
    produced: int = 0
    produce_errors: int = 0
    peak_held: int = 0
    restarts: int = 0
    leftovers: list[str] = field(default_factory=list)
    coordinator_exit: int | None = None
    log_dir: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """A clean verdict, every task RUNNING at the end, no failure, nothing left over."""
        return (self.failure is None and self.all_running and self.verdict is not None
                and self.verdict.clean and not self.leftovers)

    def report(self) -> str:
        """The schedule with each recovery's time, the verdict, and any failure."""
        lines = [f"chaos run seed {self.seed}: {'PASS' if self.ok else 'FAIL'} in "
                 f"{self.seconds:.0f} s, {self.produced} input records produced "
                 f"({self.produce_errors} delivery errors), peak held {self.peak_held}, "
                 f"restarts {self.restarts}, coordinator exit {self.coordinator_exit}"]
        lines += ["  " + f.line() for f in self.faults]
        lines.append("  verdict: " + (self.verdict.summary().replace("\n", "\n    ")
                                      if self.verdict else "none (the run did not get there)"))
        lines.append(f"  every task RUNNING with lag 0 at the end: {self.all_running}")
        if self.leftovers:
            lines.append("  left running after the stop (killed): " + ", ".join(self.leftovers))
        if self.failure:
            lines.append("  FAILURE: " + self.failure.replace("\n", "\n    "))
        lines.append(f"  logs: {self.log_dir}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------ the run


@dataclass
class _Coordinator:
    proc: subprocess.Popen[bytes]
    log: Path
    started: float


class ChaosRun:
    """One run (module docstring); :meth:`run` returns a :class:`ChaosResult` and never hangs."""

    def __init__(self, settings: ChaosSettings) -> None:
        self.s = settings
        self.say = settings.say
        self._own_tmp = settings.workdir is None
        # Short: ipc:// paths are limited to ~107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="pchaos-", dir="/tmp")) \
            if settings.workdir is None else settings.workdir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.broker_dir = self.dir / "broker"
        self.state_dir = self.dir / "state"
        self.log_dir = self.dir / "logs"
        self.log_dir.mkdir(exist_ok=True)
        self.endpoint = f"ipc://{self.dir / 'ctl.ipc'}"
        self.prefix = f"chaos-{settings.seed}-{uuid.uuid4().hex[:6]}"
        self.result = ChaosResult(seed=settings.seed, log_dir=str(self.log_dir))
        self.t0 = time.monotonic()
        self.bootstrap = ""
        self.port = 0
        self.cluster: DevCluster | None = None  # with brokers > 1
        self.coordinators: list[_Coordinator] = []
        self.known: dict[int, psutil.Process] = {}  # every process of the run's coordinators
        self.last_status: dict[str, ProcessStatus] | None = None
        self.last_status_error = ""
        self.producer: LoadProducer | None = None
        self.topics: dict[str, TopicInfo] = {}

    # -------------------------------------------------------------- helpers

    def _t(self) -> float:
        return time.monotonic() - self.t0

    def _log(self, text: str) -> None:
        self.say(f"[chaos {self._t():6.1f} s] {text}")

    @property
    def coordinator(self) -> _Coordinator:
        return self.coordinators[-1]

    def _coordinator_argv(self) -> list[str]:
        script = Path(sys.executable).with_name("parsley-coordinator")
        head = [str(script)] if script.exists() else [sys.executable, "-m", "coordinator.cli"]
        return [*head, "run", "devtools.chaos.app:processes", "--bootstrap-servers",
                self.bootstrap, "--prefix", self.prefix, "--state-dir", str(self.state_dir),
                "--restart", self.s.restart, "--listen", self.endpoint,
                "--log-status-every", "10"]

    def _start_coordinator(self) -> None:
        n = len(self.coordinators)
        log = self.log_dir / f"coordinator-{n}.log"
        env = dict(os.environ)
        env.update({app.ENV_A: self.topics["A"].name, app.ENV_B: self.topics["B"].name,
                    app.ENV_OUT: self.topics["OUT"].name,
                    "PARSLEY_STATUS_INTERVAL_MS": str(STATUS_INTERVAL_MS),
                    "PARSLEY_STALE_TASK_MS": str(self.s.stale_task_ms),
                    "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                                env.get("PYTHONPATH")]))})
        with open(log, "ab") as out:
            proc = subprocess.Popen(self._coordinator_argv(), cwd=REPO, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.coordinators.append(_Coordinator(proc, log, self._t()))
        self.known[proc.pid] = psutil.Process(proc.pid)
        self._log(f"coordinator {n} started (pid {proc.pid}, log {log})")

    def _log_tail(self, lines: int = 15) -> str:
        """The last ``lines`` lines of the live coordinator's log, librdkafka's own
        lines (``%3|...``, connection chatter while the broker is away) left out."""
        try:
            text = self.coordinator.log.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(no log: {exc})"
        ours = [line for line in text if not line.startswith("%")]
        return "\n".join(ours[-lines:]) + \
            f"\n({len(text) - len(ours)} librdkafka lines left out; log {self.coordinator.log})"

    def _track_children(self) -> None:
        for c in self.coordinators:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(c.proc.pid).children(recursive=True):
                    self.known.setdefault(child.pid, child)

    def _status(self) -> dict[str, ProcessStatus] | None:
        self._track_children()
        try:
            reply = request(self.endpoint, {"op": "status"}, timeout_s=3.0)
        except NoReplyError as exc:
            self.last_status_error = str(exc)
            return None
        if reply.get("outcome") != "OK":
            self.last_status_error = f"{reply.get('outcome')}: {reply.get('error')}"
            return None
        self.last_status = parse_status(reply["status"])
        for st in self.last_status.values():
            self.result.peak_held = max(self.result.peak_held, st.held_count)
            self.result.restarts = max(self.result.restarts, st.restarts)
        self.last_status_error = ""
        return self.last_status

    def _describe_status(self) -> str:
        if self.last_status is None:
            return f"no status yet ({self.last_status_error or 'never answered'})"
        parts = []
        for name, st in self.last_status.items():
            tasks = ", ".join(
                f"task {t.task} pid {t.pid} {t.state} lag={t.lag} held={t.held_count} "
                f"age={t.updated_ms_ago}ms{' STALE' if t.stale else ''}" for t in st.tasks)
            parts.append(f"{name}: {st.state.value} restarts={st.restarts} "
                         f"refusal={st.refusal_reason} detail={st.failure_detail} [{tasks}]")
        extra = f" (latest poll: {self.last_status_error})" if self.last_status_error else ""
        return "; ".join(parts) + extra

    def _running(self, st: Mapping[str, ProcessStatus] | None) -> str | None:
        """``None`` when every task is RUNNING with fresh status, else what is missing."""
        if st is None:
            return f"the coordinator does not answer status ({self.last_status_error})"
        proc = st.get(app.PROCESS_NAME)
        if proc is None:
            return f"no process {app.PROCESS_NAME!r} in the status"
        if proc.state is not ProcessState.RUNNING:
            return f"process {proc.state.value}"
        tasks = {t.task: t for t in proc.tasks}
        if set(tasks) != set(range(TASKS)):
            return f"tasks reporting {sorted(tasks)}, want {list(range(TASKS))}"
        for t in tasks.values():
            if t.state != "RUNNING" or t.stale:
                return f"task {t.task} {t.state}{' stale' if t.stale else ''}"
        return None

    def _out_lso(self) -> int | None:
        """The output partition's last stable offset, from a fresh client (bounded), or None."""
        out = self.topics["OUT"].name

        def query() -> int:
            admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
            tp = TopicPartition(out, 0)
            futures = admin.list_offsets({tp: OffsetSpec.latest()},
                                         isolation_level=IsolationLevel.READ_COMMITTED,
                                         request_timeout=5)
            return int(futures[tp].result(timeout=8).offset)

        try:
            return bounded(query, 10.0, "list_offsets on the output")
        except Exception:
            return None

    def _check_coordinator(self) -> None:
        rc = self.coordinator.proc.poll()
        if rc is not None:
            raise ChaosFailure(f"the coordinator (pid {self.coordinator.proc.pid}) exited with "
                               f"status {rc}; last status: {self._describe_status()}\n"
                               f"log tail:\n{self._log_tail()}")

    def _wait(self, what: str, bound_s: float, missing: Callable[[], str | None]) -> float:
        """Poll ``missing`` until it returns None; return the seconds it took.

        Raises:
            ChaosFailure: the coordinator exited, or ``bound_s`` passed; names ``what``,
                what was still missing and the last status.
        """
        start = time.monotonic()
        last = "not checked yet"
        while True:
            self._check_coordinator()
            gap = missing()
            if gap is None:
                return time.monotonic() - start
            last = gap
            if time.monotonic() - start > bound_s:
                raise ChaosFailure(
                    f"{what} did not happen within {bound_s:g} s: {last}; last status: "
                    f"{self._describe_status()}\ncoordinator log tail:\n{self._log_tail()}")
            time.sleep(POLL_S)

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self._check_coordinator()
            time.sleep(min(POLL_S, max(0.0, end - time.monotonic())))

    def _pid_of(self, task: int) -> int:
        st = self._status()
        proc = (st or {}).get(app.PROCESS_NAME)
        for t in proc.tasks if proc else ():
            if t.task == task:
                return t.pid
        raise ChaosFailure(f"task {task} has no worker to hit; last status: "
                           f"{self._describe_status()}")

    # -------------------------------------------------------------- faults

    def _recovered(self, mark: int | None, dead: Sequence[psutil.Process] = ()
                   ) -> Callable[[], str | None]:
        """The recovery condition: ``dead`` (killed workers, or the workers of a killed
        coordinator) gone from the machine and from the status, every task RUNNING with
        fresh status, and a transaction committed to the output past ``mark``."""
        gone = {p.pid for p in dead}

        def missing() -> str | None:
            alive = [p.pid for p in dead if _alive(p)]
            if alive:
                return f"workers of the killed coordinator still alive: pids {alive}"
            st = self._status()
            gap = self._running(st)
            if gap is not None:
                return gap
            stale = [t.pid for t in (st or {})[app.PROCESS_NAME].tasks if t.pid in gone]
            if stale:
                return f"the status still shows killed worker(s) {stale}"
            lso = self._out_lso()
            if lso is None:
                return "the output's last stable offset cannot be read"
            if mark is not None and lso <= mark:
                return f"no transaction committed to the output since the fault " \
                       f"(last stable offset {lso})"
            return None
        return missing

    def _play(self, fault: Fault) -> FaultResult:
        result = FaultResult(fault, at_s=self._t())
        self.result.faults.append(result)
        self._log(f"fault {fault.describe()}")
        dead: list[psutil.Process] = []
        pid = -1
        if fault.kind in CLUSTER_KINDS:
            result.note = self._play_on_cluster(fault)
        elif fault.kind == "broker_restart" and self.cluster is not None:
            devbroker_cluster.down_cluster(self.broker_dir, keep=True)
            time.sleep(fault.duration_s)
            devbroker_cluster.up_cluster(self.broker_dir, start_timeout_s=180.0)
            result.note = "every broker answering again"
        elif fault.kind == "broker_restart":
            devbroker.down(self.broker_dir, keep=True, deadline_s=30.0)
            time.sleep(fault.duration_s)
            state, _ = devbroker.up(self.broker_dir, port=self.port, warm=True,
                                    start_timeout_s=120.0)
            if state.bootstrap != self.bootstrap:
                raise ChaosFailure(f"the broker came back on {state.bootstrap}, "
                                   f"not {self.bootstrap}")
            result.note = "broker answering again"
        elif fault.kind == "worker_kill":
            pid = self._pid_of(fault.task)
            with contextlib.suppress(psutil.Error):
                dead.append(psutil.Process(pid))
            os.kill(pid, signal.SIGKILL)
            result.note = f"killed pid {pid}"
        elif fault.kind == "worker_stop":
            pid = self._pid_of(fault.task)
            os.kill(pid, signal.SIGSTOP)
            time.sleep(fault.duration_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
            result.note = f"stopped pid {pid}"
        elif fault.kind == "coordinator_kill":
            self._track_children()
            old = self.coordinator
            dead = [p for pid, p in self.known.items() if pid != old.proc.pid and _alive(p)
                    and _is_child_of(p, old.proc.pid) and not _is_resource_tracker(p)]
            os.kill(old.proc.pid, signal.SIGKILL)
            old.proc.wait(10)
            # Its workers must exit on their own before a successor could fence them:
            # a successor started at once would hide orphans.
            deadline = time.monotonic() + ORPHAN_EXIT_S
            while any(_alive(p) for p in dead) and time.monotonic() < deadline:
                time.sleep(0.1)
            alive = [p.pid for p in dead if _alive(p)]
            if alive:
                raise ChaosFailure(
                    f"fault {fault.describe()}: workers {alive} of the killed coordinator "
                    f"{old.proc.pid} still alive {ORPHAN_EXIT_S:g} s after its death (a "
                    "worker must exit when its coordinator dies); log tail:\n"
                    + self._log_tail())
            orphaned_s = ORPHAN_EXIT_S - (deadline - time.monotonic())
            time.sleep(fault.duration_s)
            self._start_coordinator()
            result.note = f"killed coordinator pid {old.proc.pid}; its workers " \
                          f"{[p.pid for p in dead]} exited within {orphaned_s:.1f} s"
        else:
            raise ValueError(f"unknown fault kind {fault.kind!r}")
        mark = self._out_lso()
        result.recovered_s = self._wait(f"recovery from fault {fault.describe()}",
                                        self.s.recovery_s, self._recovered(mark, dead))
        if fault.kind == "worker_stop":
            pids = {t.pid for st in (self.last_status or {}).values() for t in st.tasks}
            result.note += "; it resumed" if pid in pids else \
                "; it was replaced (killed as stale)"
        self._log(f"recovered from #{fault.index} in {result.recovered_s:.1f} s")
        return result

    def _play_on_cluster(self, fault: Fault) -> str:
        """Play a fault of :data:`~devtools.chaos.schedule.CLUSTER_KINDS`; its note."""
        cluster = self.cluster
        if cluster is None:
            raise ChaosFailure(f"fault {fault.describe()} needs a cluster: run with brokers=3")
        retried: list[str] = []  # a broker start the harness had to repeat (START_ATTEMPTS)

        def start(broker: int) -> None:
            cluster.start(broker, say=lambda text: (self._log(text),
                                                    retried.append(text.splitlines()[0])))

        def noted(note: str) -> str:
            return "; ".join([note, *retried])

        if fault.kind == "rolling_restart":
            took = []
            for broker in range(1, cluster.brokers + 1):
                began = time.monotonic()
                cluster.stop(broker)
                start(broker)
                devbroker_cluster.wait_in_sync(cluster.bootstrap, cluster.client, 180.0)
                took.append(f"{broker}: {time.monotonic() - began:.1f} s")
            return noted("restarted brokers in turn (" + ", ".join(took) + ")")
        if fault.kind == "txn_coordinator_kill":
            tid = f"{self.prefix}-{app.PROCESS_NAME}-task-{fault.task}"
            victim = bounded(lambda: cluster.transaction_coordinator_of(tid), 60.0,
                             f"finding the transaction coordinator of {tid}")
            what = f"the transaction coordinator of {tid}"
        else:
            topic = self.topics["A"].name
            victim = bounded(lambda: cluster.leader_of(topic, fault.task), 60.0,
                             f"finding the leader of {topic}[{fault.task}]")
            what = f"the leader of {topic}[{fault.task}]"
        if fault.kind == "broker_freeze":
            cluster.freeze(victim)
            time.sleep(fault.duration_s)
            cluster.thaw(victim)
            return f"froze broker {victim}, {what}"
        cluster.stop(victim, kill=True)
        time.sleep(fault.duration_s)
        start(victim)
        return noted(f"killed broker {victim}, {what}, and started it again")

    # -------------------------------------------------------------- phases

    def _setup(self) -> None:
        if self.s.cluster is not None:
            self.cluster = given = self.s.cluster
            self.broker_dir = given.data_dir
            self._log(f"playing on the cluster of {given.brokers} brokers in {given.data_dir}")
            self.bootstrap, self.port = given.bootstrap, 0
        elif self.s.brokers > 1:
            self._log(f"starting a private cluster of {self.s.brokers} brokers in "
                      f"{self.broker_dir}")
            spec, _ = devbroker_cluster.up_cluster(self.broker_dir, self.s.brokers,
                                                    start_timeout_s=300.0)
            self.cluster = DevCluster(data_dir=self.broker_dir, bootstrap=spec.bootstrap,
                                      brokers=self.s.brokers, security=spec.security)
            self.bootstrap, self.port = spec.bootstrap, spec.nodes[0].port
        else:
            self._log(f"starting a private broker in {self.broker_dir}")
            state, _ = devbroker.up(self.broker_dir, warm=True, start_timeout_s=120.0)
            self.bootstrap, self.port = state.bootstrap, state.port
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **QUIET})
        tag = uuid.uuid4().hex[:6]
        # Replicated on a cluster, as in production: a transaction's commit or abort marker
        # for a partition with no live replica is skipped by Kafka's transaction coordinator
        # (docs/operations.md, "Broker restarts and the task timeout").
        replicas = min(3, self.cluster.brokers) if self.cluster is not None else 1
        for label, partitions in (("A", TASKS), ("B", TASKS), ("OUT", 1)):
            name = f"chaos-{label.lower()}-{tag}"
            self.topics[label] = bounded(lambda n=name, p=partitions: create_topic(
                admin, n, partitions=p, replication_factor=replicas), 60.0,
                f"creating topic {name}")
        self.producer = LoadProducer(self.bootstrap, self.topics["A"], self.topics["B"],
                                     self.s.rate, self.s.seed)
        self.producer.start()
        self._start_coordinator()
        took = self._wait("the first start (every task RUNNING)", self.s.recovery_s,
                          self._recovered(None))
        self._log(f"every task RUNNING after {took:.1f} s")

    def _faults(self) -> None:
        count = self.s.faults if self.s.faults is not None else 100_000
        until = None if self.s.minutes is None else self.t0 + self.s.minutes * 60
        for fault in schedule(self.s.seed, count, self.s.kinds, TASKS, self.s.gap_s):
            if until is not None and time.monotonic() + fault.gap_s > until:
                break
            self._sleep(fault.gap_s)
            self._play(fault)

    def _drain(self) -> None:
        assert self.producer is not None
        self.producer.stop()
        self.result.produced = self.producer.acked
        self.result.produce_errors = self.producer.errors
        load = self.producer
        if load.is_alive():
            raise ChaosFailure(f"the load producer did not stop within {load.STOP_S:g} s (its "
                               "flush, purge and top-up): the drain would judge a load still "
                               "being written")
        if load.top_up_error:
            raise ChaosFailure(f"the load producer could not make every A offset a B record "
                               f"named exist ({load.top_up_error}): the pipeline would rightly "
                               "hold those B records, so the drain cannot judge it")
        if load.flushed or load.purged:
            self._log(f"the producer did not flush everything (left {load.flushed}); purged "
                      f"{load.purged}")
        if load.topped_up:
            self._log(f"topped up A with {load.topped_up} filler records so that every named "
                      "cause exists")
        self._log(f"producer stopped: {self.producer.acked} acknowledged, "
                  f"{self.producer.errors} errors {self.producer.last_error}")
        stable: list[float] = []

        def missing() -> str | None:
            st = self._status()
            gap = self._running(st)
            if gap is None and st is not None:
                gaps = [f"task {t.task} lag {t.lag} held {t.held_count}"
                        + "".join(f"; {held_line(h)}" for h in t.held)
                        for t in st[app.PROCESS_NAME].tasks if t.lag != 0 or t.held_count]
                gap = " | ".join(gaps) or None
            if gap is not None:
                stable.clear()
                return gap
            stable.append(time.monotonic())
            if stable[-1] - stable[0] < 2.0:
                return "lag 0 for less than 2 s"
            return None

        took = self._wait("the drain (every task RUNNING, lag 0, nothing held)",
                          self.s.drain_s, missing)
        self.result.all_running = True
        self._log(f"drained in {took:.1f} s")

    def _judge(self) -> Verdict:
        a, b, out = self.topics["A"], self.topics["B"], self.topics["OUT"]
        names = {a.topic_id: a.name, b.topic_id: b.name}
        inputs = []
        for topic in (a, b):
            for rec in _read(self.bootstrap, topic.name, range(TASKS)):
                raw = dict(rec.headers() or ()).get(CAUSES_HEADER)
                causes = {(names.get(ch.topic_id, str(ch.topic_id)), ch.partition): off
                          for ch, off in decode_causes(raw).items()} if raw else {}
                inputs.append(InputRecord((topic.name, rec.partition() or 0),
                                          rec.offset() or 0, causes))
        outputs = []
        for rec in _read(self.bootstrap, out.name, (0,)):
            try:
                src, partition, offset, n = app.parse_relay_value(rec.value() or b"")
            except ValueError:
                src, partition, offset, n = f"unreadable:{rec.value()!r}", -1, -1, -1
            outputs.append(OutputRecord((src, partition), offset, n))
        return judge(inputs, outputs, {t: (a.name, b.name) for t in range(TASKS)})

    def _stop(self) -> None:
        """SIGTERM the live coordinator (bounded), then kill whatever of the run is alive."""
        if self.coordinators:
            proc = self.coordinator.proc
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(45)
                except subprocess.TimeoutExpired:
                    self.result.leftovers.append(f"coordinator {proc.pid} (no exit 45 s "
                                                 "after SIGTERM)")
            self.result.coordinator_exit = proc.poll()
        time.sleep(0.5)
        for pid, p in sorted(self.known.items()):
            if _alive(p):
                with contextlib.suppress(psutil.Error):
                    label = " ".join(p.cmdline()[:3])[:80]
                    p.kill()
                    self.result.leftovers.append(f"pid {pid} ({label})")
        for c in self.coordinators:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.proc.wait(5)

    def run(self) -> ChaosResult:
        """Play the run; never raises for a product failure (see ``result.failure``)."""
        try:
            try:
                self._setup()
                self._faults()
                self._drain()
                self.result.verdict = bounded(self._judge, 180.0, "the verdict's reads")
                self._log(self.result.verdict.summary())
            except (ChaosFailure, TimeoutError, devbroker.DevBrokerError) as exc:
                self.result.failure = str(exc)
                self._log(f"FAILED: {exc}")
            except Exception:
                self.result.failure = "the harness raised:\n" + traceback.format_exc()
                self._log(f"FAILED: {self.result.failure}")
            finally:
                if self.producer is not None:
                    if self.producer.is_alive():
                        self.producer.stop(10.0)
                    self.result.produced = self.producer.acked
                    self.result.produce_errors = self.producer.errors
                self._stop()
        finally:
            with contextlib.suppress(Exception):
                if self.s.cluster is not None:
                    self.s.cluster.heal()
                elif self.cluster is not None:
                    devbroker_cluster.down_cluster(self.broker_dir)
                else:
                    devbroker.down(self.broker_dir, deadline_s=20.0)
            self.result.seconds = self._t()
        if self.result.ok and self._own_tmp:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.result.log_dir = "(removed: the run passed)"
        return self.result


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_resource_tracker(p: psutil.Process) -> bool:
    """``multiprocess``'s shared resource tracker (a helper of the coordinator, not a worker)."""
    with contextlib.suppress(psutil.Error):
        return any("resource_tracker" in part for part in p.cmdline())
    return False


def _is_child_of(p: psutil.Process, pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return any(parent.pid == pid for parent in p.parents())
    return False


def _read(bootstrap: str, topic: str, partitions: Sequence[int] | range,
          timeout_s: float = 120.0) -> list[Message]:
    """Every committed record of ``topic``'s ``partitions`` (an independent
    ``read_committed`` consumer, assigned, no group), up to each last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-verdict-unused",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True,
                         **QUIET})
    out: list[Message] = []
    try:
        todo = set(partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + timeout_s
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic} {sorted(todo)} did not reach the end "
                                   f"in {timeout_s:g} s")
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        todo.discard(msg.partition() or 0)
                    continue
                out.append(msg)
    finally:
        consumer.close()
    return out


def run_chaos(settings: ChaosSettings) -> ChaosResult:
    """Run the chaos harness once (module docstring) and return its result."""
    return ChaosRun(settings).run()

