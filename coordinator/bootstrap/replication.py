"""A sent topic with one replica on a cluster of several brokers: warned at the start.

Kafka's transaction coordinator writes each transaction's commit or abort marker to every
partition the transaction wrote, and skips a partition whose leader it cannot find, taking
it for a deleted topic (its log: "Couldn't find leader endpoint for partitions ... these
partitions are likely deleted already and hence can be skipped"; KAFKA-5202). A partition
whose only replica is on a broker that is down has no leader. Its records of that
transaction then stay open on the partition until the producer's next marker there closes
them: a later commit makes an aborted transaction's records visible (delivered twice), a
later abort hides a committed one's (lost). No client can see it happen.

With two or more replicas a partition keeps a leader through one broker's restart or
death, so the marker lands. The changelogs are replicated by the bootstrap itself
(:func:`workers.changelog.changelog_replication`); a sent topic is the user's, so a
single-replica one is warned of, not refused: on a single-broker cluster it is the only
kind there is (docs/operations.md, "Replication and min.insync.replicas").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.resolve import ResolvedTopic
from workers.changelog import broker_count

__all__ = ["unreplicated", "warn_unreplicated_sent_topics"]

log = logging.getLogger("parsley.bootstrap")


def unreplicated(sent: Iterable[ResolvedTopic], brokers: int) -> list[str]:
    """The names of ``sent`` topics with a single-replica partition, on a cluster of
    ``brokers`` >= 2 (pure; none on a single broker, or for a topic not described).

    Source: the module docstring (Kafka's transaction marker skip).
    """
    if brokers < 2:
        return []
    return sorted(t.name for t in sent if t.replicas == 1)


def warn_unreplicated_sent_topics(admin: AdminClient, app_id: str,
                                  sent: Iterable[ResolvedTopic]) -> list[str]:
    """Log a WARNING naming each sent topic :func:`unreplicated` finds; return the names.

    Raises:
        SubstrateError: the cluster could not be described (classified).
    """
    sent = list(sent)
    if not any(t.replicas == 1 for t in sent):
        return []
    names = unreplicated(sent, broker_count(admin))
    if names:
        log.warning(
            "%s: sent topic(s) %s have a partition with a single replica on a cluster of "
            "several brokers: while that broker is down, Kafka skips the partition's "
            "transaction markers, and a transaction's records there can later show twice "
            "or not at all. Replicate them (replication factor 3, min.insync.replicas 2; "
            "docs/operations.md, \"Replication and min.insync.replicas\")", app_id, names)
    return names
