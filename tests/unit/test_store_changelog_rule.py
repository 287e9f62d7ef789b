"""The store-changelog rule (workers.store_changelogs.judge_store_changelog), no broker."""

from __future__ import annotations

import uuid

from parsley.engine.channel import kafka_topic_id
from parsley.refusals import Reason
from workers.admin import TopicInfo
from workers.store_changelogs import judge_store_changelog

NAME = "shop-counter-counts-changelog"
OLD = uuid.UUID(int=0x1234)
NEW = uuid.UUID(int=0x5678)


def _info(topic_id: uuid.UUID, partitions: int = 2) -> TopicInfo:
    return TopicInfo(NAME, topic_id, partitions, "compact", 1048588)


def _judge(bound: uuid.UUID | None, found: TopicInfo | None, starts: dict[int, int] | None = None):  # type: ignore[no-untyped-def]
    return judge_store_changelog(NAME, bound, found, 2, starts or {}, app_id="shop-counter")


def test_a_bound_changelog_intact_or_an_unbound_one_is_not_refused() -> None:
    assert _judge(OLD, _info(OLD), {0: 0, 1: 0}) is None
    assert _judge(None, None) is None  # a store newly declared: created at start
    assert _judge(None, _info(NEW), {0: 7}) is None  # nothing written under this state


def test_a_bound_changelog_absent_recreated_or_purged_is_ordering_state_lost() -> None:
    for found, starts, words in ((None, {}, "does not exist"),
                                 (_info(NEW), {}, "deleted and recreated"),
                                 (_info(OLD), {0: 0, 1: 12}, "partition 1 of")):
        refusal = _judge(OLD, found, starts)
        assert refusal is not None and refusal.reason is Reason.ORDERING_STATE_LOST
        assert NAME in refusal.detail and words in refusal.detail, refusal.detail
        assert kafka_topic_id(OLD) in refusal.detail
        assert "docs/runbooks.md" in refusal.detail
        assert "kafka-consumer-groups --delete --group shop-counter" in refusal.detail


def test_a_changelog_of_another_width_is_task_width_changed() -> None:
    for bound in (None, OLD):
        refusal = _judge(bound, _info(OLD, partitions=3))
        assert refusal is not None and refusal.reason is Reason.TASK_WIDTH_CHANGED
        assert "3 partition(s)" in refusal.detail and "2 task(s)" in refusal.detail


def test_kafka_topic_id_prints_as_kafka_topics_does() -> None:
    # Uuid.toString: URL-safe base64 of the 16 bytes, no padding (22 characters).
    assert kafka_topic_id(uuid.UUID("22ff08ae-0000-0000-0000-000000000000")) == \
        "Iv8IrgAAAAAAAAAAAAAAAA"
