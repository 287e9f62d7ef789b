"""A dev cluster (or secured broker) for a test session or a benchmark, with its faults at hand.

:func:`dev_cluster` starts ``parsley-devbroker up --brokers N [--security S]`` in a temporary
directory, as an operator would (its output is kept), yields a :class:`DevCluster` and
stops and removes it at the end (``PARSLEY_KEEP_BROKER=1`` keeps the directory and its logs).
The session fixtures ``kafka_cluster`` and ``secured_broker`` of ``tests/conftest.py`` are
this; benchmarks use it directly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devtools import devbroker, devbroker_cluster
from devtools.devbroker import BOOTSTRAP_PREFIX, BrokerState
from devtools.devbroker_security import PLAINTEXT, create_user, load_security
from devtools.kafka_jars import DevBrokerError

__all__ = ["RESTART_TIMEOUT_S", "START_ATTEMPTS", "DevCluster", "dev_cluster", "java_string_hash"]

RESTART_TIMEOUT_S = 360.0
"""How long :meth:`DevCluster.start` waits for a restarted broker over all its attempts, s
(:data:`START_ATTEMPTS`: 180 s each). A broker killed and started again at once is refused
``DUPLICATE_BROKER_REGISTRATION`` until the controller expires its old registration, and
retries; on a 2-core machine running two test suites (load 12-14) that, with KRaft
elections slowed, was seen taking past 120 s. A test fault waits for the broker it
restarts; only a broker that exited fails sooner."""

START_ATTEMPTS = 2
"""How many times :meth:`DevCluster.start` starts a broker within its deadline, each attempt
getting an even share of what is left (180 s of the default 360 s). A KRaft node killed
and started again on two loaded cores has been seen alive but never opening its client
port in 240 s (unregistered, its controller quorum without an active controller), and,
before registration waited that long, exiting after 60 s; an operator's cure, a second
start, is the harness's: after a failed attempt the node is stopped (SIGKILL at the
latest) and started once more, and the failure is reported in full."""

ENV_KEEP = "PARSLEY_KEEP_BROKER"


@dataclass(frozen=True)
class DevCluster:
    """A running dev cluster (or single broker) and the operations tests play on it.

    Attributes:
        data_dir: its data directory.
        bootstrap: ``bootstrap.servers`` as ``up`` printed it (every broker).
        brokers: how many brokers.
        security: ``"plaintext"`` or ``"sasl_ssl"``.
        client: the super user's confluent-kafka properties (empty for plaintext).
        up_stdout: what ``up`` printed on stdout; up_stderr: on stderr.
    """

    data_dir: Path
    bootstrap: str
    brokers: int
    security: str
    client: dict[str, str] = field(default_factory=dict)
    up_stdout: str = ""
    up_stderr: str = ""

    def config(self, **extra: Any) -> dict[str, Any]:
        """Client properties for the super user: ``bootstrap.servers``, quiet logging, the
        security properties, then ``extra``."""
        return {"bootstrap.servers": self.bootstrap, "log_level": 0, **self.client, **extra}

    def admin(self) -> Any:
        """A new confluent-kafka AdminClient as the super user."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.config())

    def stop(self, broker_id: int, *, kill: bool = False) -> BrokerState | None:
        """Stop broker ``broker_id`` keeping its data (SIGTERM; SIGKILL with ``kill``)."""
        return devbroker_cluster.stop_broker(self.data_dir, broker_id, kill=kill)

    def freeze(self, broker_id: int) -> BrokerState:
        """SIGSTOP broker ``broker_id``."""
        return devbroker_cluster.freeze_broker(self.data_dir, broker_id)

    def thaw(self, broker_id: int) -> BrokerState:
        """SIGCONT broker ``broker_id``."""
        return devbroker_cluster.thaw_broker(self.data_dir, broker_id)

    def start(self, broker_id: int, *, timeout_s: float = RESTART_TIMEOUT_S,
              say: Callable[[str], None] | None = None) -> BrokerState:
        """Start broker ``broker_id`` if down; return once it answers, registered.

        Args:
            broker_id: the node to start.
            timeout_s: the deadline over every attempt, s (:data:`RESTART_TIMEOUT_S`).
            say: told of each attempt that failed and was retried: a first line, then the
                failure in full (the node's errors and quorum transitions); by default
                printed to stderr.

        Raises:
            DevBrokerError: the last of :data:`START_ATTEMPTS` attempts failed; its
                message is that attempt's failure, then the first line of each earlier one.
        """
        tell = say if say is not None else (lambda text: print(text, file=sys.stderr))
        deadline = time.monotonic() + timeout_s
        earlier: list[str] = []
        for attempt in range(1, START_ATTEMPTS):
            began = time.monotonic()
            try:
                return devbroker_cluster.start_broker(
                    self.data_dir, broker_id,
                    timeout_s=max((deadline - began) / (START_ATTEMPTS - attempt + 1), 1.0))
            except DevBrokerError as exc:
                first = f"broker {broker_id}'s start {attempt} failed after " \
                        f"{time.monotonic() - began:.0f} s: {str(exc).splitlines()[0]}"
                # The failed start stopped the node (SIGTERM, SIGKILL after 10 s); make sure.
                devbroker_cluster.stop_broker(self.data_dir, broker_id, kill=True)
                earlier.append(f"(earlier: {first})")
                tell(f"{first}; stopped it and started it again\n{exc}")
        try:
            return devbroker_cluster.start_broker(
                self.data_dir, broker_id, timeout_s=max(deadline - time.monotonic(), 1.0))
        except DevBrokerError as exc:
            if not earlier:
                raise
            raise DevBrokerError("\n".join([str(exc), *earlier])) from exc

    def heal(self, timeout_s: float = 180.0) -> None:
        """Thaw and start every broker that is not running, then wait until every partition
        is fully in sync again: the cluster as the next test expects it."""
        if self.brokers > 1:
            devbroker_cluster.up_cluster(self.data_dir, start_timeout_s=timeout_s)
            devbroker_cluster.wait_in_sync(self.bootstrap, self.client, timeout_s)
        else:
            for status in devbroker_cluster.broker_status(self.data_dir):
                if status.frozen:
                    self.thaw(status.id)
            self.start(1)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The id of the broker leading ``topic[partition]`` now.

        Raises:
            KafkaException: the topic could not be described.
        """
        from confluent_kafka import TopicCollection

        admin = self.admin()
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic] \
            .result(timeout=20)
        leader = desc.partitions[partition].leader
        if leader is None:
            raise DevBrokerError(f"{topic}[{partition}] has no leader now")
        return int(leader.id)

    def transaction_coordinator_of(self, transactional_id: str) -> int:
        """The id of the broker coordinating ``transactional_id``'s transactions: the leader
        of its ``__transaction_state`` partition (Kafka's ``partitionFor``)."""
        partitions = _partition_count(self, "__transaction_state")
        return self.leader_of("__transaction_state",
                              java_string_hash(transactional_id) % partitions)

    def group_coordinator_of(self, group: str) -> int:
        """The id of the broker coordinating consumer group ``group``: the leader of its
        ``__consumer_offsets`` partition (Kafka's ``partitionFor``)."""
        partitions = _partition_count(self, "__consumer_offsets")
        return self.leader_of("__consumer_offsets", java_string_hash(group) % partitions)

    def create_user(self, name: str, password: str | None = None) -> dict[str, str]:
        """Create SCRAM user ``name`` (``sasl_ssl`` only); return its client properties
        (no ``bootstrap.servers``).

        Raises:
            DevBrokerError: a plaintext cluster, or the user could not be made.
        """
        security = load_security(self.data_dir)
        if security is None:
            raise DevBrokerError(f"{self.data_dir} is not secured: no users")
        return create_user(security, self.bootstrap, name, password)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text`` made non-negative as Kafka's ``Utils.abs``
    does (``Math.abs``, and 0 for ``Integer.MIN_VALUE``): how Kafka places a group or a
    transactional id on a partition of ``__consumer_offsets`` or ``__transaction_state``
    (``partitionFor``)."""
    h = 0
    for unit in text.encode("utf-16-be").hex(" ", 2).split():
        h = (31 * h + int(unit, 16)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    return 0 if signed == -(1 << 31) else abs(signed)


def _partition_count(cluster: DevCluster, topic: str) -> int:
    from confluent_kafka import TopicCollection

    admin = cluster.admin()
    desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15)[topic] \
        .result(timeout=20)
    return len(desc.partitions)


def _cli(*args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "devtools.devbroker_cli", *args],
                          capture_output=True, text=True, timeout=timeout_s, check=False)


@contextmanager
def dev_cluster(
    brokers: int = 3, *, security: str = PLAINTEXT, prefix: str = "parsley-cluster-",
    timeout_s: float = 300.0,
) -> Iterator[DevCluster]:
    """A dev cluster for the block, started with ``parsley-devbroker up`` in a temporary
    directory, stopped and removed after it (kept with ``PARSLEY_KEEP_BROKER=1``).

    Args:
        brokers: 1 (a single broker) or a cluster of 2..9.
        security: ``"plaintext"`` or ``"sasl_ssl"``.
        prefix: the temporary directory's name prefix.
        timeout_s: deadline for ``up``, seconds.

    Raises:
        DevBrokerError: ``up`` failed (its stderr is in the message).
    """
    data_dir = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    args = ["up", "--dir", str(data_dir), "--brokers", str(brokers), "--security", security,
            "--timeout", str(timeout_s)]
    try:
        try:
            result = _cli(*args, timeout_s=timeout_s + 60)
        except subprocess.TimeoutExpired as exc:
            raise DevBrokerError(f"parsley-devbroker {' '.join(args)} did not end in "
                                 f"{timeout_s + 60:.0f} s") from exc
        last = (result.stdout.strip().splitlines() or [""])[-1]
        if result.returncode != 0 or not last.startswith(BOOTSTRAP_PREFIX):
            raise DevBrokerError(f"parsley-devbroker {' '.join(args)} exited "
                                 f"{result.returncode}:\n{result.stderr[-4000:]}")
        yield DevCluster(
            data_dir=data_dir, bootstrap=last.removeprefix(BOOTSTRAP_PREFIX), brokers=brokers,
            security=security, client=devbroker.client_config(data_dir),
            up_stdout=result.stdout, up_stderr=result.stderr)
    finally:
        keep = bool(os.environ.get(ENV_KEEP))
        if devbroker_cluster.read_cluster(data_dir) is not None:
            devbroker_cluster.down_cluster(data_dir, keep=keep)
        else:
            devbroker.down(data_dir, keep=keep)
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)
