"""A written topic with one replica on a cluster of several brokers: warned at the start.

Kafka's transaction coordinator writes each transaction's commit or abort marker to every
partition the transaction wrote, and skips a partition whose leader it cannot find, taking
it for a deleted topic (its log: "Couldn't find leader endpoint for partitions ... these
partitions are likely deleted already and hence can be skipped"; the evidence:
docs/upstream/kafka-transaction-marker-skip.md). A partition whose only replica
is on a broker that is down has no leader. Its records of that transaction then stay open
on the partition until the producer's next marker there closes them: a later commit makes
an aborted transaction's records visible (delivered twice, or state counted twice), a
later abort hides a committed one's (lost). No client can see it happen.

A task's transactions write its sent topics and its changelogs (the ordering changelog and
each store changelog). A new changelog is created replicated
(:func:`workers.changelog.changelog_replication`), but one that exists is never altered
(one created on a single broker, or with ``changelog_replication_factor`` 1), and a sent
topic is the user's: each is warned of, not refused, since on a single broker a single
replica is the only kind there is (docs/operations.md, "Replication and
min.insync.replicas").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka.admin import AdminClient

from workers.changelog import broker_count

__all__ = ["unreplicated", "warn_unreplicated"]

log = logging.getLogger("parsley.bootstrap")


def unreplicated(replicas: Mapping[str, int], brokers: int) -> list[str]:
    """The topics of ``replicas`` (name -> the fewest replicas of its partitions, 0 for not
    described) that have a single-replica partition, on a cluster of ``brokers`` >= 2,
    sorted; none on a single broker (pure; the rule: the module docstring).
    """
    if brokers < 2:
        return []
    return sorted(name for name, n in replicas.items() if n == 1)


def warn_unreplicated(admin: AdminClient, app_id: str, replicas: Mapping[str, int]) -> list[str]:
    """Log a WARNING naming each topic :func:`unreplicated` finds among the topics the
    process writes in its transactions (``replicas``: name -> fewest replicas); return them.

    Never raises: a failed count of the brokers is logged at INFO and nothing is warned of
    (a warning's query must not stop a start).
    """
    if 1 not in replicas.values():
        return []
    try:
        brokers = broker_count(admin)
    except Exception as exc:  # any failure: the start goes on without the warning
        log.info("%s: not checked whether the topics it writes are replicated (counting the "
                 "brokers failed: %s)", app_id, exc)
        return []
    names = unreplicated(replicas, brokers)
    if names:
        log.warning(
            "%s: topic(s) %s, written in its transactions, have a partition with a single "
            "replica on a cluster of %d brokers: while that broker is down, Kafka skips the "
            "partition's transaction markers, and a transaction's records there can later "
            "show twice or not at all. Replicate them (replication factor 3, "
            "min.insync.replicas 2; docs/operations.md, \"Replication and "
            "min.insync.replicas\")", app_id, names, brokers)
    return names
