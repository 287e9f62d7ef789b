"""``threader`` and ``digest`` handlers driven in-process through the handler frame (no broker).

Each delivery goes through :class:`parsley.frame.HandlerFrame` exactly as a
worker would run it (serdes, handler, effects planning); the planned store
writes are applied to an in-memory store view between deliveries, so state
flows as it does across steps of one task.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

import orjson
import pytest

from examples.mailing_list.app import PENDING_KEY, Topics, build
from examples.mailing_list.ingest import encode_post, end_marker
from examples.mailing_list.threads import (
    Message,
    compute_threads,
    disorder,
    load_messages,
    resolve_data_path,
)
from parsley import Process
from parsley.frame import FrameResult, HandlerFailure, HandlerFrame

TOPICS = Topics()
THREADER, DIGEST = build(TOPICS)


class MemoryStores:
    """The worker's store view, in memory: ``{store: {key bytes: value bytes}}``."""

    def __init__(self) -> None:
        self.data: dict[str, dict[bytes, bytes]] = defaultdict(dict)

    def get(self, store_name: str, key: bytes) -> bytes | None:
        return self.data[store_name].get(key)

    def apply(self, result: FrameResult) -> None:
        for w in result.writes:
            if w.value is None:
                self.data[w.store].pop(w.key, None)
            else:
                self.data[w.store][w.key] = w.value

    def read(self, store: str, key: str) -> Any:
        raw = self.data[store].get(key.encode())
        return None if raw is None else orjson.loads(raw)


class Task:
    """One task of a process: a frame, its stores, and offsets per received topic."""

    def __init__(self, process: Process, task: int = 0) -> None:
        self.stores = MemoryStores()
        self.frame = HandlerFrame(process, task, self.stores)
        self.task = task
        self.offsets: dict[str, int] = defaultdict(int)

    def feed(self, topic: str, key: str, value: bytes) -> list[tuple[str, str, dict[str, Any]]]:
        offset = self.offsets[topic]
        self.offsets[topic] += 1
        result = self.frame.deliver(topic, self.task, offset, 1_000, key.encode(), value)
        self.stores.apply(result)
        return [(s.topic, (s.key or b"").decode(), orjson.loads(s.value or b"null"))
                for s in result.sends]


def post(mid: str, parent: str | None = None, thread: str = "t", seq: int = 1,
         size: int = 300) -> bytes:
    m = Message(seq, mid, (parent,) if parent else (), (), "", "author", f"subject {mid}", size)
    return encode_post(m, thread)


def end(partition: int = 0, partitions: int = 1, posts: int = 0) -> tuple[str, bytes]:
    return end_marker(partition, partitions, posts, posts)


def placed(events: list[tuple[str, str, dict[str, Any]]]) -> list[tuple[str, Any, int, bool]]:
    assert all(topic == TOPICS.threaded for topic, _, _ in events), events
    return [(e["message_id"], e["parent"], e["depth"], e["orphan"]) for _, _, e in events]


# --- threader -----------------------------------------------------------------


def test_root_then_reply_are_placed_at_once_with_depths() -> None:
    t = Task(THREADER)
    assert placed(t.feed(TOPICS.posts, "r", post("r", thread="r"))) == [("r", None, 0, False)]
    events = t.feed(TOPICS.posts, "r", post("c", parent="r", thread="r"))
    assert placed(events) == [("c", "r", 1, False)]
    assert events[0][1] == "r" and events[0][2]["thread"] == "r", "keyed and named by thread"
    assert t.stores.read("nodes", "c")["state"] == "placed"


def test_replies_before_their_parent_are_parked_then_released_in_order() -> None:
    t = Task(THREADER)
    assert t.feed(TOPICS.posts, "t", post("grandchild", parent="child")) == []
    assert t.feed(TOPICS.posts, "t", post("child", parent="root")) == []
    assert t.feed(TOPICS.posts, "t", post("sibling", parent="root")) == []
    assert t.stores.read("pending", PENDING_KEY) == ["child", "root"]
    assert [c["message_id"] for c in t.stores.read("parked", "root")] == ["child", "sibling"]
    events = t.feed(TOPICS.posts, "t", post("root"))
    assert placed(events) == [("root", None, 0, False), ("child", "root", 1, False),
                              ("sibling", "root", 1, False), ("grandchild", "child", 2, False)]
    assert t.stores.read("pending", PENDING_KEY) == []
    assert t.stores.read("parked", "root") is None and t.stores.read("parked", "child") is None


def test_a_repeated_message_id_is_dropped_whether_placed_or_parked() -> None:
    t = Task(THREADER)
    assert len(t.feed(TOPICS.posts, "t", post("a"))) == 1
    assert t.feed(TOPICS.posts, "t", post("a")) == []
    assert t.feed(TOPICS.posts, "t", post("b", parent="late")) == []
    assert t.feed(TOPICS.posts, "t", post("b", parent="late")) == []
    assert [c["message_id"] for c in t.stores.read("parked", "late")] == ["b"]
    assert placed(t.feed(TOPICS.posts, "t", post("late"))) == [
        ("late", None, 0, False), ("b", "late", 1, False)]


def test_end_of_input_releases_orphans_with_their_parked_replies() -> None:
    t = Task(THREADER)
    t.feed(TOPICS.posts, "t", post("orphan", parent="never"))
    t.feed(TOPICS.posts, "t", post("reply", parent="orphan"))
    t.feed(TOPICS.posts, "u", post("other", parent="gone", thread="u"))
    key, value = end(posts=3)
    events = t.feed(TOPICS.posts, key, value)
    assert placed(events) == [("orphan", "never", 0, True), ("reply", "orphan", 1, False),
                              ("other", "gone", 0, True)]
    assert [k for _, k, _ in events] == ["t", "t", "u"], "orphans keep their thread key"
    assert t.stores.read("pending", PENDING_KEY) == []
    assert t.feed(TOPICS.posts, key, value) == [], "a second marker finds nothing parked"


def test_a_reply_cycle_is_broken_once_at_end_of_input() -> None:
    t = Task(THREADER)
    t.feed(TOPICS.posts, "t", post("a", parent="b"))
    t.feed(TOPICS.posts, "t", post("b", parent="a"))
    events = placed(t.feed(TOPICS.posts, *end()))
    assert sorted(e[0] for e in events) == ["a", "b"], events
    assert [e[3] for e in events] == [True, False]


def test_an_unknown_record_is_an_application_failure() -> None:
    t = Task(THREADER)
    with pytest.raises(HandlerFailure, match=r"unknown record type 'bogus'"):
        t.feed(TOPICS.posts, "t", orjson.dumps({"type": "bogus"}))


@pytest.mark.parametrize("seed", range(6))
def test_every_message_is_placed_once_after_its_parent(seed: int) -> None:
    rng = random.Random(seed)
    ids = [f"m{i}" for i in range(120)]
    parent_of = {mid: (f"m{rng.randrange(i)}" if i and rng.random() < 0.7
                       else (f"ghost{i}" if i and rng.random() < 0.5 else None))
                 for i, mid in enumerate(ids)}
    arrivals = rng.sample(ids, len(ids)) + rng.sample(ids, 10)  # some delivered twice
    t = Task(THREADER)
    events: list[tuple[str, Any, int, bool]] = []
    for seq, mid in enumerate(arrivals, 1):
        events += placed(t.feed(TOPICS.posts, "t", post(mid, parent_of[mid], seq=seq)))
    events += placed(t.feed(TOPICS.posts, *end(posts=len(arrivals))))
    order = [e[0] for e in events]
    assert sorted(order) == sorted(ids), "each distinct message placed exactly once"
    depth = {e[0]: e[2] for e in events}
    for mid, parent, d, orphan in events:
        if parent is None or orphan:
            assert d == 0
        else:
            assert order.index(parent) < order.index(mid), f"{mid} placed before {parent}"
            assert d == depth[parent] + 1
        assert orphan == (parent is not None and parent.startswith("ghost")), mid


def test_the_first_5000_real_messages_thread_completely() -> None:
    everything = load_messages(resolve_data_path())
    threads = compute_threads(everything)
    first = everything[:5000]
    facts = disorder(first, threads)
    t = Task(THREADER)
    events: list[tuple[str, Any, int, bool]] = []
    parked_at_some_point = 0
    for m in first:
        got = t.feed(TOPICS.posts, threads[m.message_id], encode_post(m, threads[m.message_id]))
        if not got and t.stores.read("nodes", m.message_id)["state"] == "parked":
            parked_at_some_point += 1
        events += placed(got)
    events += placed(t.feed(TOPICS.posts, *end(posts=len(first))))
    assert len(events) == facts.distinct == 5000 - facts.duplicate_arrivals
    assert len({e[0] for e in events}) == facts.distinct
    assert sum(1 for e in events if e[3]) == facts.orphans
    assert parked_at_some_point >= facts.replies_before_parent + facts.orphans
    assert t.stores.read("pending", PENDING_KEY) == []


# --- digest -------------------------------------------------------------------


def threaded(mid: str, parent: str | None = None, depth: int = 0, orphan: bool = False,
             thread: str = "t") -> bytes:
    return orjson.dumps({"type": "threaded", "message_id": mid, "parent": parent,
                         "thread": thread, "depth": depth, "orphan": orphan, "seq": 0})


def steps(out: list[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    assert all(topic == TOPICS.digest for topic, _, _ in out), out
    return [v for _, _, v in out]


def test_digest_records_every_step_with_its_input_and_a_count() -> None:
    d = Task(DIGEST, task=2)
    s1 = steps(d.feed(TOPICS.posts, "t", post("root")))
    s2 = steps(d.feed(TOPICS.posts, "t", post("reply", parent="root", seq=2)))
    s3 = steps(d.feed(TOPICS.threaded, "t", threaded("root")))
    s4 = steps(d.feed(TOPICS.threaded, "t", threaded("reply", "root", depth=1)))
    assert [s[0]["step"] for s in (s1, s2, s3, s4)] == [1, 2, 3, 4]
    assert s1[0]["input"] == {"topic": TOPICS.posts, "partition": 2, "offset": 0}
    assert s4[0]["input"] == {"topic": TOPICS.threaded, "partition": 2, "offset": 1}
    assert s4[0]["kind"] == "threaded" and s4[0]["task"] == 2
    assert (s4[0]["post_seen"], s4[0]["parent_post_seen"], s4[0]["position"]) == (True, True, 2)
    assert s3[0]["parent_post_seen"] is None
    assert s4[0]["subject"] == "subject reply"
    assert d.stores.read("timelines", "t") == [["root", 0], ["reply", 1]]
    assert "body" not in d.stores.read("posts", "reply"), "the padded body is not kept"


def test_digest_says_when_an_event_came_before_its_posts() -> None:
    d = Task(DIGEST)
    early = steps(d.feed(TOPICS.threaded, "t", threaded("reply", "root", depth=1)))[0]
    assert (early["post_seen"], early["parent_post_seen"]) == (False, False)
    orphan = steps(d.feed(TOPICS.threaded, "t", threaded("o", "gone", orphan=True)))[0]
    assert orphan["parent_post_seen"] is None, "an orphan's parent is not awaited"


def test_digest_keeps_the_first_copy_of_a_repeated_post_and_marks_the_second() -> None:
    d = Task(DIGEST)
    first = steps(d.feed(TOPICS.posts, "t", post("a", seq=1)))[0]
    again = steps(d.feed(TOPICS.posts, "t", post("a", seq=9)))[0]
    assert (first["duplicate"], again["duplicate"]) == (False, True)
    assert d.stores.read("posts", "a")["seq"] == 1
    key, value = end(partition=0, partitions=1, posts=2)
    marker = steps(d.feed(TOPICS.posts, key, value))
    assert marker[0]["kind"] == "end" and marker[0]["posts"] == 2 and marker[0]["step"] == 3
    assert marker and d.feed(TOPICS.posts, key, value)[0][1] == key, "answered on its own key"
