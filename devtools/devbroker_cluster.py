"""A dev cluster of N Kafka brokers on 127.0.0.1, and faults played on one broker of it.

``parsley-devbroker up --brokers 3`` starts three KRaft nodes, each broker and controller
(a quorum of three voters: one node may be down), on fixed loopback ports chosen at the
first start and recorded, so a node restarts where its peers and the clients expect it.
Internal topics (``__consumer_offsets``, ``__transaction_state``) and created topics get
replication factor ``min(3, N)`` and ``min.insync.replicas`` 2 from 3 replicas on
(:func:`devtools.devbroker.server_properties`). Each node's JVM gets a heap of
:data:`CLUSTER_HEAP`. ``sasl_ssl`` (:mod:`devtools.devbroker_security`) secures every node.

The data directory of a cluster holds ``cluster.json`` (the nodes' ids and ports, the
security, the cluster id), one ``broker-<id>/`` per node laid out as a single broker's
data directory (``config/``, ``data/``, ``logs/``, ``devbroker.json``), and for
``sasl_ssl`` the files :mod:`devtools.devbroker_security` writes. A single broker's data
directory is its own node 1, so :func:`broker_status`, :func:`stop_broker`,
:func:`freeze_broker` and :func:`thaw_broker` take either.

Tests and the chaos harness play broker faults through this module: :func:`stop_broker`
(SIGTERM, a controlled shutdown; or SIGKILL), :func:`freeze_broker` (SIGSTOP),
:func:`thaw_broker` (SIGCONT), :func:`start_broker` and :func:`up_cluster` (which starts
every node that is down). Source: docs/operations.md, "Production clusters".
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from devtools import devbroker
from devtools.devbroker import BrokerState
from devtools.devbroker_security import PLAINTEXT, SASL_SSL, ensure_security, load_security
from devtools.kafka_jars import KAFKA_VERSION, DevBrokerError, fetch_jars, require_java

__all__ = [
    "CLUSTER_FILE",
    "CLUSTER_HEAP",
    "BrokerStatus",
    "ClusterSpec",
    "NodeSpec",
    "broker_status",
    "down_cluster",
    "freeze_broker",
    "read_cluster",
    "start_broker",
    "stop_broker",
    "thaw_broker",
    "up_cluster",
    "wait_in_sync",
]

CLUSTER_FILE: Final = "cluster.json"
CLUSTER_HEAP: Final = "512m"
"""Each node's ``-Xmx`` in a cluster: three JVMs share a developer's machine."""
MAX_BROKERS: Final = 9


@dataclasses.dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node of a cluster: its ``node.id`` and its two loopback ports."""

    id: int
    port: int
    controller_port: int


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterSpec:
    """A cluster as recorded in ``<data_dir>/cluster.json``.

    Attributes:
        data_dir: the cluster's data directory.
        nodes: its nodes, by id (1..N).
        security: ``"plaintext"`` or ``"sasl_ssl"``.
        cluster_id: the KRaft cluster id every node was formatted with.
    """

    data_dir: Path
    nodes: tuple[NodeSpec, ...]
    security: str
    cluster_id: str

    @property
    def bootstrap(self) -> str:
        """Every node's client address, comma-separated, for ``bootstrap.servers``."""
        return ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    @property
    def voters(self) -> str:
        """``controller.quorum.voters``: every node, ``id@127.0.0.1:port``."""
        return ",".join(f"{n.id}@127.0.0.1:{n.controller_port}" for n in self.nodes)

    @property
    def replicas(self) -> int:
        """The replication factor of internal and created topics: ``min(3, N)``."""
        return min(3, len(self.nodes))

    def node(self, broker_id: int) -> NodeSpec:
        """The node ``broker_id``.

        Raises:
            DevBrokerError: no such node.
        """
        for node in self.nodes:
            if node.id == broker_id:
                return node
        raise DevBrokerError(f"no broker {broker_id} in {self.data_dir} (brokers: "
                             f"{', '.join(str(n.id) for n in self.nodes)})")

    def node_dir(self, broker_id: int) -> Path:
        """``<data_dir>/broker-<id>``."""
        return self.data_dir / f"broker-{broker_id}"

    def to_json(self) -> str:
        """Serialize for ``cluster.json``."""
        raw = {"nodes": [dataclasses.asdict(n) for n in self.nodes], "security": self.security,
               "cluster_id": self.cluster_id, "version": KAFKA_VERSION,
               "bootstrap": self.bootstrap}
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"


def read_cluster(data_dir: Path) -> ClusterSpec | None:
    """The cluster recorded in ``data_dir``, or None (no ``cluster.json``: a single broker's
    directory, or none)."""
    path = data_dir / CLUSTER_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise DevBrokerError(f"{path} is not a cluster file: {exc}") from exc
    nodes = tuple(NodeSpec(int(n["id"]), int(n["port"]), int(n["controller_port"]))
                  for n in raw["nodes"])
    return ClusterSpec(data_dir, nodes, str(raw["security"]), str(raw["cluster_id"]))


def _resolve(data_dir: Path | None) -> Path:
    return (data_dir or devbroker.default_data_dir()).resolve()


# ---------------------------------------------------------------------------- start


def _new_cluster(data_dir: Path, brokers: int, security: str) -> ClusterSpec:
    ports: list[int] = []
    while len(ports) < 2 * brokers:
        port = devbroker.free_port()
        if port not in ports:
            ports.append(port)
    nodes = tuple(NodeSpec(i + 1, ports[2 * i], ports[2 * i + 1]) for i in range(brokers))
    spec = ClusterSpec(data_dir, nodes, security, devbroker.new_cluster_id())
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / CLUSTER_FILE).write_text(spec.to_json())
    return spec


def _write_configs(spec: ClusterSpec, node: NodeSpec) -> Path:
    node_dir = spec.node_dir(node.id)
    secured = load_security(spec.data_dir) if spec.security == SASL_SSL else None
    devbroker.write_node_config(node_dir, devbroker.server_properties(
        node_dir, node.port, node.controller_port, node_id=node.id, voters=spec.voters,
        replicas=spec.replicas, security=secured))
    return node_dir


def _format(spec: ClusterSpec, java: str, lib: Path, say: Callable[[str], None] | None) -> None:
    """Format every node's storage with the cluster id, the nodes in parallel."""
    secured = load_security(spec.data_dir) if spec.security == SASL_SSL else None
    extra = [] if secured is None else secured.format_args()
    if say:
        say(f"formatting KRaft storage of {len(spec.nodes)} brokers in {spec.data_dir}")
    procs = [(node, subprocess.Popen(
        devbroker.format_argv(java, lib, _write_configs(spec, node), spec.cluster_id, extra),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)) for node in spec.nodes]
    failures = []
    for node, proc in procs:
        out, _ = proc.communicate(timeout=180)
        if proc.returncode != 0:
            failures.append(f"broker {node.id}: exit {proc.returncode}: {out}")
    if failures:
        raise DevBrokerError("kafka-storage format failed: " + "; ".join(failures))


def _client(spec: ClusterSpec) -> dict[str, str]:
    return devbroker.client_config(spec.data_dir)


def _spawn(spec: ClusterSpec, node: NodeSpec, java: str, lib: Path,
           say: Callable[[str], None] | None) -> tuple[BrokerState, subprocess.Popen[bytes]]:
    for port in (node.port, node.controller_port):
        if not devbroker.port_free(port):
            raise DevBrokerError(
                f"broker {node.id}'s port {port} on 127.0.0.1 is taken by another program: "
                "free it, or run down (removes the cluster's data) and up again")
    node_dir = _write_configs(spec, node)
    proc = devbroker.spawn_node(java, lib, node_dir, CLUSTER_HEAP)
    state = BrokerState(
        pid=proc.pid, port=node.port, controller_port=node.controller_port,
        version=KAFKA_VERSION, data_dir=node_dir, log_path=node_dir / "logs" / "server.log",
        started_at=time.time(), node_id=node.id, security=spec.security)
    (node_dir / devbroker.STATE_FILE).write_text(state.to_json())
    if say:
        say(f"starting broker {node.id} (pid {proc.pid}) on {state.bootstrap}")
    return state, proc


def _registered(spec: ClusterSpec, ids: set[int], deadline: float) -> None:
    """Wait until each broker in ``ids`` answers a metadata request itself, listing itself.

    Each ask is a new client bootstrapped on that broker alone, so the answer is its own
    (a broker serves requests once it has caught up with the metadata log and is
    unfenced); a peer's stale view of a killed broker does not count.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    waiting = set(ids)
    last: object = None
    while waiting and time.monotonic() < deadline:
        for broker_id in sorted(waiting):
            node = spec.node(broker_id)
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{node.port}",
                                 "log_level": 0, **_client(spec)})
            try:
                if broker_id in admin.list_topics(timeout=5).brokers:
                    waiting.discard(broker_id)
            except KafkaException as exc:
                last = exc
        if waiting:
            time.sleep(0.3)
    if waiting:
        raise DevBrokerError(f"brokers {sorted(waiting)} of {spec.data_dir} did not answer "
                             f"as registered brokers in time ({last})")


def _start(spec: ClusterSpec, ids: list[int], timeout_s: float,
           say: Callable[[str], None] | None) -> None:
    """Start the nodes ``ids`` (down) and wait until each answers and is registered."""
    java = require_java()
    lib = fetch_jars(say=say)
    started: list[tuple[BrokerState, subprocess.Popen[bytes]]] = []
    try:
        for broker_id in ids:
            started.append(_spawn(spec, spec.node(broker_id), java, lib, say))
        deadline = time.monotonic() + timeout_s
        for state, proc in started:
            if not devbroker.wait_port(state.port, deadline, proc):
                raise DevBrokerError(devbroker.start_failure(state, proc, timeout_s))
        _registered(spec, set(ids), deadline)
    except BaseException:
        for state, _proc in started:
            devbroker.stop_pid(state.pid, 10.0)
        raise


def up_cluster(
    data_dir: Path | None = None,
    brokers: int | None = None,
    *,
    security: str | None = None,
    start_timeout_s: float = 180.0,
    warm: bool = True,
    say: Callable[[str], None] | None = None,
) -> tuple[ClusterSpec, list[int]]:
    """Start the cluster in ``data_dir``: create it on first use, else start every node that
    is down (a frozen node is thawed); return once every node is registered.

    Args:
        data_dir: the data directory; default :func:`devtools.devbroker.default_data_dir`.
        brokers: the node count, 2..9; default the recorded cluster's (3 for a new one).
        security: ``"plaintext"`` or ``"sasl_ssl"``; default the recorded cluster's.
        start_timeout_s: deadline for the nodes to answer, seconds.
        warm: on a new cluster, also wait for the group and transaction coordinators
            (:func:`devtools.devbroker.warm_up`).
        say: progress callback, or None.

    Returns:
        (the cluster, the ids of the nodes this call started).

    Raises:
        DevBrokerError: a single broker's directory, a count or security other than the
            recorded cluster's, a recorded port taken, java/mvn missing, or a node that
            exited or did not answer in time (its log tail is included).
    """
    data_dir = _resolve(data_dir)
    spec = read_cluster(data_dir)
    if spec is None and (data_dir / devbroker.STATE_FILE).exists():
        raise DevBrokerError(f"{data_dir} holds a single broker, not a cluster: run down "
                             "(removes its data) or give another --dir")
    if spec is not None and brokers is not None and brokers != len(spec.nodes):
        raise DevBrokerError(f"{data_dir} holds a {len(spec.nodes)}-broker cluster, not "
                             f"{brokers}: run down (removes its data) or give another --dir")
    if brokers is not None and not 2 <= brokers <= MAX_BROKERS:
        raise DevBrokerError(f"a cluster has 2 to {MAX_BROKERS} brokers, not {brokers}")
    fresh = spec is None or not all(
        (spec.node_dir(n.id) / "data" / "meta.properties").exists() for n in spec.nodes)
    mode = devbroker.check_security(data_dir, security, not fresh)
    if fresh:
        count = brokers or (3 if spec is None else len(spec.nodes))
        if data_dir.exists():
            # Leftovers of a failed first start: begin again from an empty directory.
            for child in data_dir.iterdir():
                if child.is_dir():
                    shutil.rmtree(child)
                else:
                    child.unlink()
        spec = _new_cluster(data_dir, count, mode)
        if mode == SASL_SSL:
            ensure_security(data_dir)
        _format(spec, require_java(), fetch_jars(say=say), say)
    assert spec is not None
    statuses = {s.id: s for s in broker_status(data_dir)}
    for status in statuses.values():
        if status.frozen:
            thaw_broker(data_dir, status.id)
            if say:
                say(f"broker {status.id} was frozen: thawed (SIGCONT)")
    down = [i for i, s in statuses.items() if not s.running]
    if down:
        _start(spec, down, start_timeout_s, say)
    else:
        _registered(spec, {n.id for n in spec.nodes}, time.monotonic() + start_timeout_s)
    if fresh and warm:
        devbroker.warm_up(spec.bootstrap, client=_client(spec))
    return spec, down


def start_broker(
    data_dir: Path, broker_id: int, *, timeout_s: float = 120.0,
    say: Callable[[str], None] | None = None,
) -> BrokerState:
    """Start node ``broker_id`` of the cluster in ``data_dir`` if it is down (a single
    broker's directory: its broker, on its previous port); return it once registered.

    Raises:
        DevBrokerError: no such node, a port taken, or the node did not answer in time.
    """
    data_dir = _resolve(data_dir)
    spec = read_cluster(data_dir)
    if spec is None:
        _single(data_dir, broker_id)
        previous = devbroker.read_state(data_dir)
        single, _ = devbroker.up(data_dir, previous.port if previous else None, warm=False,
                                 start_timeout_s=timeout_s, say=say)
        return single
    node_dir = spec.node_dir(spec.node(broker_id).id)
    if devbroker.running(node_dir) is None:
        _start(spec, [broker_id], timeout_s, say)
    state = devbroker.running(node_dir)
    if state is None:
        raise DevBrokerError(f"broker {broker_id} of {data_dir} exited after its start; log "
                             f"{node_dir / 'logs' / 'server.log'}")
    return state


# ---------------------------------------------------------------------------- status


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerStatus:
    """One broker of a data directory, as ``status --json`` shows it.

    Attributes:
        id: its ``node.id``.
        pid: its JVM's pid while it runs, else None.
        port: its client port on 127.0.0.1.
        running: whether its process is alive (frozen counts as alive).
        frozen: whether it is stopped by SIGSTOP (:func:`freeze_broker`).
        log_path: its broker log.
    """

    id: int
    pid: int | None
    port: int | None
    running: bool
    frozen: bool
    log_path: Path

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: ``{"id", "pid", "port", "running", "frozen", "log"}``."""
        return {"id": self.id, "pid": self.pid, "port": self.port, "running": self.running,
                "frozen": self.frozen, "log": str(self.log_path)}


def _frozen(pid: int) -> bool:
    import psutil  # type: ignore[import-untyped]

    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)
    except psutil.NoSuchProcess:
        return False


def _node_status(broker_id: int, node_dir: Path, port: int | None) -> BrokerStatus:
    state = devbroker.running(node_dir)
    recorded = devbroker.read_state(node_dir)
    if port is None and recorded is not None:
        port = recorded.port
    return BrokerStatus(
        id=broker_id, pid=None if state is None else state.pid, port=port,
        running=state is not None, frozen=state is not None and _frozen(state.pid),
        log_path=node_dir / "logs" / "server.log")


def broker_status(data_dir: Path | None = None) -> list[BrokerStatus]:
    """Every broker of ``data_dir`` (a cluster's nodes by id; a single broker as id 1;
    an empty list when the directory holds neither)."""
    data_dir = _resolve(data_dir)
    spec = read_cluster(data_dir)
    if spec is not None:
        return [_node_status(n.id, spec.node_dir(n.id), n.port) for n in spec.nodes]
    if devbroker.read_state(data_dir) is None:
        return []
    return [_node_status(1, data_dir, None)]


def _single(data_dir: Path, broker_id: int) -> None:
    if broker_id != 1:
        raise DevBrokerError(f"{data_dir} holds a single broker, id 1, not {broker_id}")


def _node_dir(data_dir: Path, broker_id: int) -> Path:
    spec = read_cluster(data_dir)
    if spec is None:
        _single(data_dir, broker_id)
        return data_dir
    return spec.node_dir(spec.node(broker_id).id)


# ---------------------------------------------------------------------------- faults


def stop_broker(
    data_dir: Path | None, broker_id: int, *, kill: bool = False, deadline_s: float = 30.0
) -> BrokerState | None:
    """Stop one broker, keeping its data: SIGTERM (a controlled shutdown: its partitions'
    leadership moves first), SIGKILL after ``deadline_s``; at once with ``kill``.

    A frozen broker is sent SIGCONT after SIGTERM so that it can act on it.

    Returns:
        The broker that was running, or None when it was not.

    Raises:
        DevBrokerError: no such broker.
    """
    node_dir = _node_dir(_resolve(data_dir), broker_id)
    state = devbroker.running(node_dir)
    if state is None:
        return None
    if kill:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGKILL)
        devbroker.stop_pid(state.pid, 10.0)  # reaps it; already dead, so no SIGTERM effect
        return state
    with contextlib.suppress(ProcessLookupError):
        os.kill(state.pid, signal.SIGTERM)
        os.kill(state.pid, signal.SIGCONT)
    devbroker.stop_pid(state.pid, deadline_s)
    return state


def _signal(data_dir: Path | None, broker_id: int, sig: signal.Signals) -> BrokerState:
    node_dir = _node_dir(_resolve(data_dir), broker_id)
    state = devbroker.running(node_dir)
    if state is None:
        raise DevBrokerError(f"broker {broker_id} of {node_dir} is not running")
    os.kill(state.pid, sig)
    return state


def freeze_broker(data_dir: Path | None, broker_id: int) -> BrokerState:
    """Freeze one broker (SIGSTOP): its connections stay open and nothing answers, as a
    broker stalled by a long GC pause or a hung disk. :func:`thaw_broker` ends it.

    Raises:
        DevBrokerError: no such broker, or it is not running.
    """
    return _signal(data_dir, broker_id, signal.SIGSTOP)


def thaw_broker(data_dir: Path | None, broker_id: int) -> BrokerState:
    """Thaw a frozen broker (SIGCONT).

    Raises:
        DevBrokerError: no such broker, or it is not running.
    """
    return _signal(data_dir, broker_id, signal.SIGCONT)


def down_cluster(
    data_dir: Path | None = None, *, keep: bool = False, deadline_s: float = 30.0
) -> list[int]:
    """Stop every node of the cluster in ``data_dir`` (all SIGTERMed at once, SIGKILL after
    ``deadline_s``) and remove the directory unless ``keep``.

    Returns:
        The ids of the nodes that were running.
    """
    data_dir = _resolve(data_dir)
    spec = read_cluster(data_dir)
    if spec is None:
        return []
    states = [s for s in (devbroker.running(spec.node_dir(n.id)) for n in spec.nodes)
              if s is not None]
    for state in states:
        with contextlib.suppress(ProcessLookupError):
            os.kill(state.pid, signal.SIGTERM)
            os.kill(state.pid, signal.SIGCONT)
    for state in states:
        devbroker.stop_pid(state.pid, deadline_s)
    if not keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return [s.node_id for s in states]


def wait_in_sync(
    bootstrap: str, client: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> None:
    """Wait until every partition of every topic has its full replica set in sync (after a
    broker restart: before the next broker of a rolling restart goes down).

    Raises:
        DevBrokerError: some partition is still under-replicated after ``timeout_s``.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **(client or {})})
    deadline = time.monotonic() + timeout_s
    behind: list[str] = []
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=10)
            behind = [f"{t.topic}[{p.id}]" for t in metadata.topics.values()
                      for p in t.partitions.values() if len(p.isrs) < len(p.replicas)]
            if not behind:
                return
        except KafkaException as exc:
            behind = [str(exc)]
        time.sleep(0.5)
    raise DevBrokerError(f"under-replicated after {timeout_s:.0f} s: {', '.join(behind[:10])}")


def security_of(data_dir: Path | None = None) -> str:
    """``"sasl_ssl"`` when ``data_dir`` holds security material, else ``"plaintext"``."""
    return SASL_SSL if load_security(_resolve(data_dir)) is not None else PLAINTEXT
