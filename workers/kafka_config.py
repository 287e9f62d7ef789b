"""The worker's Kafka client configurations: the confluent-kafka (librdkafka) dicts of task ``i``.

:func:`consumer_config`, :func:`producer_config`, :func:`restore_consumer_config` and
:func:`admin_config` build them from the bootstrap servers, the prefix and process
(application id ``<prefix>-<process>``; ids from ``parsley.declarations``), the task index
and the user's ``kafka_properties``. Properties Parsley owns are refused in user overrides
(:data:`OWNED_PROPERTIES`). Errors are classified in :mod:`workers.kafka_errors`.

Measured on a real broker (``tests/integration/test_worker_kafka.py``): closed static
members stay in the group until their session times out (librdkafka sends no LeaveGroup
for them): 5.9 s after ``close()`` at :data:`DEFAULT_SESSION_TIMEOUT_MS` (6000), and 3.1 s
with ``session.timeout.ms=3000``, so a clean stop empties the group within about the
session timeout.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

from parsley.declarations import application_id, group_instance_id, transactional_id

__all__ = [
    "DEFAULT_SESSION_TIMEOUT_MS",
    "FETCH_QUEUE_BACKOFF_MS",
    "OWNED_PROPERTIES",
    "PREFETCH_KIB",
    "TRANSACTION_TIMEOUT_MS",
    "WorkerOwner",
    "admin_config",
    "consumer_config",
    "parse_worker_client_id",
    "producer_config",
    "restore_consumer_config",
    "worker_client_id",
]

TRANSACTION_TIMEOUT_MS: Final = 10_000
"""``transaction.timeout.ms`` of every worker producer (docs/operations.md, "Transaction time
bound": an open transaction is aborted at ten seconds)."""

DEFAULT_SESSION_TIMEOUT_MS: Final = 6_000
"""Consumer ``session.timeout.ms``. Static members do not leave the group on
close, so the group empties only when their sessions expire: keep it to
seconds (docs/operations.md, "The consumer group at a start"). 6 s is the broker's default
``group.min.session.timeout.ms``, the shortest a stock broker accepts."""

PREFETCH_KIB: Final = 16_384
"""The ``queued.max.messages.kbytes`` (KiB) of the main and the restore consumer unless the
user sets one (``consumer.queued.max.messages.kbytes``)."""

FETCH_QUEUE_BACKOFF_MS: Final = 10
"""The ``fetch.queue.backoff.ms`` of the main and the restore consumer unless the user sets
one (``consumer.fetch.queue.backoff.ms``): once its prefetch queue has room again a
consumer fetches within this many ms. librdkafka's default is 1,000 ms, so a consumer that
drains a full queue faster than that sits idle for the rest of the second."""

RESTORE_FETCH_WAIT_MS: Final = 10
"""``fetch.wait.max.ms`` of the restore consumer: how long the broker may hold a fetch that
found nothing new, which is how each changelog read learns it reached the end (KIP-98's
commit marker is the last offset, so the partition-EOF event ends the read)."""

OWNED_PROPERTIES: Final = frozenset(
    {
        "bootstrap.servers",
        "metadata.broker.list",  # librdkafka's alias of bootstrap.servers
        "group.id",
        "group.instance.id",
        "group.protocol",
        "group.remote.assignor",
        "partition.assignment.strategy",
        "transactional.id",
        "transaction.timeout.ms",
        "enable.idempotence",
        "isolation.level",
        "auto.offset.reset",
        "enable.auto.commit",
        "partitioner",
    }
)
"""librdkafka properties Parsley sets itself and refuses in user overrides.

Source: docs/operations.md, "Configuration" (forbidden keys and suffixes) and "Transaction
time bound"; README.md, "Write your own process"
(``transaction.timeout.ms=10000``; ``partitioner=murmur2_random`` keeps
co-partitioning with Java producers).
"""

_CLIENT_PREFIXES: Final = ("consumer.", "producer.", "admin.")


def _check_user_properties(kafka_properties: Mapping[str, Any] | None) -> dict[str, Any]:
    props = dict(kafka_properties or {})
    for key, value in props.items():
        if not isinstance(key, str):
            raise TypeError(f"kafka property names must be str, got {key!r}")
        bare = key.strip().lower()
        for prefix in _CLIENT_PREFIXES:
            if bare.startswith(prefix):
                bare = bare[len(prefix):]
                break
        if bare in OWNED_PROPERTIES:
            raise ValueError(
                f"kafka property {key!r} is owned by Parsley and cannot be overridden "
                f"(owned: {', '.join(sorted(OWNED_PROPERTIES))})"
            )
        if bare == "default.topic.config" and isinstance(value, Mapping):
            _check_user_properties(value)
        if value is None:
            raise ValueError(f"kafka property {key!r} has no value")
    return props


def _select(props: Mapping[str, Any], kind: str) -> dict[str, Any]:
    """Unprefixed properties apply to every client; ``<kind>.x`` to that kind only."""
    out: dict[str, Any] = {}
    for key, value in props.items():
        if key.startswith(_CLIENT_PREFIXES):
            prefix = f"{kind}."
            if key.startswith(prefix):
                out[key[len(prefix):]] = value
        else:
            out[key] = value
    return out


def _check_common(bootstrap_servers: str, prefix: str, process: str) -> None:
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ValueError("bootstrap servers must be non-blank")
    for what, name in (("application id prefix", prefix), ("process name", process)):
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{what} must be non-blank, got {name!r}")


class WorkerOwner(NamedTuple):
    """The coordinator a worker's client id names: the host it runs on and its pid."""

    host: str
    pid: int


def worker_client_id(instance: str, owner: WorkerOwner | None) -> str:
    """A worker consumer's ``client.id`` (pure): ``<instance>|<host>|<coordinator pid>``, or the
    bare ``group.instance.id`` without an owner. What ``kafka-consumer-groups --describe
    --members`` lists as CLIENT-ID; a start that finds the group held by workers of this
    process reads it back (:func:`parse_worker_client_id`) to name the coordinator running
    them (docs/operations.md, "One coordinator per prefix")."""
    return instance if owner is None else f"{instance}|{owner.host}|{owner.pid}"


def parse_worker_client_id(client_id: str) -> tuple[str, WorkerOwner] | None:
    """``(instance, owner)`` from :func:`worker_client_id`'s form, else ``None`` (pure)."""
    instance, sep, rest = client_id.partition("|")
    host, sep2, pid = rest.rpartition("|")
    if not sep or not sep2 or not instance or not host or not pid.isdigit():
        return None
    return instance, WorkerOwner(host, int(pid))


def consumer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    owner: WorkerOwner | None = None,
) -> dict[str, Any]:
    """The main consumer of task ``task``: a static member of group ``<app-id>``.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        prefix: the application id prefix; ``<prefix>-<process>`` is the
            application id and the group id.
        process: the process name.
        task: task index ``i`` (the partition this worker owns on every topic).
        kafka_properties: user overrides; unprefixed keys apply to every
            client, ``consumer.<key>`` to consumers only (``producer.<key>``,
            ``admin.<key>`` likewise).
        task_count: the process's task width, for the id padding
            (``parsley.declarations.group_instance_id``).
        session_timeout_ms: ms a static member stays in the group after it
            stops heart-beating (a crash or a close).
        owner: the coordinator running the worker, named in its ``client.id``
            (:func:`worker_client_id`); ``None`` leaves the bare instance id.

    Returns:
        A librdkafka config: ``group.id = <prefix>-<process>``,
        ``group.instance.id = <prefix>-<process>-task-<NNN>``,
        classic group protocol with the range assignor, ``read_committed``,
        no auto commit, ``auto.offset.reset=error`` (a committed position
        below the log start is refused, never skipped: docs/failing-closed.md,
        ``POSITIONS_DISCARDED_UNREAD``), no topic auto-creation; by default a
        16 MiB prefetch (:data:`PREFETCH_KIB`) fetched again after 10 ms.

    Raises:
        ValueError: a blank argument, or a user property Parsley owns
            (the message names it).
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "consumer")
    instance = group_instance_id(prefix, process, task, task_count)
    config: dict[str, Any] = {
        "client.id": worker_client_id(instance, owner),
        "session.timeout.ms": session_timeout_ms,
        "heartbeat.interval.ms": max(100, session_timeout_ms // 6),
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "allow.auto.create.topics": False,
        # Prefetch at most 16 MiB, not librdkafka's 64 MiB: a worker handed a backlog of
        # large records otherwise holds 64 MiB of fetched records it has not fed, and
        # keeps that high-water mark (docs/performance.md, "Memory"). 16 MiB is still a
        # third of a second of 1 KiB records at this worker's fastest.
        "queued.max.messages.kbytes": PREFETCH_KIB,
        # ...and fetch again soon once it has room (librdkafka's default waits a second).
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": application_id(prefix, process),
            "group.instance.id": instance,
            "group.protocol": "classic",
            "partition.assignment.strategy": "range",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    return config


def producer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
) -> dict[str, Any]:
    """The transactional producer of task ``task``.

    Arguments as :func:`consumer_config` (``producer.<key>`` overrides).

    Returns:
        A librdkafka config: ``transactional.id = <prefix>-<process>-task-<NNN>``
        (``parsley.declarations.transactional_id``; its
        ``init_transactions`` fences any zombie of the same task),
        idempotence on, ``transaction.timeout.ms=10000``
        (:data:`TRANSACTION_TIMEOUT_MS`) and ``partitioner=murmur2_random``
        (Java's default partitioner, so keys land on the same partitions
        from either implementation); by default ``acks=all`` (idempotence refuses
        any other) and ``delivery.report.only.error=true`` (failures only: a commit
        knows every other record delivered once its flush empties the queue,
        :class:`workers.ledger.DeliveryLedger`).

    Raises:
        ValueError: a blank argument, or a user property Parsley owns.
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "producer")
    name = transactional_id(prefix, process, task, task_count)
    # Failures only: no Python call per delivered record (workers.ledger.DeliveryLedger).
    config: dict[str, Any] = {"client.id": name, "acks": "all",
                              "delivery.report.only.error": True}
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "transactional.id": name,
            "enable.idempotence": True,
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "partitioner": "murmur2_random",
        }
    )
    return config


def restore_consumer_config(
    bootstrap_servers: str,
    prefix: str,
    process: str,
    task: int,
    kafka_properties: Mapping[str, Any] | None = None,
    *,
    task_count: int | None = None,
) -> dict[str, Any]:
    """A consumer that reads changelog partitions by ``assign()`` only.

    It never subscribes and never commits, so it never joins or creates a
    group; librdkafka insists on a ``group.id`` all the same, and asks for that group's
    coordinator (``FindCoordinator``, which an authorizer allows only with Describe on
    the group), so it gets the application's group, ``<prefix>-<process>``, on which
    the process's principal has Read already (docs/operations.md, "ACLs"). Its
    ``client.id`` is ``<prefix>-<process>-task-<NNN>.restore``. Arguments as
    :func:`consumer_config`.
    ``read_committed`` (aborted changelog writes are not state),
    ``auto.offset.reset=error`` (a changelog position that vanishes mid-read
    is a failure, never a skip), ``enable.partition.eof`` (the reader's end
    signal when the last records are transaction markers).

    Raises:
        ValueError: a blank argument, or a user property Parsley owns.
    """
    _check_common(bootstrap_servers, prefix, process)
    user = _select(_check_user_properties(kafka_properties), "consumer")
    name = group_instance_id(prefix, process, task, task_count)
    config: dict[str, Any] = {
        "client.id": f"{name}.restore",
        "allow.auto.create.topics": False,
        "enable.auto.offset.store": False,
        # Prefetch at most 16 MiB (librdkafka's default is 64 MiB): a restore reads as fast
        # as it decodes, and a worker keeps this consumer (and its high-water mark of
        # memory) for its life (docs/performance.md, "Restore, what limits it").
        "queued.max.messages.kbytes": PREFETCH_KIB,
        # ...and fetch again soon once it has room (librdkafka waits a whole second by
        # default, which made a 16 MiB restore three times slower).
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
        # A transactional changelog ends in a commit marker, so a read learns it is done
        # from the partition-EOF event, which comes with a fetch that found nothing new:
        # the broker holds that fetch for fetch.wait.max.ms (500 ms by default) on every
        # partition read. The consumer fetches only while a read assigns it a partition.
        "fetch.wait.max.ms": RESTORE_FETCH_WAIT_MS,
    }
    config.update(user)
    config.update(
        {
            "bootstrap.servers": bootstrap_servers,
            "group.id": application_id(prefix, process),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": True,
        }
    )
    return config


def admin_config(
    bootstrap_servers: str, kafka_properties: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """An AdminClient config: user properties (unprefixed and ``admin.``) over the servers.

    Raises:
        ValueError: blank servers, or a user property Parsley owns.
    """
    if not bootstrap_servers or not bootstrap_servers.strip():
        raise ValueError("bootstrap servers must be non-blank")
    config = _select(_check_user_properties(kafka_properties), "admin")
    config["bootstrap.servers"] = bootstrap_servers
    return config
