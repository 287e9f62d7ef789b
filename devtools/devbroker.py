"""``parsley-devbroker``: a real Apache Kafka 4.x broker on 127.0.0.1 for tests and demos.

Users, the test fixture (``tests/conftest.py``), benchmarks and the demo share this one
broker. It fetches the official Apache Kafka jars (``org.apache.kafka:kafka_2.13`` and
``org.apache.kafka:kafka-tools``, version :data:`KAFKA_VERSION`) from Maven Central with
Maven, formats a single-node KRaft storage directory and runs the broker with the machine's
Java 17. The command-line tools of docs/runbooks.md run from the same jars through
``parsley-devbroker tool NAME ARGS...``. The node-level pieces here (settings, format,
spawn, stop) also serve a cluster of brokers (:mod:`devtools.devbroker_cluster`); a broker
with TLS, SASL and ACLs takes its settings from :mod:`devtools.devbroker_security`.

The data directory (default ``$PARSLEY_DEVBROKER_DIR`` or ``~/.cache/parsley/devbroker``)
and the jar cache (``$PARSLEY_KAFKA_LIB``, else
``${XDG_CACHE_HOME:-~/.cache}/parsley/kafka-<version>/lib``) are laid out as
docs/architecture.md, "devtools/devbroker.py" shows.

Source: README.md, "The local broker: ``parsley-devbroker``".
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Final

from devtools.broker_log import log_errors, log_matching
from devtools.devbroker_security import (
    PLAINTEXT,
    SASL_SSL,
    SECURITY_MODES,
    Security,
    ensure_security,
    load_security,
)
from devtools.kafka_jars import (
    KAFKA_VERSION,
    DevBrokerError,
    cache_root,
    classpath,
    fetch_jars,
    require_java,
)

ENV_DATA_DIR = "PARSLEY_DEVBROKER_DIR"
STATE_FILE = "devbroker.json"
BOOTSTRAP_PREFIX = "bootstrap.servers="

DEFAULT_HEAP = "1g"
"""A single dev broker's maximum heap; a cluster's nodes get
:data:`devtools.devbroker_cluster.CLUSTER_HEAP` each."""

BROKER_MAIN = "kafka.Kafka"
STORAGE_MAIN = "kafka.tools.StorageTool"

TOOLS: dict[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-dump-log": "org.apache.kafka.tools.DumpLogSegments",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-storage": STORAGE_MAIN,
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
}
"""Tool name (as in Kafka's ``bin/`` scripts, without ``.sh``) -> main class in the jars."""

WARM_UP_TRANSACTIONAL_ID = "parsley-devbroker-warm-up"
WARM_UP_GROUP = "parsley-devbroker-warm-up"

_BROKER_LOG4J = """\
status = warn
name = parsley-devbroker
appender.file.type = RollingFile
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.filePattern = ${sys:kafka.logs.dir}/server.log.%i
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
appender.file.policies.type = Policies
appender.file.policies.size.type = SizeBasedTriggeringPolicy
appender.file.policies.size.size = 50MB
appender.file.strategy.type = DefaultRolloverStrategy
appender.file.strategy.max = 4
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

_TOOLS_LOG4J = """\
status = warn
name = parsley-devbroker-tools
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = stderr
"""


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerState:
    """A dev broker started by this module, as recorded in ``<data_dir>/devbroker.json``.

    Attributes:
        pid: OS process id of the broker JVM.
        port: client (PLAINTEXT) listener port on 127.0.0.1.
        controller_port: KRaft controller listener port on 127.0.0.1.
        version: Apache Kafka version of the jars it runs.
        data_dir: the data directory (config, data, logs, state file).
        log_path: the broker log file.
        started_at: wall-clock start time, seconds since the epoch.
        node_id: the KRaft ``node.id`` (1 for a single broker; 1..N in a cluster).
        security: ``"plaintext"`` or ``"sasl_ssl"`` (``devtools.devbroker_security``).
    """

    pid: int
    port: int
    controller_port: int
    version: str
    data_dir: Path
    log_path: Path
    started_at: float
    node_id: int = 1
    security: str = PLAINTEXT

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:<port>``, the value for ``bootstrap.servers``."""
        return f"127.0.0.1:{self.port}"

    def to_json(self) -> str:
        """Serialize for the state file (paths as strings)."""
        raw = dataclasses.asdict(self)
        raw["data_dir"] = str(self.data_dir)
        raw["log_path"] = str(self.log_path)
        raw["bootstrap"] = self.bootstrap
        return json.dumps(raw, indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str) -> BrokerState:
        """Parse a state file written by :meth:`to_json`.

        Raises:
            ValueError: the text is not a state file.
        """
        raw = json.loads(text)
        try:
            return cls(
                pid=int(raw["pid"]),
                port=int(raw["port"]),
                controller_port=int(raw["controller_port"]),
                version=str(raw["version"]),
                data_dir=Path(raw["data_dir"]),
                log_path=Path(raw["log_path"]),
                started_at=float(raw["started_at"]),
                node_id=int(raw.get("node_id", 1)),
                security=str(raw.get("security", PLAINTEXT)),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a devbroker state file: {exc}") from exc



def default_data_dir() -> Path:
    """The data directory: ``$PARSLEY_DEVBROKER_DIR`` or ``<cache_root>/devbroker``."""
    override = os.environ.get(ENV_DATA_DIR)
    if override:
        return Path(override).expanduser()
    return cache_root() / "devbroker"


# ---------------------------------------------------------------------------- state


def _state_path(data_dir: Path) -> Path:
    return data_dir / STATE_FILE


def read_state(data_dir: Path | None = None) -> BrokerState | None:
    """The recorded broker of ``data_dir``, alive or not; None when there is no state file."""
    path = _state_path(data_dir or default_data_dir())
    try:
        return BrokerState.from_json(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


def _reap(pid: int) -> None:
    # The fixture starts the broker as its own child: reap it so it is not a zombie.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(state: BrokerState) -> bool:
    """Whether the recorded pid is still that broker (guards against pid reuse)."""
    import psutil  # type: ignore[import-untyped]

    _reap(state.pid)
    try:
        proc = psutil.Process(state.pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    config = str(state.data_dir / "config" / "server.properties")
    return BROKER_MAIN in cmdline and config in cmdline


def running(data_dir: Path | None = None) -> BrokerState | None:
    """The broker of ``data_dir`` if its process is alive, else None."""
    state = read_state(data_dir)
    if state is not None and _alive(state):
        return state
    return None


# ---------------------------------------------------------------------------- start


BROKER_PORTS: Final = range(20000, 32768)
"""Where :func:`free_port` picks a dev broker's ports: below Linux's ephemeral range
(``net.ipv4.ip_local_port_range``, 32768-60999 by default). A port in that range, freed
while its broker is down, can be taken as the local port of a client's connection, or
of a reconnect to that very port on the loopback, which then connects to itself (TCP's
simultaneous open): the broker's restart fails to bind it and exits 1. Seen twice in one
CI run of the cluster chaos tests, whose clients reconnect many times a second."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 free at the moment of asking, from :data:`BROKER_PORTS`
    (a port the kernel hands out for outgoing connections is not reused when freed).

    Raises:
        DevBrokerError: no port of the range was free in 200 tries.
    """
    picker = random.SystemRandom()
    for _ in range(200):
        port = picker.randrange(BROKER_PORTS.start, BROKER_PORTS.stop)
        if port_free(port):
            return port
    raise DevBrokerError(f"no free port on 127.0.0.1 in {BROKER_PORTS.start}-"
                         f"{BROKER_PORTS.stop - 1} after 200 tries")


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def server_properties(
    data_dir: Path,
    port: int,
    controller_port: int,
    *,
    node_id: int = 1,
    voters: str | None = None,
    replicas: int = 1,
    security: Security | None = None,
) -> str:
    """The ``server.properties`` of one node (broker and KRaft controller) on 127.0.0.1.

    Args:
        data_dir: the node's directory (``log.dirs`` is its ``data/``).
        port: the client listener port.
        controller_port: the controller listener port.
        node_id: the KRaft ``node.id``.
        voters: ``controller.quorum.voters``; default this node alone.
        replicas: the replication factor of the internal topics (``__consumer_offsets``,
            ``__transaction_state``) and of created topics by default; their
            ``min.insync.replicas`` is 2 from 3 replicas on, else 1.
        security: the ``sasl_ssl`` material, or None for PLAINTEXT listeners.
    """
    min_isr = "2" if replicas >= 3 else "1"
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters or f"{node_id}@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "data"),
        "num.partitions": "1",
        "default.replication.factor": str(replicas),
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": str(replicas),
        "offsets.topic.num.partitions": "10",
        "transaction.state.log.replication.factor": str(replicas),
        "transaction.state.log.min.isr": min_isr,
        "transaction.state.log.num.partitions": "10",
        "share.coordinator.state.topic.replication.factor": str(replicas),
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        # Workers use static membership with a session timeout of seconds.
        "group.min.session.timeout.ms": "1000",
        # Topics exist only when created: a deleted topic must stay deleted
        # (channel identity: docs/model.md, "Channels and positions").
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # A node restarted while its cluster's controllers elect a new leader (a chaos test
        # kills the active one) keeps trying to register for longer than one start attempt
        # waits (devtools.dev_cluster: RESTART_TIMEOUT_S / START_ATTEMPTS), not Kafka's 60 s,
        # after which it exits: on two loaded cores a three-node quorum has taken longer.
        "initial.broker.registration.timeout.ms": "240000",
    }
    if security is not None:
        settings.update(security.broker_settings(port, controller_port))
    lines = ["# written by parsley-devbroker; regenerated on every start"]
    lines += [f"{key}={value}" for key, value in settings.items()]
    return "\n".join(lines) + "\n"


def new_cluster_id() -> str:
    """A fresh KRaft cluster id (a random UUID, URL-safe base64 without padding)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def log_tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file, or ``(no log)``."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


_SHORT_LIVED_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto")
"""JVM flags for one-shot commands: C1 only and the serial GC start faster (not for the
broker or the perf-test tools, which run long enough for C2 to pay off)."""


def format_argv(
    java: str, lib: Path, data_dir: Path, cluster_id: str, extra: Sequence[str] = ()
) -> list[str]:
    """The ``kafka-storage format`` command line of the node in ``data_dir``.

    Args:
        java: the ``java`` executable.
        lib: the jar directory.
        data_dir: the node's directory (its ``config/server.properties`` is read).
        cluster_id: the KRaft cluster id, the same for every node of a cluster.
        extra: further arguments (``--add-scram ...``).
    """
    config = data_dir / "config"
    return [
        java, *_SHORT_LIVED_JVM,
        f"-Dlog4j2.configurationFile={config / 'tools-log4j2.properties'}",
        "-cp", classpath(lib), STORAGE_MAIN, "format",
        f"--cluster-id={cluster_id}", "-c", str(config / "server.properties"), *extra,
    ]


def _format_storage(java: str, lib: Path, data_dir: Path, extra: Sequence[str] = ()) -> None:
    out = subprocess.run(
        format_argv(java, lib, data_dir, new_cluster_id(), extra),
        capture_output=True, text=True, check=False, timeout=120,
    )
    if out.returncode != 0:
        raise DevBrokerError(
            f"kafka-storage format failed (exit {out.returncode}):\n{out.stdout}{out.stderr}"
        )


def write_node_config(data_dir: Path, properties: str) -> None:
    """Write a node's ``config/`` (server.properties and both log4j2 files)."""
    config = data_dir / "config"
    config.mkdir(parents=True, exist_ok=True)
    (config / "server.properties").write_text(properties)
    (config / "log4j2.properties").write_text(_BROKER_LOG4J)
    (config / "tools-log4j2.properties").write_text(_TOOLS_LOG4J)


def wait_port(port: int, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether 127.0.0.1:``port`` accepts a connection before ``deadline`` (monotonic s);
    False at once when ``proc`` (the broker's process) exits first."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.2)
    return False


_QUIET = {"log_level": 0}
"""librdkafka client settings that keep its connection-refused chatter off stderr.

(A Python ``logger`` callback is avoided: it crashed the interpreter in AdminClient use.)
"""


def client_config(data_dir: Path | None = None) -> dict[str, str]:
    """confluent-kafka properties (no ``bootstrap.servers``) for the super user of the
    broker or cluster in ``data_dir``: empty for plaintext, ``admin.client.json``'s for
    ``sasl_ssl`` (:mod:`devtools.devbroker_security`)."""
    security = load_security((data_dir or default_data_dir()).resolve())
    return {} if security is None else security.client_config()


def wait_ready(
    bootstrap: str,
    timeout_s: float = 60.0,
    *,
    client: Mapping[str, str] | None = None,
    brokers: int = 1,
) -> None:
    """Block until an AdminClient gets cluster metadata listing ``brokers`` brokers.

    Args:
        bootstrap: ``host:port[,host:port...]``.
        timeout_s: overall deadline, seconds.
        client: further client properties (a secured broker's, :func:`client_config`).
        brokers: how many brokers the metadata must list (a cluster's size).

    Raises:
        DevBrokerError: no such answer within ``timeout_s``.
    """
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **_QUIET, **(client or {})})
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            cluster = admin.describe_cluster(request_timeout=5).result(timeout=10)
            if len(cluster.nodes) >= brokers:
                return
            last = f"{len(cluster.nodes)} of {brokers} brokers registered"
        except KafkaException as exc:
            last = exc
        time.sleep(0.3)
    raise DevBrokerError(f"no AdminClient answer from {bootstrap} in {timeout_s:.0f} s: {last}")


def warm_up(
    bootstrap: str, timeout_s: float = 120.0, *, client: Mapping[str, str] | None = None
) -> None:
    """Make the group and transaction coordinators ready before the first client needs them.

    On a fresh broker the first group lookup creates and loads ``__consumer_offsets``
    and the first ``init_transactions`` creates and loads ``__transaction_state``;
    either can take seconds. This does both once, with a throwaway group
    (:data:`WARM_UP_GROUP`, never joined) and a throwaway transactional id
    (:data:`WARM_UP_TRANSACTIONAL_ID` plus a random suffix, one empty committed transaction).

    Args:
        bootstrap: ``host:port[,...]``.
        timeout_s: overall deadline, seconds.
        client: further client properties (a secured broker's, :func:`client_config`).

    Raises:
        DevBrokerError: a coordinator did not become available in time.
    """
    # Imported here, so parsley-devbroker's other commands start without Kafka's client
    # and the product loaded (--local-broker runs two of them).
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    from workers.kafka_errors import retriable

    deadline = time.monotonic() + timeout_s
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": WARM_UP_GROUP,
            "enable.auto.commit": False,
            **_QUIET,
            **(client or {}),
        }
    )
    try:
        while True:
            try:
                # Not AdminClient.list_consumer_group_offsets: in confluent-kafka 2.16.1 it
                # segfaults (librdkafka rd_kafka_cgrp_op, from rd_kafka_handle_OffsetFetch)
                # on COORDINATOR_LOAD_IN_PROGRESS, which a fresh broker answers.
                consumer.committed(
                    [TopicPartition("__parsley-devbroker-warm-up", 0)],
                    timeout=max(deadline - time.monotonic(), 1.0),
                )
                break
            except KafkaException as exc:
                if time.monotonic() > deadline:
                    raise DevBrokerError(f"group coordinator not ready: {exc}") from exc
                time.sleep(0.5)
    finally:
        consumer.close()
    # A fresh id per call: concurrent warm-ups on one broker must not fence each other.
    txn_id = f"{WARM_UP_TRANSACTIONAL_ID}-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **_QUIET,
                         **(client or {})})
    while True:
        try:
            producer.init_transactions(max(deadline - time.monotonic(), 1.0))
            producer.begin_transaction()
            producer.commit_transaction(max(deadline - time.monotonic(), 1.0))
            return
        except KafkaException as exc:
            if time.monotonic() > deadline or not retriable(exc):
                raise DevBrokerError(f"transaction coordinator not ready: {exc.args[0]}") from exc
            time.sleep(0.5)


def spawn_node(java: str, lib: Path, data_dir: Path, heap: str = DEFAULT_HEAP
               ) -> subprocess.Popen[bytes]:
    """Start the broker JVM of the node in ``data_dir`` (its own session, logs in ``logs/``).

    Args:
        java: the ``java`` executable.
        lib: the jar directory.
        data_dir: the node's directory, its ``config/`` written.
        heap: the maximum heap (``-Xmx``); ``$PARSLEY_DEVBROKER_HEAP`` overrides it.
    """
    config = data_dir / "config"
    logs = data_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    heap = os.environ.get("PARSLEY_DEVBROKER_HEAP", heap)
    argv = [
        java, "-Xms256m", f"-Xmx{heap}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={config / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={logs}",
        "-cp", classpath(lib), BROKER_MAIN, str(config / "server.properties"),
    ]
    with open(logs / "stdout.log", "ab") as out:
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=data_dir,
        )


def start_failure(state: BrokerState, proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """Why the node ``state`` did not open its port: its exit status, its log's errors, its
    KRaft quorum state transitions (which node it saw as leader, in which epoch) and its
    logs' tails."""
    exited = proc.poll()
    return (
        f"broker {state.node_id} "
        f"{'exited with ' + str(exited) if exited is not None else 'did not open'}"
        f" its port {state.port} within {timeout_s:.0f} s; its errors "
        f"({state.log_path}):\n{log_errors(state.log_path)}\n"
        f"its controller quorum's last transitions:\n"
        f"{log_matching(state.log_path, 'Completed transition to', 6)}\nlog tail:\n"
        f"{log_tail(state.log_path)}\n"
        f"stdout ({state.data_dir / 'logs' / 'stdout.log'}):\n"
        f"{log_tail(state.data_dir / 'logs' / 'stdout.log', 10)}"
    )


def check_security(data_dir: Path, wanted: str | None, formatted: bool) -> str:
    """The security of the broker(s) in ``data_dir``: ``wanted``, or what it already has.

    Raises:
        DevBrokerError: ``wanted`` is not a known mode, or differs from what formatted
            storage was made with (SCRAM credentials are written at format time).
    """
    has = SASL_SSL if load_security(data_dir) is not None else PLAINTEXT
    if wanted is not None and wanted not in SECURITY_MODES:
        raise DevBrokerError(f"unknown security {wanted!r}; known: {', '.join(SECURITY_MODES)}")
    if formatted and wanted is not None and wanted != has:
        raise DevBrokerError(
            f"{data_dir} holds a {has} broker, not {wanted}: run down (removes its data) or "
            "give another --dir")
    return wanted or has


def up(
    data_dir: Path | None = None,
    port: int | None = None,
    *,
    start_timeout_s: float = 90.0,
    warm: bool = True,
    say: Callable[[str], None] | None = None,
    security: str | None = None,
) -> tuple[BrokerState, bool]:
    """Start the dev broker in ``data_dir``, or report the one already running there.

    Fetches the jars when the cache lacks them, formats KRaft storage on first use (a
    data directory kept by ``down --keep`` is restarted with its topics), starts the
    broker on 127.0.0.1 (client port ``port`` or a free one; controller on a free
    port), waits until an AdminClient answers and, with ``warm``, until the group
    and transaction coordinators are ready (:func:`warm_up`).

    Args:
        data_dir: the data directory; default :func:`default_data_dir`.
        port: the client listener port; default a free port (the previous one on restart
            when still free).
        start_timeout_s: deadline for the broker to answer, seconds.
        warm: also wait for the group and transaction coordinators.
        say: progress callback, or None.
        security: ``"plaintext"`` or ``"sasl_ssl"`` (TLS, SCRAM, ACLs:
            :mod:`devtools.devbroker_security`); default what the directory was made with,
            else plaintext.

    Returns:
        (the broker, True when it was already running).

    Raises:
        DevBrokerError: java/mvn missing, jar fetch failed, the port is taken, a
            security other than the directory's, or the broker exited or did not
            answer in time (the log tail is included).
    """
    data_dir = (data_dir or default_data_dir()).resolve()
    formatted = (data_dir / "data" / "meta.properties").exists()
    mode = check_security(data_dir, security, formatted)
    current = running(data_dir)
    if current is not None:
        # It may still be starting (another `up` in flight): answer only once it is ready.
        wait_ready(current.bootstrap, start_timeout_s, client=client_config(data_dir))
        return current, True
    java = require_java()
    lib = fetch_jars(say=say)
    previous = read_state(data_dir)
    if not formatted and data_dir.exists():
        # Unformatted leftovers (a failed start): start from a clean directory.
        for child in ("config", "data", "logs", STATE_FILE, "security"):
            target = data_dir / child
            if target.is_dir():
                shutil.rmtree(target)
            elif target.exists():
                target.unlink()
    secured = ensure_security(data_dir) if mode == SASL_SSL else None
    client = {} if secured is None else secured.client_config()
    if port is not None and not port_free(port):
        raise DevBrokerError(f"port {port} on 127.0.0.1 is in use: choose another --port")
    attempts = 1 if port is not None else 3
    failure = ""
    for _ in range(attempts):
        client_port = port
        if client_port is None and previous is not None and port_free(previous.port):
            client_port = previous.port
        if client_port is None:
            client_port = free_port()
        controller_port = free_port()
        while controller_port == client_port:
            controller_port = free_port()
        write_node_config(data_dir, server_properties(
            data_dir, client_port, controller_port, security=secured))
        if not formatted:
            if say:
                say(f"formatting KRaft storage in {data_dir / 'data'}")
            _format_storage(java, lib, data_dir, () if secured is None else secured.format_args())
            formatted = True
        proc = spawn_node(java, lib, data_dir)
        state = BrokerState(
            pid=proc.pid, port=client_port, controller_port=controller_port,
            version=KAFKA_VERSION, data_dir=data_dir,
            log_path=data_dir / "logs" / "server.log", started_at=time.time(), security=mode,
        )
        _state_path(data_dir).write_text(state.to_json())
        if say:
            say(f"starting Apache Kafka {KAFKA_VERSION} (pid {proc.pid}) on {state.bootstrap}"
                + ("" if secured is None else " (SASL_SSL)"))
        deadline = time.monotonic() + start_timeout_s
        if wait_port(client_port, deadline, proc):
            try:
                wait_ready(state.bootstrap, max(deadline - time.monotonic(), 1.0), client=client)
                if warm:
                    warm_up(state.bootstrap, client=client)
            except BaseException:
                stop_pid(proc.pid, 10.0)
                raise
            return state, False
        failure = start_failure(state, proc, start_timeout_s)
        stop_pid(proc.pid, 10.0)
        if "Address already in use" not in failure:
            break
    raise DevBrokerError(failure)


# ---------------------------------------------------------------------------- stop


def stop_pid(pid: int, deadline_s: float) -> bool:
    """SIGTERM the process group, then SIGKILL after ``deadline_s``; True if it had to kill."""
    import psutil

    def gone() -> bool:
        _reap(pid)
        try:
            return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return True

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if gone():
            return False
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if gone():
            break
        time.sleep(0.1)
    return True


def down(
    data_dir: Path | None = None, *, keep: bool = False, deadline_s: float = 30.0
) -> tuple[BrokerState | None, bool]:
    """Stop the broker of ``data_dir`` and remove the directory unless ``keep``.

    Args:
        data_dir: the data directory; default :func:`default_data_dir`.
        keep: keep the data directory (topics survive the next ``up``).
        deadline_s: seconds between SIGTERM and SIGKILL.

    Returns:
        (the broker that was running or None, True when SIGKILL was needed).
    """
    data_dir = (data_dir or default_data_dir()).resolve()
    state = running(data_dir)
    killed = False
    if state is not None:
        killed = stop_pid(state.pid, deadline_s)
    if not keep and data_dir.exists() and (
        _state_path(data_dir).exists() or (data_dir / "config" / "server.properties").exists()
    ):
        shutil.rmtree(data_dir, ignore_errors=True)
    # With keep, the state file stays: its pid is dead, and the next up reuses its port.
    return state, killed


# ---------------------------------------------------------------------------- tools


def tool_argv(name: str, args: Sequence[str], *, java: str | None = None) -> list[str]:
    """The command line that runs Kafka tool ``name`` from the pinned jars.

    Args:
        name: a key of :data:`TOOLS` (``kafka-topics``; a trailing ``.sh`` is accepted).
        args: the tool's own arguments.
        java: the ``java`` executable; default :func:`require_java`.

    Raises:
        DevBrokerError: unknown tool, java missing, or the jars could not be fetched.
    """
    key = name.removesuffix(".sh")
    if key not in TOOLS:
        raise DevBrokerError(f"unknown tool {name!r}; known: {', '.join(sorted(TOOLS))}")
    java = java or require_java()
    lib = fetch_jars()
    config = lib.parent / "tools-log4j2.properties"
    if not config.exists():
        config.write_text(_TOOLS_LOG4J)
    quick = () if key.endswith("perf-test") else _SHORT_LIVED_JVM
    return [
        java, "-Xmx512m", *quick, f"-Dlog4j2.configurationFile={config}",
        "-cp", classpath(lib), TOOLS[key], *args,
    ]
