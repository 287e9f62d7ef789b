"""``ParsleyConfig``: what a coordinator needs to start processes, from code, a file, env or flags.

Three sources, in increasing precedence (:meth:`ParsleyConfig.load`): a TOML file
(``--config FILE``), ``PARSLEY_*`` environment variables (one ``PARSLEY_KAFKA_<NAME>`` per
client property), then explicit overrides (the CLI's flags). The Kafka properties Parsley
owns are refused, naming the property (and the process, for a per-process one). A process's
workers' clients get, key by key, the coordinator's ``kafka_properties``, the process's
declared ones, then the file's ``[process_kafka_properties.<process>]``
(:meth:`ParsleyConfig.kafka_properties_for`); the coordinator's own clients the first only.

The file's keys, every variable and the merge are in docs/architecture.md, "The
coordinator", "Configuration sources"; the supervision settings in docs/operations.md,
"Supervision"; the metrics port and host in docs/operations.md, "Metrics".
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Final

from coordinator.state_dir import default_state_dir as _per_user_state_dir
from parsley.engine.cross_partition import CROSS_PARTITION_SETTINGS
from workers.kafka_config import OWNED_PROPERTIES
from workers.protocol import DEFAULT_TASK_TIMEOUT_MS as DEFAULT_WORKER_TASK_TIMEOUT_MS

__all__ = [
    "CLI_FLAGS",
    "DEFAULT_COMMIT_INTERVAL_MS",
    "DEFAULT_MAX_RESTARTS",
    "DEFAULT_METADATA_BUDGET_BYTES",
    "DEFAULT_METRICS_HOST",
    "DEFAULT_RESTART_BACKOFF_MS",
    "DEFAULT_RESTART_RESET_MS",
    "DEFAULT_STALE_TASK_MS",
    "DEFAULT_STATUS_INTERVAL_MS",
    "DEFAULT_TASK_TIMEOUT_MS",
    "ENV_PREFIX",
    "OWNED_KAFKA_PROPERTIES",
    "ParsleyConfig",
    "check_process_properties",
    "default_state_dir",
]

DEFAULT_METADATA_BUDGET_BYTES: Final = 262_144
"""The causal metadata budget, bytes (docs/operations.md, "Configuration": 262,144)."""
DEFAULT_STATUS_INTERVAL_MS: Final = 1_000
"""How often each task publishes its status entry, ms (docs/operations.md, "Status": 1 s)."""
DEFAULT_COMMIT_INTERVAL_MS: Final = 100
"""How long a task's transaction stays open at most, ms (Kafka Streams' EOS default)."""
DEFAULT_STALE_TASK_MS: Final = 60_000
"""How long a worker may send no report (status or final) before the coordinator
kills it by PID as stale, ms (docs/operations.md, "Supervision"). Well above the
worker's own bound on a blocked client call, so the worker names the call first."""
DEFAULT_TASK_TIMEOUT_MS: Final = DEFAULT_WORKER_TASK_TIMEOUT_MS
"""How long a task recovers in place from faults a restart would cure (a client call past
its bound, an unreachable cluster) without progress before it stops SUBSTRATE and the
restart policy applies, ms: Kafka Streams' ``task.timeout.ms`` default, 5 min (KIP-572;
docs/operations.md, "The task timeout")."""
DEFAULT_MAX_RESTARTS: Final = 5
"""Restarts of one process (substrate failures) or respawns of one task (crashes,
stale workers) under ``--restart transient`` before the coordinator gives up."""
DEFAULT_RESTART_BACKOFF_MS: Final = 1_000
"""The first restart delay, ms; it doubles per attempt up to 30 s."""
DEFAULT_RESTART_RESET_MS: Final = 60_000
"""How long a task must have been RUNNING, without a break, for its restart budget
and backoff to start again from zero, ms."""
DEFAULT_METRICS_HOST: Final = "127.0.0.1"
"""Where ``/metrics`` is served when ``metrics_port`` is set: this machine only."""
ENV_PREFIX: Final = "PARSLEY_"
_ENV_KAFKA: Final = "PARSLEY_KAFKA_"

OWNED_KAFKA_PROPERTIES: Final = OWNED_PROPERTIES | frozenset(
    {"application.id", "processing.guarantee"}
)
"""Client properties Parsley sets itself (docs/operations.md, "Configuration": forbidden keys
and suffixes): the worker's own set, ``workers.kafka_config.OWNED_PROPERTIES`` (one source for
both), plus the two Streams names a Java user may carry over (``application.id``,
``processing.guarantee``), which Parsley derives itself. A
``consumer.``/``producer.``/``admin.`` prefix does not make one acceptable."""

CLI_FLAGS: Final = MappingProxyType({
    "bootstrap_servers": "--bootstrap-servers",
    "application_id_prefix": "--prefix",
    "state_dir": "--state-dir",
})
"""The ``parsley-coordinator`` flag that sets each setting, for messages that
tell the user where to give it (the flag names are not the field names)."""

_POSITIVE_INTS: Final = ("metadata_budget_bytes", "status_interval_ms", "commit_interval_ms",
                          "stale_task_ms", "restart_reset_ms", "task_timeout_ms")
_NON_NEGATIVE_INTS: Final = ("max_restarts", "restart_backoff_ms")
_OPTIONAL_INTS: Final = ("metrics_port", "changelog_replication_factor",
                          "changelog_min_insync_replicas")

_CLIENT_PREFIXES: Final = (
    "consumer.", "producer.", "admin.", "main.consumer.", "restore.consumer.",
)


def default_state_dir() -> str:
    """The per-user state dir used when none is configured: ``$XDG_STATE_HOME/parsley``,
    else ``~/.local/state/parsley``, else ``<tmp>/parsley-<uid>``
    (:func:`coordinator.state_dir.default_state_dir`; docs/operations.md, "The state dir").

    Java's default is ``/tmp/kafka-streams``, shared by every user of a machine.
    """
    return _per_user_state_dir()


def _owned(key: str) -> str | None:
    bare = key.strip().lower()
    for prefix in _CLIENT_PREFIXES:
        if bare.startswith(prefix):
            bare = bare[len(prefix):]
            break
    return bare if bare in OWNED_KAFKA_PROPERTIES else None


def check_process_properties(process: str, properties: Mapping[str, Any],
                             where: str) -> dict[str, Any]:
    """One process's client properties, checked: the owned ones refused (pure).

    Args:
        process: the process name, for the message.
        properties: the properties (``consumer.``/``producer.``/``admin.`` prefixes allowed).
        where: where they were given, for the message.

    Returns:
        A plain copy.

    Raises:
        ValueError: a property Parsley owns (the message names it, the process and
            ``where``), or one with no value.
        TypeError: a property name that is not a string.
    """
    out: dict[str, Any] = {}
    for key, value in dict(properties or {}).items():
        if not isinstance(key, str):
            raise TypeError(f"process '{process}': kafka property names must be str, "
                            f"got {key!r}")
        owned = _owned(key)
        if owned is not None:
            raise ValueError(
                f"kafka property '{key}' of process '{process}' ({where}) is owned by Parsley "
                f"and cannot be set ('{owned}' is set per process and task by the coordinator)")
        if value is None:
            raise ValueError(f"kafka property '{key}' of process '{process}' ({where}) has "
                             "no value")
        out[key] = value
    return out


@dataclass(frozen=True)
class ParsleyConfig:
    """How a coordinator runs its processes.

    Attributes:
        bootstrap_servers: Kafka ``bootstrap.servers``, ``host:port[,...]``; non-blank.
        application_id_prefix: the ``<prefix>`` of every application id
            ``<prefix>-<process>``; non-blank, no ``__parsley.``.
        state_dir: root of local state (``<state_dir>/<prefix>-<process>/<task>``)
            and of the coordinator's ``ipc://`` sockets.
        metadata_budget_bytes: causal metadata budget, bytes, > 0.
        status_interval_ms: a task's status period, ms, >= 1.
        commit_interval_ms: a task's transaction period, ms, >= 1.
        cross_partition_causes: what a cause on another task's partition of a
            received topic does (docs/failing-closed.md, "Cross-partition causes").
            ``auto`` (default): refused with ``CROSS_PARTITION_CAUSE`` when the
            received topics' partition counts are equal, else carried unenforced
            with a warning. ``refuse``: always refused. ``warn``: always carried,
            warned and counted, for an upstream stage that fans partitions in.
        refuse_cross_partition_causes: the older boolean spelling: ``True`` means
            ``cross_partition_causes = "refuse"``; ``False`` changes nothing.
        stale_task_ms: a worker that sends no report for this long is killed
            by PID (SIGKILL) and treated as a transient stop, ms, >= 1.
        task_timeout_ms: how long a task recovers in place without progress before
            it stops SUBSTRATE and the restart policy applies, ms, >= 1.
        max_restarts: the restart budget under ``transient``, >= 0.
        restart_backoff_ms: the first restart delay, ms, >= 0 (doubles per
            attempt, capped at 30 s).
        restart_reset_ms: a task RUNNING this long resets the budget and the
            backoff, ms, >= 1.
        kafka_properties: librdkafka properties for every client (``consumer.``,
            ``producer.``, ``admin.`` prefixes select one kind); read-only.
        metrics_port: the TCP port the coordinator serves Prometheus ``/metrics`` on
            (0: any free port), or ``None`` (default) for none (docs/operations.md,
            "Metrics").
        metrics_host: the address ``/metrics`` is bound to; non-blank.
        process_kafka_properties: ``{process name: properties}`` for that
            process's workers' clients only, over ``kafka_properties`` (same
            prefixes); read-only. A name no started process has is refused at
            the start (:meth:`check_processes`).
        changelog_replication_factor: the replication factor of the changelogs a
            start creates, >= 1, or ``None`` (default) for ``min(3, brokers)``
            (``workers.changelog.changelog_replication``; docs/operations.md,
            "Production clusters"). Existing changelogs are never altered.
        changelog_min_insync_replicas: their ``min.insync.replicas``, >= 1 and at
            most the replication factor when both are set, or ``None`` (default)
            for 2 from 3 replicas on, else 1.

    Raises:
        ValueError: a blank server list or prefix, a prefix containing
            ``__parsley.``, a non-positive budget or interval, a
            ``cross_partition_causes`` outside ``auto``/``refuse``/``warn``,
            ``refuse_cross_partition_causes = true`` with
            ``cross_partition_causes = "warn"``, a property
            Parsley owns (the message names it), a property with no value, a
            ``metrics_port`` outside 0..65535 or a blank ``metrics_host``, a
            changelog replication factor or ``min.insync.replicas`` below 1, or a
            minimum above the factor.
        TypeError: a property name that is not a string.
    """

    bootstrap_servers: str
    application_id_prefix: str
    state_dir: str = field(default_factory=default_state_dir)
    metadata_budget_bytes: int = DEFAULT_METADATA_BUDGET_BYTES
    status_interval_ms: int = DEFAULT_STATUS_INTERVAL_MS
    commit_interval_ms: int = DEFAULT_COMMIT_INTERVAL_MS
    kafka_properties: Mapping[str, Any] = field(default_factory=dict)
    cross_partition_causes: str = "auto"
    refuse_cross_partition_causes: bool = False
    stale_task_ms: int = DEFAULT_STALE_TASK_MS
    task_timeout_ms: int = DEFAULT_TASK_TIMEOUT_MS
    max_restarts: int = DEFAULT_MAX_RESTARTS
    restart_backoff_ms: int = DEFAULT_RESTART_BACKOFF_MS
    restart_reset_ms: int = DEFAULT_RESTART_RESET_MS
    metrics_port: int | None = None
    metrics_host: str = DEFAULT_METRICS_HOST
    process_kafka_properties: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    changelog_replication_factor: int | None = None
    changelog_min_insync_replicas: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.bootstrap_servers, str) or not self.bootstrap_servers.strip():
            raise ValueError("bootstrap_servers must be non-blank")
        prefix = self.application_id_prefix
        if not isinstance(prefix, str) or not prefix.strip():
            raise ValueError("application_id_prefix must be non-blank")
        if "__parsley." in prefix:
            raise ValueError(f"application_id_prefix '{prefix}' may not contain '__parsley.'")
        if not isinstance(self.state_dir, str) or not self.state_dir.strip():
            raise ValueError("state_dir must be non-blank")
        for name in _POSITIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.refuse_cross_partition_causes, bool):
            raise ValueError("refuse_cross_partition_causes must be true or false, got "
                             f"{self.refuse_cross_partition_causes!r}")
        if self.cross_partition_causes not in CROSS_PARTITION_SETTINGS:
            raise ValueError("cross_partition_causes must be one of "
                             f"{list(CROSS_PARTITION_SETTINGS)}, got "
                             f"{self.cross_partition_causes!r}")
        if self.refuse_cross_partition_causes:
            if self.cross_partition_causes == "warn":
                raise ValueError("refuse_cross_partition_causes = true contradicts "
                                 "cross_partition_causes = \"warn\"; drop the older "
                                 "refuse_cross_partition_causes setting")
            object.__setattr__(self, "cross_partition_causes", "refuse")
        for name in _NON_NEGATIVE_INTS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        port = self.metrics_port
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                                 or not 0 <= port <= 65535):
            raise ValueError(f"metrics_port must be a TCP port 0..65535, got {port!r}")
        if not isinstance(self.metrics_host, str) or not self.metrics_host.strip():
            raise ValueError("metrics_host must be non-blank")
        for name in ("changelog_replication_factor", "changelog_min_insync_replicas"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"{name} must be an int >= 1 (or unset), got {value!r}")
        replicas, min_isr = self.changelog_replication_factor, self.changelog_min_insync_replicas
        if replicas is not None and min_isr is not None and min_isr > replicas:
            raise ValueError(f"changelog_min_insync_replicas ({min_isr}) exceeds "
                             f"changelog_replication_factor ({replicas}): no write could "
                             "ever be acknowledged")
        if self.stale_task_ms <= self.status_interval_ms:
            raise ValueError(f"stale_task_ms ({self.stale_task_ms}) must exceed "
                             f"status_interval_ms ({self.status_interval_ms}): a healthy "
                             "task reports once per status interval")
        props: dict[str, Any] = {}
        for key, value in dict(self.kafka_properties or {}).items():
            if not isinstance(key, str):
                raise TypeError(f"kafka property names must be str, got {key!r}")
            owned = _owned(key)
            if owned is not None:
                raise ValueError(
                    f"kafka property '{key}' is owned by Parsley and cannot be set "
                    f"('{owned}' is set per process and task by the coordinator)"
                    + ("; give bootstrap_servers separately" if owned == "bootstrap.servers"
                       else "")
                )
            if value is None:
                raise ValueError(f"kafka property '{key}' has no value")
            props[key] = value
        object.__setattr__(self, "kafka_properties", MappingProxyType(props))
        per: dict[str, Mapping[str, Any]] = {}
        for process, table in dict(self.process_kafka_properties or {}).items():
            if not isinstance(process, str) or not isinstance(table, Mapping):
                raise ValueError("process_kafka_properties maps a process name to a table of "
                                 f"properties, got {process!r} = {table!r}")
            per[process] = MappingProxyType(
                check_process_properties(process, table, "process_kafka_properties"))
        object.__setattr__(self, "process_kafka_properties", MappingProxyType(per))

    @property
    def status_interval_s(self) -> float:
        """The status interval in seconds."""
        return self.status_interval_ms / 1000.0

    def kafka_properties_for(self, process: Any) -> dict[str, Any]:
        """The client properties of ``process``'s workers (a ``parsley.Process``).

        Key by key: :attr:`kafka_properties`, then the declaration's
        ``kafka_properties``, then :attr:`process_kafka_properties` for its name
        (the operator's file over the application's code).

        Raises:
            ValueError: a declared property Parsley owns (the message names the
                property and the process).
        """
        declared = check_process_properties(process.name, process.kafka_properties,
                                            "Process(..., kafka_properties=...)")
        return {**self.kafka_properties, **declared,
                **self.process_kafka_properties.get(process.name, {})}

    def check_processes(self, processes: Any) -> None:
        """Refuse per-process properties before a start (``processes``: ``parsley.Process``es).

        Raises:
            ValueError: a declared property Parsley owns, or a
                ``process_kafka_properties`` table naming no started process
                (a typo would otherwise leave the setting unused).
        """
        names = []
        for process in processes:
            self.kafka_properties_for(process)
            names.append(process.name)
        unknown = sorted(set(self.process_kafka_properties) - set(names))
        if unknown:
            raise ValueError(f"process_kafka_properties names {unknown}, which this start does "
                             f"not run (its processes: {sorted(names)})")

    def with_overrides(self, **overrides: Any) -> ParsleyConfig:
        """A copy with the given fields replaced (``None`` values are ignored)."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain values (``kafka_properties`` as a dict)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["kafka_properties"] = dict(self.kafka_properties)
        out["process_kafka_properties"] = {k: dict(v) for k, v in
                                           self.process_kafka_properties.items()}
        return out

    # --- loading ---------------------------------------------------------

    @staticmethod
    def file_values(path: str | os.PathLike[str]) -> dict[str, Any]:
        """The settings in a TOML file (see the module docstring), unvalidated.

        Raises:
            ValueError: a key that is not a setting, or unparsable TOML.
            OSError: the file cannot be read.
        """
        with open(path, "rb") as fh:
            try:
                data = tomllib.load(fh)
            except tomllib.TOMLDecodeError as exc:
                raise ValueError(f"config file {path}: {exc}") from exc
        if isinstance(data.get("parsley"), dict):
            data = {**data["parsley"], **{k: v for k, v in data.items() if k != "parsley"}}
        known = {f.name for f in fields(ParsleyConfig)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"config file {path}: unknown setting(s) {unknown}; known: "
                             f"{sorted(known)}")
        return data

    @staticmethod
    def env_values(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The settings in ``PARSLEY_*`` environment variables, unvalidated.

        Raises:
            ValueError: a numeric setting that is not an integer.
        """
        env = os.environ if environ is None else environ
        out: dict[str, Any] = {}
        props: dict[str, Any] = {}
        ints = set(_POSITIVE_INTS) | set(_NON_NEGATIVE_INTS) | set(_OPTIONAL_INTS)
        for f in fields(ParsleyConfig):
            if f.name in ("kafka_properties", "process_kafka_properties"):
                continue  # PARSLEY_KAFKA_* below; per-process tables: the file or code
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            if f.name == "refuse_cross_partition_causes":
                if raw.strip().lower() not in ("true", "false"):
                    raise ValueError(f"{ENV_PREFIX}{f.name.upper()}={raw!r} is not true or false")
                out[f.name] = raw.strip().lower() == "true"
            elif f.name == "cross_partition_causes":
                out[f.name] = raw.strip().lower()
            elif f.name in ints:
                try:
                    out[f.name] = int(raw)
                except ValueError:
                    raise ValueError(
                        f"{ENV_PREFIX}{f.name.upper()}={raw!r} is not an integer"
                    ) from None
            else:
                out[f.name] = raw
        for key, raw in env.items():
            if key.startswith(_ENV_KAFKA) and len(key) > len(_ENV_KAFKA):
                props[key[len(_ENV_KAFKA):].lower().replace("_", ".")] = raw
        if props:
            out["kafka_properties"] = props
        return out

    @classmethod
    def load(
        cls,
        config_file: str | os.PathLike[str] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> ParsleyConfig:
        """Build a config from a file, then ``PARSLEY_*`` variables, then ``overrides``.

        Later sources win per setting; ``kafka_properties`` merge key by key.
        ``None`` overrides are ignored (an unset CLI flag).

        Raises:
            ValueError: as the constructor, or a required setting
                (``bootstrap_servers``, ``application_id_prefix``) found nowhere.
        """
        merged: dict[str, Any] = {}
        props: dict[str, Any] = {}
        origin: dict[str, str] = {}
        env = os.environ if environ is None else environ
        env_names = {key[len(_ENV_KAFKA):].lower().replace("_", "."): key
                     for key in env if key.startswith(_ENV_KAFKA) and len(key) > len(_ENV_KAFKA)}
        sources: list[tuple[dict[str, Any], Callable[[str], str]]] = [
            (cls.file_values(config_file) if config_file else {},
             lambda k: f"config file {config_file} [kafka_properties]"),
            (cls.env_values(env), lambda k: f"set by {env_names.get(k, _ENV_KAFKA + '*')}"),
            ({k: v for k, v in overrides.items() if v is not None},
             lambda k: "kafka_properties given in code"),
        ]
        for source, where in sources:
            for key, value in source.items():
                if key == "kafka_properties":
                    for pkey, pvalue in dict(value).items():
                        props[pkey] = pvalue
                        origin[pkey] = where(pkey)
                else:
                    merged[key] = value
        for pkey in props:
            if isinstance(pkey, str) and _owned(pkey) is not None:
                try:
                    cls("unused:0", "unused", kafka_properties={pkey: props[pkey]})
                except ValueError as exc:
                    raise ValueError(f"{exc} ({origin[pkey]})") from None
        for required in ("bootstrap_servers", "application_id_prefix"):
            if required not in merged:
                raise ValueError(
                    f"{required} is not set: give it as {CLI_FLAGS[required]}, as "
                    f"{ENV_PREFIX}{required.upper()}, or as {required} = \"...\" in the "
                    "--config file"
                )
        return cls(**merged, kafka_properties=props)

    @staticmethod
    def property_origins(
        config_file: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> dict[str, str]:
        """Where each Kafka property :meth:`load` would read came from, for messages.

        Returns:
            ``{property: "set by PARSLEY_KAFKA_X" | "config file F [kafka_properties]"}``;
            the later source wins, as in :meth:`load`. Unreadable files give nothing.
        """
        out: dict[str, str] = {}
        if config_file:
            try:
                for key in dict(ParsleyConfig.file_values(config_file).get("kafka_properties")
                                or {}):
                    out[key] = f"config file {config_file} [kafka_properties]"
            except (ValueError, OSError):
                pass
        env = os.environ if environ is None else environ
        for key in env:
            if key.startswith(_ENV_KAFKA) and len(key) > len(_ENV_KAFKA):
                out[key[len(_ENV_KAFKA):].lower().replace("_", ".")] = f"set by {key}"
        return out
