"""The gateway's topics on the cluster: created when missing, and resolved to topic ids once.

A token is keyed by topic id, and the edge sees topic names (a delivery report, a
handler's delivery), so the names are resolved once at startup with the admin client's
``describe_topics`` (docs/session.md, "The write path"). A topic recreated under its name
gets a new id, and tokens naming the old one are refused as unknown channels.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = ["ensure_topics", "topic_ids"]


def ensure_topics(admin: AdminClient, names: Iterable[str], *, partitions: int = 1,
                  timeout_s: float = 30.0) -> None:
    """Create each topic that does not exist yet, with ``partitions`` partitions.

    Raises:
        KafkaException: a creation failed for any reason but the topic existing already.
    """
    futures = admin.create_topics([NewTopic(n, partitions, -1) for n in names],
                                  request_timeout=timeout_s)
    for future in futures.values():
        try:
            future.result(timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise


def topic_ids(admin: AdminClient, names: Iterable[str], *,
              timeout_s: float = 30.0) -> dict[str, UUID]:
    """Each topic's Kafka topic id.

    Returns:
        ``{name: uuid.UUID}`` for every name.

    Raises:
        KafkaException: a topic does not exist, or the describe failed.
        ValueError: a topic without an id (brokers before 3.7.0 cannot name a channel).
    """
    wanted = list(dict.fromkeys(names))
    futures = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout_s)
    ids: dict[str, UUID] = {}
    for name in wanted:
        raw = futures[name].result(timeout_s).topic_id
        msb = raw.get_most_significant_bits() & (2**64 - 1)
        lsb = raw.get_least_significant_bits() & (2**64 - 1)
        topic_id = UUID(int=(msb << 64) | lsb)
        if topic_id.int == 0:
            raise ValueError(f"topic '{name}' has no topic id: the brokers are too old")
        ids[name] = topic_id
    return ids
