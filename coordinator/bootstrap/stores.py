"""Bootstrap step 3 (stores): judge each declared store's changelog before any is created.

A store changelog the ordering state binds, found absent, recreated or purged, is
``ORDERING_STATE_LOST``; one with a partition count other than the task count is
``TASK_WIDTH_CHANGED`` — the rule of :mod:`workers.store_changelogs`
(docs/failing-closed.md). It runs before step 5 creates the changelogs where absent,
so a lost store changelog is never recreated empty by a start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from uuid import UUID

from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.changelog import TaskState
from coordinator.bootstrap.common import StartError
from parsley.declarations import Process, application_id, store_changelog
from workers.admin import log_starts
from workers.kafka_errors import SubstrateError
from workers.store_changelogs import describe_store_changelog, judge_store_changelog

__all__ = ["check_store_changelogs"]


def check_store_changelogs(
    admin: AdminClient,
    prefix: str,
    process: Process,
    task_count: int,
    states: Sequence[TaskState],
    *,
    answers: int,
    spacing_s: float,
    sleep: Callable[[float], None],
) -> None:
    """Judge every declared store's changelog against the ordering state read at start.

    Args:
        admin: an AdminClient.
        prefix: the application id prefix.
        process: the declaration.
        task_count: the task count the declaration induces.
        states: the ordering state per task, as read (empty when the ordering
            changelog does not exist).
        answers: unknown answers before a changelog counts as absent.
        spacing_s: s between those answers.
        sleep: sleeps (tests pass a fake).

    Raises:
        ParsleyFailClosedError: ``ORDERING_STATE_LOST`` or ``TASK_WIDTH_CHANGED``
            (:func:`workers.store_changelogs.judge_store_changelog`).
        StartError: the cluster could not be queried.
    """
    bound: dict[str, UUID] = {}
    for s in states:
        bound.update(s.inspector.name_bindings())
    app_id = application_id(prefix, process.name)
    for store in process.declared_stores:
        name = store_changelog(prefix, process.name, store.name)
        try:
            found = describe_store_changelog(admin, name, answers=answers,
                                             spacing_s=spacing_s, sleep=sleep)
            starts = ({} if found is None or name not in bound
                      else log_starts(admin, name, range(min(found.partitions, task_count))))
        except SubstrateError as exc:
            raise StartError(f"could not describe the store changelog {name}: {exc}") from exc
        refusal = judge_store_changelog(name, bound.get(name), found, task_count, starts,
                                        app_id=app_id)
        if refusal is not None:
            raise refusal
