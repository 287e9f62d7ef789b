"""The coordinators' consumer group of one process (``--join``): its name and internal topic,
its members' consumer config, and the refusal of a ``--join`` start beside a coordinator
started without it (docs/operations.md, "Several coordinators").
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Final

from coordinator.bootstrap import (
    ResolvedTopic,
    StartError,
    resolve_topics,
)
from coordinator.bootstrap.clients import new_admin
from coordinator.bootstrap.common import check_reachable, refuse
from coordinator.bootstrap.group import group_members, is_own_member, session_timeout_ms
from coordinator.config import ParsleyConfig
from parsley import refusal_shapes as shapes
from parsley.declarations import Process, application_id, task_width
from parsley.refusals import Reason
from workers.changelog import ensure_changelog_topic
from workers.kafka_errors import SubstrateError
from workers.positions import GroupMember

__all__ = [
    "COORDINATORS_SUFFIX",
    "MAX_POLL_INTERVAL_MS",
    "coordinators_group",
    "ensure_coordinators_topics",
    "max_poll_interval_ms",
    "membership_consumer_config",
    "plain_coordinator_workers",
    "refuse_beside_plain_coordinator",
]

log = logging.getLogger("parsley.coordinator.membership")

COORDINATORS_SUFFIX: Final = "-__parsley.coordinators"
"""Appended to the application id: the coordinators' group and its topic."""
MAX_POLL_INTERVAL_MS: Final = 300_000
"""``max.poll.interval.ms`` of the membership consumer, set explicitly: the membership
thread polls every :data:`POLL_S` s, except while a revocation callback stops revoked
workers (at most the stop deadline, which :func:`max_poll_interval_ms` keeps below it);
bootstraps run on a thread of their own, never between two polls."""

def max_poll_interval_ms(stop_deadline_s: float) -> int:
    """The membership consumer's ``max.poll.interval.ms`` (pure): :data:`MAX_POLL_INTERVAL_MS`,
    or more when the revocation callback's stop deadline (``stop_deadline_s``, s) needs it
    (twice the deadline plus 30 s)."""
    return max(MAX_POLL_INTERVAL_MS, int((2 * stop_deadline_s + 30) * 1000))


def coordinators_group(prefix: str, process: str) -> str:
    """``<prefix>-<process>-__parsley.coordinators``: the coordinators' consumer group of
    a process, and the name of its internal topic (pure)."""
    return application_id(prefix, process) + COORDINATORS_SUFFIX


def membership_consumer_config(config: ParsleyConfig, process: str,
                               client_id: str | None = None,
                               stop_deadline_s: float = 30.0) -> dict[str, Any]:
    """The coordinators' group consumer of ``process`` (pure).

    Returns:
        A librdkafka config: group :func:`coordinators_group`, the
        ``cooperative-sticky`` assignor (KIP-429), the workers' ``session.timeout.ms``
        (:func:`~coordinator.bootstrap.group.session_timeout_ms`), no auto commit; the
        user's unprefixed and ``consumer.`` properties apply as for every consumer;
        ``client_id`` names this coordinator to its peers (:mod:`coordinator.runtime.peers`);
        ``max.poll.interval.ms`` from :func:`max_poll_interval_ms` of ``stop_deadline_s``
        (s).
    """
    from workers.kafka_config import _select  # the client-prefix rule workers apply

    props = _select(dict(config.kafka_properties), "consumer")
    for owned in ("group.instance.id", "transactional.id", "isolation.level"):
        props.pop(owned, None)
    group = coordinators_group(config.application_id_prefix, process)
    props.update({
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": group,
        "client.id": client_id or f"parsley-coordinator-{group}-{uuid.uuid4().hex[:8]}",
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": session_timeout_ms(config.kafka_properties),
        "max.poll.interval.ms": max_poll_interval_ms(stop_deadline_s),
        "enable.auto.commit": False,
        "auto.offset.reset": "latest",
        "allow.auto.create.topics": False,
    })
    return props


def ensure_coordinators_topics(config: ParsleyConfig, processes: Sequence[Process]
                               ) -> dict[str, ResolvedTopic]:
    """Resolve every declared topic and create each process's coordinators' topic where
    absent (one partition per task; an idempotent create).

    Returns:
        Every declared topic, resolved.

    Raises:
        StartError: the cluster could not be queried, a topic could not be created, or
            a coordinators' topic exists with another partition count than the
            process's task count (delete it while no coordinator runs).
    """
    admin = new_admin(config)
    try:
        check_reachable(admin, config.bootstrap_servers)
        names = {c.name for p in processes
                 for c in (*(i.channel for i in p.inputs), *p.outputs)}
        topics = resolve_topics(admin, names)
        for p in processes:
            width = task_width({t: topics[t].partitions for t in p.received_topics})
            name = coordinators_group(config.application_id_prefix, p.name)
            try:
                info, _created = ensure_changelog_topic(
                    admin, name, width, replication_factor=config.changelog_replication_factor,
                    min_insync_replicas=config.changelog_min_insync_replicas)
            except SubstrateError as exc:
                raise StartError(f"could not create the coordinators' topic {name}: "
                                 f"{exc}") from exc
            if info.partitions != width:
                raise StartError(
                    f"the coordinators' topic {name} has {info.partitions} partition(s) but "
                    f"process '{p.name}' has {width} task(s); stop every coordinator of the "
                    f"prefix, delete the topic (kafka-topics --bootstrap-server "
                    f"{config.bootstrap_servers} --delete --topic {name}), then start again")
        return topics
    finally:
        del admin


def plain_coordinator_workers(app_id: str, workers: Sequence[GroupMember] | None,
                              coordinators: Sequence[GroupMember] | None
                              ) -> list[GroupMember] | None:
    """The members of the workers' group ``app_id`` that a coordinator not started with
    ``--join`` runs (pure): this process's own workers (:func:`is_own_member`) while its
    coordinators' group has no member; ``None`` when either group could not answer yet.
    """
    if workers is None or coordinators is None:
        return None
    if coordinators:
        return []
    return [m for m in workers if is_own_member(app_id, m)]


def refuse_beside_plain_coordinator(
    config: ParsleyConfig, processes: Sequence[Process], window_s: float, *,
    admin: Any = None, sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic, poll_s: float = 0.5,
) -> None:
    """Refuse a ``--join`` start while a coordinator that was not started with ``--join``
    runs a process of the same prefix (docs/operations.md, "Several coordinators").

    Such a coordinator's workers are members of the workers' group with this process's
    own instance ids while the coordinators' group has no member; a ``--join``
    coordinator would get every task and fence them. Workers of a ``--join``
    coordinator that just stopped leave within their session timeout, so the check
    waits up to ``window_s`` s (twice the session timeout) for either group to change.

    Raises:
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` naming the workers still
            there after ``window_s`` with no coordinator in the coordinators' group.
        StartError: a group could not be described.
    """
    client = admin if admin is not None else new_admin(config)
    prefix = config.application_id_prefix
    deadline = clock() + window_s
    announced = False
    while True:
        found: dict[str, list[GroupMember] | None] = {}
        for p in processes:
            app = application_id(prefix, p.name)
            found[app] = plain_coordinator_workers(
                app, group_members(client, app),
                group_members(client, coordinators_group(prefix, p.name)))
        if all(v == [] for v in found.values()):
            return
        now = clock()
        if now >= deadline:
            app, members = next((a, m) for a, m in found.items() if m != [])
            named = "; ".join(m.describe() for m in members or [])
            raise refuse(
                Reason.SUBSTRATE_MISCONFIGURED,
                f"{shapes.substrate_group_conflict(f'{window_s:g} s')}: a coordinator "
                f"started without --join runs group '{app}' (its workers "
                f"are members: [{named}]) and group '{app}{COORDINATORS_SUFFIX}' has no "
                f"coordinator member after {window_s:g} s; a --join coordinator would take "
                f"its tasks. Stop that coordinator (parsley-coordinator stop against it), "
                f"then start every coordinator of the prefix with --join")
        if not announced:
            log.warning("workers of group(s) %s run with no coordinator in their "
                        "coordinators' group; waiting up to %.0f s for them to leave",
                        sorted(a for a, m in found.items() if m != []), deadline - now)
            announced = True
        sleep(min(poll_s, max(0.05, deadline - now)))
