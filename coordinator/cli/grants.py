"""The ACLs a process needs on a secured cluster, and a reset's, as grants and as commands (pure).

:func:`process_grants` lists the rights the principal of a process's coordinator and
workers needs, one :class:`~workers.authorization.Grant` per resource and operation set,
none implied by another (Read and Write imply Describe: Kafka's documentation,
"Authorization and ACLs"); :func:`reset_grants` what ``parsley-coordinator reset`` needs
besides. :func:`commands` renders them as ``kafka-acls`` command lines, grouping resources
that take the same operations. docs/operations.md, "ACLs", lists the same rights (a test
checks the two agree); a right the cluster refuses stops the process naming it
(:mod:`workers.authorization`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from coordinator.runtime.coordinators_group import coordinators_group
from parsley.declarations import Process, application_id, ordering_changelog, store_changelog
from workers.authorization import Grant, kafka_acls

__all__ = ["CHANGELOG_OPERATIONS", "commands", "process_grants", "reset_grants"]

CHANGELOG_OPERATIONS: Final = ("Read", "Write", "Create", "DescribeConfigs")
"""On each changelog: read at a start (state), write in every transaction, create at the
first start (not needed once it exists), read its configs at every start (the
``cleanup.policy`` and record-size checks)."""


def _changelogs(prefix: str, process: Process) -> list[str]:
    return [ordering_changelog(prefix, process.name),
            *(store_changelog(prefix, process.name, s.name) for s in process.declared_stores)]


def process_grants(prefix: str, process: Process, *, join: bool = False) -> list[Grant]:
    """Every right ``process`` needs under ``prefix`` (docs/operations.md, "ACLs").

    Read on each received topic; Write on each sent one; Read, Write, Create and
    DescribeConfigs on each changelog; Read on the group ``<prefix>-<process>``; Write on
    the transactional ids prefixed ``<prefix>-<process>-task-``. With ``join`` (several
    coordinators, ``run --join``): Read, Create and DescribeConfigs on the coordinators'
    topic and Read on their group, both ``<prefix>-<process>-__parsley.coordinators``.
    """
    app = application_id(prefix, process.name)
    sent = {c.name for c in process.outputs}
    grants: list[Grant] = []
    for topic in sorted({*process.received_topics, *sent}):
        ops = tuple(op for op, has in (("Read", topic in process.received_topics),
                                       ("Write", topic in sent)) if has)
        grants.append(Grant("Topic", topic, ops))
    grants += [Grant("Topic", name, CHANGELOG_OPERATIONS) for name in _changelogs(prefix, process)]
    grants.append(Grant("Group", app, ("Read",)))
    grants.append(Grant("TransactionalId", f"{app}-task-", ("Write",), prefixed=True))
    if join:
        members = coordinators_group(prefix, process.name)
        grants.append(Grant("Topic", members, ("Read", "Create", "DescribeConfigs")))
        grants.append(Grant("Group", members, ("Read",)))
    return grants


def reset_grants(prefix: str, process: Process) -> list[Grant]:
    """What ``parsley-coordinator reset`` of ``process`` needs besides
    :func:`process_grants`: Delete on each changelog and on the group."""
    return [*(Grant("Topic", name, ("Delete",)) for name in _changelogs(prefix, process)),
            Grant("Group", application_id(prefix, process.name), ("Delete",))]


def commands(grants: Iterable[Grant], principal: str, bootstrap: str | None = None,
             command_config: str | None = None) -> list[str]:
    """One ``kafka-acls --add`` command line per resource type, operation set and pattern,
    naming every resource of the group (first-seen order).

    Args:
        grants: the rights.
        principal: ``User:<name>``.
        bootstrap: ``--bootstrap-server``; default a placeholder.
        command_config: the operator's admin client properties (``--command-config``).
    """
    grouped: dict[tuple[str, tuple[str, ...], bool], list[str]] = {}
    for g in grants:
        grouped.setdefault((g.resource, g.operations, g.prefixed), []).append(g.name or "")
    return [kafka_acls(resource, names, ops, principal, bootstrap, command_config,
                       prefixed=prefixed)
            for (resource, ops, prefixed), names in grouped.items()]
