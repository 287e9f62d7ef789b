"""Bootstrap step 2: resolve declared topics to ids and partition counts (docs/operations.md,
"Running")."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.clients import answer
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    ANSWER_SPACING_S,
    UNKNOWN_ANSWERS,
    StartError,
    not_authorized,
    refuse,
)
from parsley import refusal_shapes as shapes
from parsley.refusals import Reason
from workers.authorization import Grant
from workers.kafka_errors import unknown_topic, unreachable

__all__ = [
    "ResolvedTopic",
    "describe_changelog",
    "kafka_topic_id",
    "resolve_topics",
]


@dataclass(frozen=True, slots=True)
class ResolvedTopic:
    """A declared topic as the cluster describes it.

    Attributes:
        name: the topic name.
        topic_id: its Kafka topic id (never the zero UUID).
        partitions: its partition count, >= 1.
        replicas: the fewest replicas any of its partitions has (0: not described).
    """

    name: str
    topic_id: UUID
    partitions: int
    replicas: int = 0


def _to_uuid(raw: object) -> UUID | None:
    if raw is None:
        return None
    msb = raw.get_most_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    lsb = raw.get_least_significant_bits() & (2**64 - 1)  # type: ignore[attr-defined]
    return UUID(int=(msb << 64) | lsb)


def _describe_once(
    admin: AdminClient, names: Sequence[str], timeout_s: float,
    operations: Mapping[str, tuple[str, ...]] | None = None,
) -> tuple[dict[str, ResolvedTopic], list[str]]:
    futures = admin.describe_topics(TopicCollection(list(names)), request_timeout=timeout_s)
    found: dict[str, ResolvedTopic] = {}
    unknown: list[str] = []
    for name in names:
        try:
            desc = answer(futures[name], f"describing declared topic '{name}'", timeout_s)
        except KafkaException as exc:
            if unknown_topic(exc):
                unknown.append(name)
                continue
            if unreachable(exc):
                raise StartError(
                    f"could not describe declared topic '{name}': no broker answered "
                    f"({exc.args[0].name()}); check the address and that the brokers are up, "
                    "then retry"
                ) from exc
            ops = (operations or {}).get(name, ("Describe",))
            refusal = not_authorized(exc, f"describing topic '{name}'", Grant("Topic", name, ops))
            if refusal is not None:
                raise refusal from exc
            raise StartError(
                f"could not describe declared topic '{name}' ({exc}); restore connectivity "
                "or grant Describe on the topic, then retry"
            ) from exc
        topic_id = _to_uuid(getattr(desc, "topic_id", None))
        if topic_id is None or topic_id.int == 0:
            raise refuse(
                Reason.SUBSTRATE_MISCONFIGURED,
                f"{shapes.substrate_no_topic_id(name)}. Upgrade the brokers.",
            )
        found[name] = ResolvedTopic(name, topic_id, len(desc.partitions),
                                    min((len(p.replicas) for p in desc.partitions), default=0))
    return found, unknown


def resolve_topics(
    admin: AdminClient,
    names: Iterable[str],
    *,
    answers: int = UNKNOWN_ANSWERS,
    spacing_s: float = ANSWER_SPACING_S,
    timeout_s: float = ADMIN_TIMEOUT_S,
    sleep: Callable[[float], None] = time.sleep,
    operations: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, ResolvedTopic]:
    """Resolve topic names to ids and partition counts (docs/architecture.md, "The bootstrap",
    step 2).

    A name is concluded unknown only after ``answers`` consecutive "unknown"
    answers ``spacing_s`` apart (a broker's metadata may lag a creation).

    Args:
        admin: an AdminClient.
        names: topic names (duplicates ignored).
        answers: unknown answers needed, >= 1.
        spacing_s: s between answers.
        timeout_s: bound on each describe, s.
        sleep: sleeps ``s`` seconds (tests pass a fake).
        operations: per topic, the ACL operations a refusal names as the grant (``Read``
            for a received topic, ``Write`` for a sent one; each implies the Describe the
            call needs); default ``Describe``.

    Returns:
        ``{name: ResolvedTopic}`` for every name.

    Raises:
        StartError: a topic still unknown after the answers (naming it), or a
            describe that failed otherwise (a timeout).
        NotAuthorized: the principal may not describe a topic (``SUBSTRATE_MISCONFIGURED``
            naming the grant: :mod:`workers.authorization`).
        ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` for a topic without
            a topic id ("... below the supported 3.7.0 floor ...", docs/runbooks.md,
            SUBSTRATE_MISCONFIGURED).
    """
    pending = sorted(set(names))
    resolved: dict[str, ResolvedTopic] = {}
    for attempt in range(answers):
        if not pending:
            break
        if attempt:
            sleep(spacing_s)
        found, pending = _describe_once(admin, pending, timeout_s, operations)
        resolved.update(found)
    if pending:
        raise StartError(
            f"declared topic(s) {pending} do not exist ({answers} answers "
            f"{spacing_s * 1000:.0f} ms apart); create them, or remove them from the "
            "declaration, then retry"
        )
    return resolved


def describe_changelog(
    admin: AdminClient,
    name: str,
    *,
    answers: int,
    spacing_s: float,
    timeout_s: float,
    sleep: Callable[[float], None],
) -> ResolvedTopic | None:
    """The ordering changelog, or ``None`` after ``answers`` unknown answers.

    Raises:
        NotAuthorized: the principal may not describe it (naming Read and Write on it).
    """
    for attempt in range(answers):
        if attempt:
            sleep(spacing_s)
        found, _unknown = _describe_once(admin, [name], timeout_s, {name: ("Read", "Write")})
        if name in found:
            return found[name]
    return None


def kafka_topic_id(topic_id: UUID) -> str:
    """A topic id as Kafka prints it (``Uuid.toString``: URL-safe base64, no padding),
    the form ``kafka-topics --describe`` shows as ``TopicId``."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
