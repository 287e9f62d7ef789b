"""The store-changelog rule: a declared store's changelog must still hold what was written.

Every committed step writes the declared stores, the ordering state and the read
positions in one transaction, so a store changelog that was deleted, recreated or
purged under committed positions loses application state with nothing to replay it
from. Restoring it empty would silently reset the store (docs/failing-closed.md,
``ORDERING_STATE_LOST``; docs/runbooks.md, "Never delete a store's changelog").

The record of what was written is the ordering state's binding of the store
changelog's name to its topic id, committed with the task's next step after it builds
its state. The rule, judged at the bootstrap and at every rebuild of a task's state, is
:func:`judge_store_changelog`'s (docs/architecture.md, "The worker", "Store changelogs").

:func:`judge_store_changelog` is the pure rule; :func:`describe_store_changelog` and
:func:`workers.admin.log_starts` are the admin calls that feed it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Final
from uuid import UUID

from confluent_kafka.admin import AdminClient

from parsley.engine.channel import kafka_topic_id
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.admin import ADMIN_TIMEOUT_S, TopicInfo, describe_topic, log_starts
from workers.kafka_errors import ErrorKind, SubstrateError

__all__ = [
    "ABSENT_ANSWERS",
    "check_task_store_changelogs",
    "describe_store_changelog",
    "judge_store_changelog",
]

ABSENT_ANSWERS: Final = 3
"""Unknown answers, 500 ms apart, before a store changelog counts as absent (as for the
ordering changelog and the identity check, docs/failing-closed.md)."""
ANSWER_SPACING_S: Final = 0.5
"""Seconds between those answers."""


def judge_store_changelog(
    name: str,
    bound: UUID | None,
    found: TopicInfo | None,
    task_count: int,
    starts: Mapping[int, int],
    *,
    app_id: str,
) -> ParsleyFailClosedError | None:
    """The refusal a store changelog's state calls for, or ``None`` (pure).

    Args:
        name: the store changelog ``<prefix>-<process>-<store>-changelog``.
        bound: the topic id the ordering state binds ``name`` to, or ``None``.
        found: the topic as described now, or ``None`` when absent (after
            :data:`ABSENT_ANSWERS` answers).
        task_count: the process's task count (one changelog partition per task).
        starts: log start offset per partition judged (the partitions whose
            state is being restored); partitions not given are not judged.
        app_id: ``<prefix>-<process>``, named in the remedy.

    Returns:
        ``TASK_WIDTH_CHANGED`` when ``found`` has a partition count other than
        ``task_count``; ``ORDERING_STATE_LOST`` when ``bound`` is set and the
        topic is absent, has another id, or a judged partition's log start is
        above 0; else ``None``. The detail names the changelog, its topic id as
        ``kafka-topics`` prints it, and the remedy (docs/runbooks.md).
    """
    remedy = (" If the changelog's records can be restored from a backup, restore them and "
              "start; otherwise reset the process (docs/runbooks.md, \"Resetting a process\": "
              f"kafka-consumer-groups --delete --group {app_id}, then delete its changelogs).")
    if found is not None and found.partitions != task_count:
        return ParsleyFailClosedError(
            Reason.TASK_WIDTH_CHANGED,
            f"store changelog {name} (topic id {kafka_topic_id(found.topic_id)}) has "
            f"{found.partitions} partition(s) but the process runs {task_count} task(s), one "
            "changelog partition each. Restore the declaration, or reset if partitions were "
            "added to the widest received topic.")
    if bound is None:
        return None
    was = f"topic id {kafka_topic_id(bound)}"
    if found is None:
        what = f"this process's store changelog {name} ({was}) does not exist"
    elif found.topic_id != bound:
        what = (f"this process's store changelog {name} was deleted and recreated: it is "
                f"topic id {kafka_topic_id(found.topic_id)} now, the state was written to {was}")
    else:
        purged = sorted((p, s) for p, s in starts.items() if s > 0)
        if not purged:
            return None
        p, start = purged[0]
        what = (f"partition {p} of this process's store changelog {name} ({was}) starts at "
                f"offset {start}: its records below it were purged (kafka-delete-records, or "
                "a cleanup.policy other than compact)")
    return ParsleyFailClosedError(
        Reason.ORDERING_STATE_LOST,
        f"committed steps wrote application state to a declared store, but {what}; "
        "restoring it would silently reset the store." + remedy)


def describe_store_changelog(
    admin: AdminClient,
    name: str,
    *,
    answers: int = ABSENT_ANSWERS,
    spacing_s: float = ANSWER_SPACING_S,
    timeout_s: float = ADMIN_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
) -> TopicInfo | None:
    """Describe ``name``; ``None`` only after ``answers`` unknown answers ``spacing_s`` apart.

    Raises:
        SubstrateError: a describe failed otherwise (classified).
    """
    for attempt in range(answers):
        if attempt:
            sleep(spacing_s)
        info = describe_topic(admin, name, timeout_s=timeout_s)
        if info is not None:
            return info
    return None


def check_task_store_changelogs(
    admin: AdminClient,
    changelogs: Sequence[str],
    bound: Mapping[str, UUID],
    task: int,
    task_count: int,
    *,
    app_id: str,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, UUID]:
    """Judge a task's store changelogs before its stores are restored from them.

    Called at every build of a task's state — the first, a respawn's, an
    abort-and-rebuild's, a rebalance's — so a changelog lost under a running
    process is refused there, as at the bootstrap.

    Args:
        admin: an AdminClient.
        changelogs: the declared stores' changelog topic names.
        bound: the ordering state's name bindings (topic name -> topic id).
        task: the task (= the changelog partition judged).
        task_count: the process's task count.
        app_id: ``<prefix>-<process>``.
        sleep: sleeps between the answers that establish absence.

    Returns:
        changelog name -> its topic id now, to bind in the ordering state.

    Raises:
        ParsleyFailClosedError: ``ORDERING_STATE_LOST`` or ``TASK_WIDTH_CHANGED``
            (:func:`judge_store_changelog`).
        SubstrateError: an admin call failed (classified); an unbound changelog
            that is absent (a store declared since the bootstrap created them).
    """
    ids: dict[str, UUID] = {}
    for name in changelogs:
        found = describe_store_changelog(admin, name, sleep=sleep)
        starts = ({} if found is None or name not in bound or task >= found.partitions
                  else log_starts(admin, name, [task]))
        refusal = judge_store_changelog(name, bound.get(name), found, task_count, starts,
                                        app_id=app_id)
        if refusal is not None:
            raise refusal
        if found is None:
            raise SubstrateError(
                ErrorKind.SUBSTRATE_TRANSIENT,
                f"store changelog {name} does not exist; the start creates it (restart the "
                "process)")
        ids[name] = found.topic_id
    return ids
