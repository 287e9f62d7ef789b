"""The coordinators of a prefix as one application: who runs which task, one status, one stop.

With ``--join`` (docs/operations.md, "Several coordinators") every coordinator's member of
a process's coordinators' group carries a ``client.id`` naming it
(:func:`coordinator_client_id`): ``parsley-coordinator|<host>|<pid>|<control endpoint>``.
A describe of the group (bounded) then says which coordinator is assigned which task,
and where to ask it. So ``status`` against any coordinator shows every task of the
application: its own tasks from its supervisor, a peer's from the peer's control socket
(``{"op": "status", "local": true}``), each task with the ``coordinator`` (host, pid,
endpoint) that runs it, and the ``coordinators`` list; and ``stop --all`` asks every peer
to stop, together with this one.

A peer whose endpoint cannot be reached from here (an ``ipc://`` socket on another
machine, or a ``tcp://`` endpoint bound to a wildcard port) is listed with its assigned
tasks and ``"answered": false``; its tasks then have no entry.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from coordinator.bootstrap.clients import new_admin
from coordinator.bootstrap.common import StartError
from coordinator.config import ParsleyConfig
from coordinator.control.status import ProcessState, aggregate_state
from coordinator.control.status_socket import NoReplyError, request
from coordinator.runtime.coordinators_group import coordinators_group

__all__ = [
    "CLIENT_ID_TAG",
    "CoordinatorRef",
    "PeerView",
    "application_status",
    "coordinator_client_id",
    "describe_coordinators",
    "parse_client_id",
    "stop_peers",
    "this_coordinator",
]

log = logging.getLogger("parsley.coordinator.peers")

CLIENT_ID_TAG: Final = "parsley-coordinator"
"""The first field of a coordinator's ``client.id`` in its coordinators' groups."""
PEER_TIMEOUT_S: Final = 3.0
"""s to wait for a peer's status reply."""
DESCRIBE_BOUND_S: Final = 5.0
"""s the describe of every coordinators' group may take in all: our own bound, on the
futures (:func:`describe_coordinators`), never the client library's."""
LIBRARY_REQUEST_TIMEOUT_S: Final = 2 * DESCRIBE_BOUND_S
"""The ``request_timeout`` the describe API is given: above :data:`DESCRIBE_BOUND_S`, so
that our bound, not the library's, ends the wait."""


@dataclass(frozen=True, slots=True)
class CoordinatorRef:
    """One coordinator: the host it runs on, its pid and its control endpoint."""

    host: str
    pid: int
    endpoint: str

    def to_json(self) -> dict[str, Any]:
        """``{"host", "pid", "endpoint"}``."""
        return {"host": self.host, "pid": self.pid, "endpoint": self.endpoint}


def coordinator_client_id(ref: CoordinatorRef) -> str:
    """``parsley-coordinator|<host>|<pid>|<endpoint>`` (pure)."""
    return f"{CLIENT_ID_TAG}|{ref.host}|{ref.pid}|{ref.endpoint}"


def parse_client_id(client_id: str) -> CoordinatorRef | None:
    """Inverse of :func:`coordinator_client_id`; ``None`` for any other client id (pure)."""
    parts = client_id.split("|", 3)
    if len(parts) != 4 or parts[0] != CLIENT_ID_TAG or not parts[2].isdigit():
        return None
    return CoordinatorRef(parts[1], int(parts[2]), parts[3])


def this_coordinator(endpoint: str | None) -> CoordinatorRef:
    """This coordinator's :class:`CoordinatorRef` (``endpoint`` ``""`` when it serves none)."""
    return CoordinatorRef(socket.gethostname(), os.getpid(), endpoint or "")


@dataclass(frozen=True, slots=True)
class PeerView:
    """One coordinator as the coordinators' groups show it.

    Attributes:
        ref: who it is.
        tasks: ``{process: task indexes assigned to it}``.
    """

    ref: CoordinatorRef
    tasks: Mapping[str, tuple[int, ...]]


def describe_coordinators(config: ParsleyConfig, processes: Sequence[str]
                          ) -> list[PeerView]:
    """Every coordinator in the coordinators' groups of ``processes``, with its tasks.

    Returns:
        One :class:`PeerView` per coordinator (members whose client id is not a
        coordinator's are left out), sorted by host and pid.

    Every describe answers within :data:`DESCRIBE_BOUND_S` s in all (a deadline over
    the futures; the library's own ``request_timeout`` is set above it).

    Raises:
        KafkaException: a describe failed.
        coordinator.bootstrap.StartError: no answer within the bound.
    """
    admin = new_admin(config)
    groups = {coordinators_group(config.application_id_prefix, p): p for p in processes}
    found: dict[CoordinatorRef, dict[str, tuple[int, ...]]] = {}
    try:
        deadline = time.monotonic() + DESCRIBE_BOUND_S
        futures = admin.describe_consumer_groups(list(groups),
                                                 request_timeout=LIBRARY_REQUEST_TIMEOUT_S)
        for group, process in groups.items():
            desc = _within(futures[group], f"describing group '{group}'", deadline)
            for m in desc.members or ():
                ref = parse_client_id(str(m.client_id))
                if ref is None:
                    continue
                tps = m.assignment.topic_partitions if m.assignment else []
                found.setdefault(ref, {})[process] = tuple(sorted(tp.partition for tp in tps))
    finally:
        del admin
    return [PeerView(ref, tasks) for ref, tasks in sorted(
        found.items(), key=lambda kv: (kv[0].host, kv[0].pid))]


def _within(future: Any, what: str, deadline: float) -> Any:
    """``future.result()`` by ``deadline`` (monotonic s).

    Raises:
        KafkaException: the describe failed.
        coordinator.bootstrap.StartError: no answer by the deadline.
    """
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except concurrent.futures.TimeoutError as exc:
        raise StartError(f"{what}: no answer within {DESCRIBE_BOUND_S:g} s") from exc


def _ask(ref: CoordinatorRef, payload: Mapping[str, Any], timeout_s: float
         ) -> dict[str, Any] | None:
    if not ref.endpoint or "*" in ref.endpoint:
        return None
    try:
        reply = request(ref.endpoint, payload, timeout_s=timeout_s)
    except (NoReplyError, OSError, ValueError):
        return None
    except Exception:  # a zmq error on an endpoint this host cannot use
        return None
    return reply if reply.get("outcome") == "OK" else None


def application_status(config: ParsleyConfig, me: CoordinatorRef, local: Mapping[str, Any],
                       task_counts: Mapping[str, int]) -> dict[str, Any]:
    """The status of the whole application: ``local`` (this coordinator's status JSON,
    ``{"processes": ...}``) merged with every peer's.

    Returns:
        ``{"processes": {name: process JSON over all coordinators}, "coordinators":
        [{"host", "pid", "endpoint", "tasks": {process: [i]}, "answered", "self"}]}``;
        each task entry gains ``"coordinator": {"host", "pid", "endpoint"}``. A
        process's state is ``STOPPED`` (with that coordinator's reason and detail) when
        any coordinator stopped it, else aggregated over its ``task_counts`` tasks
        (one without an entry counts as ``STARTING``); ``restarts`` add up; the
        process is ``caught_up`` when ``RUNNING`` and every task entry is.
    """
    try:
        peers = describe_coordinators(config, list(task_counts))
    except Exception as exc:  # the cluster cannot say: this coordinator's view only
        log.warning("status: could not describe the coordinators' groups: %s", exc)
        peers = []
    docs: list[tuple[CoordinatorRef, Mapping[str, Any] | None, bool]] = [(me, local, True)]
    listed = [me]
    for peer in peers:
        if peer.ref == me:
            continue
        reply = _ask(peer.ref, {"op": "status", "local": True}, PEER_TIMEOUT_S)
        docs.append((peer.ref, None if reply is None else reply.get("status"), False))
        listed.append(peer.ref)
    assigned = {p.ref: p.tasks for p in peers}
    processes: dict[str, dict[str, Any]] = {}
    for name, count in task_counts.items():
        tasks: dict[int, dict[str, Any]] = {}
        stopped: dict[str, Any] | None = None
        restarts = 0
        for ref, doc, _mine in docs:
            proc = None if doc is None else doc.get("processes", {}).get(name)
            if proc is None:
                continue
            restarts += int(proc.get("restarts", 0))
            if proc.get("state") == ProcessState.STOPPED.value and stopped is None \
                    and (proc.get("refusal_reason") or proc.get("failure_detail")):
                stopped = dict(proc)
            for t in proc.get("tasks", ()):
                entry = dict(t)
                entry["coordinator"] = ref.to_json()
                tasks.setdefault(int(entry["task"]), entry)
        if stopped is not None:
            state, reason, detail = (ProcessState.STOPPED, stopped.get("refusal_reason"),
                                     stopped.get("failure_detail"))
        else:
            state = aggregate_state(
                None if i not in tasks else str(tasks[i].get("state")) for i in range(count))
            reason, detail = None, None
        rows = [tasks[i] for i in sorted(tasks)]
        processes[name] = {"state": state.value, "refusal_reason": reason,
                           "failure_detail": detail, "restarts": restarts, "tasks": rows,
                           "caught_up": state is ProcessState.RUNNING
                           and all(bool(t.get("caught_up")) for t in rows)}
    coordinators = []
    for ref, doc, mine in docs:
        coordinators.append({**ref.to_json(), "self": mine, "answered": doc is not None,
                             "tasks": {p: list(t) for p, t in assigned.get(ref, {}).items()}})
    return {"processes": processes, "coordinators": coordinators}


def stop_peers(config: ParsleyConfig, me: CoordinatorRef, processes: Sequence[str],
               deadline_s: float, stop_self: Callable[[], Mapping[str, Any]]
               ) -> dict[str, Any]:
    """``stop --all``: ask every peer coordinator to stop, and stop this one, together.

    Args:
        config: the configuration.
        me: this coordinator.
        processes: the process names (their coordinators' groups list the peers).
        deadline_s: each coordinator's SIGTERM-to-SIGKILL deadline, s.
        stop_self: stops this coordinator, returning its stop reply's fields.

    Returns:
        ``{"peers": [{"host", "pid", "endpoint", "answered", "shutdown"}]}`` and this
        coordinator's own reply fields.
    """
    try:
        peers = [p.ref for p in describe_coordinators(config, processes) if p.ref != me]
    except Exception as exc:  # the cluster cannot say: this coordinator alone
        log.warning("stop --all: could not describe the coordinators' groups: %s", exc)
        peers = []
    replies: dict[CoordinatorRef, dict[str, Any] | None] = {}

    def one(ref: CoordinatorRef) -> None:
        replies[ref] = _ask(ref, {"op": "stop", "deadline_s": deadline_s}, deadline_s + 30.0)

    threads = [threading.Thread(target=one, args=(ref,), daemon=True) for ref in peers]
    for th in threads:
        th.start()
    own = dict(stop_self())
    for th in threads:
        th.join(deadline_s + 35.0)
    own["peers"] = [{**ref.to_json(), "answered": replies.get(ref) is not None,
                     "shutdown": (replies.get(ref) or {}).get("shutdown")} for ref in peers]
    return own
