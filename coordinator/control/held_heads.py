"""A stopped process's held heads, read from its changelog, their blockers classed (``inspect``).

The bootstrap's read of the ordering changelog keeps no held bodies
(:class:`parsley.inspector.OrderingStateInspector`), so for a partition that holds messages
:func:`held_heads` reads it once more, keeping only each held channel's head record. The
head's causes go through the decision rule (docs/model.md, "The decision rule") against the
settled positions the state records (a held channel's head − 1, else its coverage) on the
channels the task receives (task *i* receives partition *i* of every received topic: the
group's committed partitions of that index, since the bootstrap commits one for each). Each
blocker is then classed (:func:`parsley.status.classify_blocker`; docs/runbooks.md, "A message
is held and not moving") from its partition's last stable offset and log end, listed now,
with the group's committed offset as the reader's position.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.bootstrap.common import ADMIN_TIMEOUT_S, StartError
from parsley.engine import state_codec as sc
from parsley.engine.channel import ChannelId, kafka_topic_id
from parsley.engine.deliverability import Held, decide
from parsley.inspector import OrderingStateInspector
from parsley.status import ChannelFigures, HoldClass, classify_blocker
from workers.admin import answer
from workers.changelog import read_partition
from workers.kafka_errors import SubstrateError

__all__ = ["committed_offsets", "held_heads"]


def committed_offsets(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    """Every offset ``group`` has committed: ``{(topic, partition): offset}``.

    Raises:
        StartError: the listing failed or got no answer.
    """
    request = [ConsumerGroupTopicPartitions(group)]
    try:
        got = answer(admin.list_consumer_group_offsets(request, request_timeout=ADMIN_TIMEOUT_S)
                     [group], ADMIN_TIMEOUT_S, f"listing the committed offsets of {group}")
    except (KafkaException, SubstrateError) as exc:
        raise StartError(f"could not list the committed offsets of group '{group}': "
                         f"{exc}") from exc
    return {(tp.topic, tp.partition): int(tp.offset) for tp in got.topic_partitions or ()
            if tp.offset >= 0}


def _offsets(admin: AdminClient, tps: Iterable[tuple[str, int]],
             level: IsolationLevel) -> dict[tuple[str, int], int]:
    request = {TopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
               for t, p in sorted(tps)}
    if not request:
        return {}
    out = {}
    try:
        futures = admin.list_offsets(request, isolation_level=level,
                                     request_timeout=ADMIN_TIMEOUT_S)
        for tp, f in futures.items():
            out[(tp.topic, tp.partition)] = int(
                answer(f, ADMIN_TIMEOUT_S, f"listing the end of {tp.topic}-{tp.partition}")
                .offset)
    except (KafkaException, SubstrateError) as exc:
        raise StartError(f"could not list the offsets of {sorted(request)}: {exc}") from exc
    return out


def _head_bodies(consumer: Any, admin: AdminClient, changelog: str, task: int,
                 keys: set[bytes]) -> dict[bytes, bytes]:
    bodies: dict[bytes, bytes] = {}
    try:
        for key, value in read_partition(consumer, admin, changelog, task):
            key = bytes(key)
            if key in keys:
                if value is None:
                    bodies.pop(key, None)
                else:
                    bodies[key] = bytes(value)
    except SubstrateError as exc:
        raise StartError(f"could not read the ordering changelog {changelog}[{task}]: "
                         f"{exc}") from exc
    return bodies


def held_heads(admin: AdminClient, consumer: Any, changelog: str, task: int,
               inspector: OrderingStateInspector, committed: Mapping[tuple[str, int], int],
               ) -> list[dict[str, Any]]:
    """Each held channel of one task: its count, head and classed blockers.

    Args:
        admin: an AdminClient.
        consumer: an assign-only ``read_committed`` consumer
            (``workers.kafka_config.restore_consumer_config``).
        changelog: the ordering changelog.
        task: the task (= changelog partition).
        inspector: the task's state, as the first read found it.
        committed: the group's committed offsets (:func:`committed_offsets`).

    Returns:
        ``[{"topic_id", "topic", "partition", "count", "head", "blockers": [{"topic",
        "partition", "required", "settled", "class", "last_stable", "end"}]}]`` in channel
        order; ``class`` is a :class:`parsley.status.HoldClass` value. A head whose record
        is gone from the changelog since the first read has ``"blockers": None``.

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for a corrupt head.
        StartError: the changelog or the offsets could not be read.
    """
    counts = inspector.held_channels()
    if not counts:
        return []
    heads = inspector.held_heads()
    bound = inspector.name_bindings()
    names = {topic_id: name for name, topic_id in bound.items()}
    received = {ChannelId(bound[t], p) for t, p in committed if p == task and t in bound}
    covered = inspector.covered_positions()

    def settled(ch: ChannelId) -> int | None:
        return heads[ch] - 1 if ch in heads else covered.get(ch)

    keys = {sc.held_key(ch, head): ch for ch, head in heads.items()}
    bodies = _head_bodies(consumer, admin, changelog, task, set(keys))
    verdicts: dict[ChannelId, Any] = {}
    for key, ch in keys.items():
        body = bodies.get(key)
        verdicts[ch] = None if body is None else decide(sc.decode_held(body).causes, received,
                                                        settled)
    wanted = {(names[b.channel.topic_id], b.channel.partition)
              for v in verdicts.values() if isinstance(v, Held) for b in v.blockers
              if b.channel.topic_id in names}
    stable = _offsets(admin, wanted, IsolationLevel.READ_COMMITTED)
    end = _offsets(admin, wanted, IsolationLevel.READ_UNCOMMITTED)
    out: list[dict[str, Any]] = []
    for ch, n in counts.items():
        verdict = verdicts.get(ch)
        blockers: list[dict[str, Any]] | None = None if verdict is None else []
        for b in verdict.blockers if isinstance(verdict, Held) else ():
            topic = names.get(b.channel.topic_id)
            tp = (topic or "", b.channel.partition)
            cls: HoldClass | None = None
            if tp in stable and tp in end:
                cls = classify_blocker(b.required, ChannelFigures(stable[tp], end[tp],
                                                                  committed.get(tp)),
                                       heads.get(b.channel))
            assert blockers is not None
            blockers.append({
                "topic": topic or str(b.channel.topic_id), "partition": b.channel.partition,
                "required": b.required, "settled": b.settled,
                "class": None if cls is None else cls.value,
                "last_stable": stable.get(tp), "end": end.get(tp)})
        out.append({"topic_id": kafka_topic_id(ch.topic_id), "topic": names.get(ch.topic_id),
                    "partition": ch.partition, "count": n, "head": heads[ch],
                    "blockers": blockers})
    return out
