"""The checker's judgement and the naive inversion count on hand-built topic contents (no broker).

A correct run is built by driving the real handlers through the frame in a
causal order; each test then breaks it the way a faulty runtime would
(replay, loss, an event handled early) and the checker must say so.
"""

from __future__ import annotations

from typing import Any

import orjson

from examples.mailing_list.checker import (
    Rec,
    check,
    integrity_line,
    post_fields,
    result_line,
)
from examples.mailing_list.naive import count_inversions
from tests.unit.test_mailing_list_handlers import DIGEST, THREADER, TOPICS, Task, end, post

# (message id, parent): b replies to a, c to b, d repeats a, o is an orphan.
ARRIVALS = [("a", None), ("c", "b"), ("b", "a"), ("a", None), ("o", "gone")]


def run(order: str = "causal") -> tuple[list[Rec], list[Rec], list[Rec]]:
    """Posts, threaded events and digest steps of one task on partition 0.

    ``order="causal"`` hands digest each event after the posts before it (what
    Parsley does); ``"events-first"`` hands it every event before any post.
    """
    threader, digest = Task(THREADER), Task(DIGEST)
    posts: list[Rec] = []
    events: list[Rec] = []
    values = [post(mid, parent, thread="t", seq=i) for i, (mid, parent) in enumerate(ARRIVALS)]
    key, marker = end(posts=len(values))
    for i, value in enumerate([*values, marker]):
        k = key if i == len(values) else "t"
        posts.append(Rec(TOPICS.posts, 0, i, k, post_fields(value)))
        for topic, ek, ev in threader.feed(TOPICS.posts, k, value):
            events.append(Rec(topic, 0, len(events), ek, ev))
    steps: list[dict[str, Any]] = []

    def to_digest(rec: Rec) -> None:
        raw = orjson.dumps({**rec.value, "body": ""}) if rec.topic == TOPICS.posts \
            else orjson.dumps(rec.value)
        digest.offsets[rec.topic] = rec.offset
        steps.extend(v for _, _, v in digest.feed(rec.topic, rec.key or "", raw))

    if order == "causal":
        # Threader emitted each event after the posts up to the one that placed it.
        emitted_after = [0, 2, 2, 5]  # offset of the post whose handling emitted event j
        pi = 0
        for j, ev in enumerate(events):
            while pi <= emitted_after[j]:
                to_digest(posts[pi])
                pi += 1
            to_digest(ev)
        for p in posts[pi:]:
            to_digest(p)
    else:
        for ev in events:
            to_digest(ev)
        for p in posts:
            to_digest(p)
    digest_recs = [Rec(TOPICS.digest, 0, i, "t", s) for i, s in enumerate(steps)]
    return posts, events, digest_recs


def renumber(steps: list[Rec], first: int = 1) -> list[Rec]:
    """``steps`` with their step numbers consecutive from ``first``: what digest
    writes when it never received the records left out of ``steps``."""
    return [Rec(s.topic, s.partition, s.offset, s.key, dict(s.value, step=first + i))
            for i, s in enumerate(steps)]


def with_step(rec: Rec, step: int) -> Rec:
    """``rec`` with its step number replaced."""
    return Rec(rec.topic, rec.partition, rec.offset, rec.key, dict(rec.value, step=step))


def test_a_causal_exactly_once_run_is_clean() -> None:
    posts, events, steps = run()
    assert [e.value["message_id"] for e in events] == ["a", "b", "c", "o"]
    v = check(TOPICS, posts, events, steps)
    assert (v.messages, v.handled, v.duplicates, v.lost, v.causal_violations) == (5, 5, 0, 0, 0), \
        v.details
    assert v.ok and v.threaded == 4 and v.steps == 10 and v.misplaced == 0
    assert result_line(v, 7) == ("RESULT messages=5 handled=5 duplicates=0 lost=0 "
                                 "causal_violations=0 naive_inversions=7")


def test_a_replayed_step_is_a_duplicate() -> None:
    posts, events, steps = run()
    replay = Rec(TOPICS.digest, 0, len(steps), "t", steps[3].value)
    v = check(TOPICS, posts, events, [*steps, replay])
    assert v.duplicates == 1 and not v.ok
    assert any("handled 2 times" in d for d in v.details), v.details


def test_a_repeated_threaded_event_is_a_duplicate() -> None:
    posts, events, steps = run()
    again = Rec(TOPICS.threaded, 0, len(events), "t", events[1].value)
    step = dict(steps[-1].value, step=steps[-1].value["step"] + 1,
                input={"topic": TOPICS.threaded, "partition": 0, "offset": again.offset})
    v = check(TOPICS, posts, [*events, again],
              [*steps, Rec(TOPICS.digest, 0, len(steps), "t", step)])
    assert v.duplicates == 1 and v.lost == 0, v.details


def test_missing_steps_and_missing_events_are_lost() -> None:
    posts, events, steps = run()
    post_steps = [s for s in steps if s.value["kind"] == "post"]
    v = check(TOPICS, posts, events, [s for s in steps if s is not post_steps[1]])
    assert (v.lost, v.handled, v.messages) == (1, 4, 5), v.details
    v = check(TOPICS, posts, [e for e in events if e.value["message_id"] != "c"],
              renumber([s for s in steps if s.value.get("message_id") != "c"
                        or s.value["kind"] == "post"]))
    assert v.lost == 1 and any("c never threaded" in d for d in v.details), v.details


def test_a_step_naming_no_input_fails_the_verdict() -> None:
    posts, events, steps = run()
    phantom = Rec(TOPICS.digest, 0, len(steps), "t",
                  dict(steps[0].value, step=len(steps) + 1,
                       input={"topic": TOPICS.posts, "partition": 0, "offset": 99}))
    v = check(TOPICS, posts, events, [*steps, phantom])
    assert (v.phantoms, v.integrity, v.duplicates, v.lost) == (1, 1, 1, 0), v.details
    assert not v.ok
    assert any("does not exist" in d for d in v.details), v.details


def test_a_repeated_step_number_fails_even_when_every_input_is_handled_once() -> None:
    # A rolled-back delivery whose emission survived: the store's counter went
    # back, so the next step reuses the number; every input is still handled once.
    posts, events, steps = run()
    steps = [*renumber(steps[:4]), *renumber(steps[4:], first=4)]
    v = check(TOPICS, posts, events, steps)
    assert (v.repeated_steps, v.missing_steps, v.duplicates, v.lost) == (1, 0, 1, 0), v.details
    assert v.handled == v.messages and v.causal_violations == 0 and not v.ok


def test_a_step_counter_advancing_twice_is_lost() -> None:
    posts, events, steps = run()
    steps = [*renumber(steps[:4]), *renumber(steps[4:], first=6)]
    v = check(TOPICS, posts, events, steps)
    assert (v.missing_steps, v.repeated_steps, v.duplicates, v.lost) == (1, 0, 0, 1), v.details
    assert v.handled == v.messages and not v.ok
    assert any("missing from 1..11" in d for d in v.details), v.details


def test_the_reviewers_phantom_plus_step_gap_is_not_ok() -> None:
    # checker_proof.py: one post, its event, steps [1, 5, 6] of which 5 names list.posts@99.
    post_rec = Rec(TOPICS.posts, 0, 0, "th", {"type": "post", "message_id": "m1", "parent": None})
    event = Rec(TOPICS.threaded, 0, 0, "th", {"type": "threaded", "message_id": "m1",
                                              "parent": None, "thread": "th", "depth": 0,
                                              "orphan": False})

    def step(n: int, kind: str, topic: str, offset: int) -> Rec:
        return Rec(TOPICS.digest, 0, n, "th", {"step": n, "task": 0, "kind": kind,
                                               "message_id": "m1", "input": {
                                                   "topic": topic, "partition": 0,
                                                   "offset": offset}})

    v = check(TOPICS, [post_rec], [event], [step(1, "post", TOPICS.posts, 0),
                                            step(5, "post", TOPICS.posts, 99),
                                            step(6, "threaded", TOPICS.threaded, 0)])
    assert (v.phantoms, v.missing_steps, v.duplicates, v.lost) == (1, 3, 1, 3), v.details
    assert not v.ok
    assert integrity_line(v).startswith("digest step integrity: 1 steps naming no input, "
                                        "0 repeated step numbers, 3 missing step numbers")


def test_events_handled_before_their_posts_are_causal_violations() -> None:
    posts, events, steps = run("events-first")
    v = check(TOPICS, posts, events, steps)
    # a, b and c each came before their own post; o (an orphan) before its own too.
    assert v.causal_violations == 4, v.details
    assert v.duplicates == 0 and v.lost == 0


def test_a_step_that_found_its_parent_missing_is_a_violation_even_in_order() -> None:
    posts, events, steps = run()
    i = next(i for i, s in enumerate(steps) if s.value.get("message_id") == "c"
             and s.value["kind"] == "threaded")
    forged = Rec(TOPICS.digest, 0, steps[i].offset, "t",
                 dict(steps[i].value, parent_post_seen=False))
    v = check(TOPICS, posts, events, [*steps[:i], forged, *steps[i + 1:]])
    assert v.causal_violations == 1
    assert any("no parent post" in d for d in v.details), v.details


def test_naive_inversions_count_events_ahead_of_own_or_parent_post() -> None:
    stream = [
        ("threaded", {"message_id": "a", "parent": None}),            # before its post
        ("post", {"message_id": "a"}),
        ("threaded", {"message_id": "b", "parent": "a"}),             # before its own post
        ("post", {"message_id": "b"}),
        ("post", {"message_id": "c"}),
        ("threaded", {"message_id": "c", "parent": "z"}),             # z is in the input, unseen
        ("threaded", {"message_id": "b", "parent": "a"}),             # in order
        ("threaded", {"message_id": "o", "parent": "gone", "orphan": True}),  # o unseen
        ("post", {"message_id": "z"}),
        ("post", {"message_id": "o"}),
    ]
    r = count_inversions(stream, parents={"a": None, "b": None, "c": None, "z": None,
                                          "o": None})
    assert (r.posts, r.threaded, r.inversions) == (5, 5, 4)
    in_order = [s for s in stream if s[0] == "post"] + [s for s in stream if s[0] == "threaded"]
    assert count_inversions(in_order).inversions == 0


def _with_event(events: list[Rec], mid: str, **changes: Any) -> list[Rec]:
    return [Rec(e.topic, e.partition, e.offset, e.key, dict(e.value, **changes))
            if e.value["message_id"] == mid else e for e in events]


def test_events_contradicting_the_posts_are_misplaced() -> None:
    posts, events, steps = run()
    for mid, changes, why in [
        ("c", {"depth": 1}, "depth 1, parent's 1"),
        ("b", {"parent": "c"}, "but the post replies to 'a'"),
        ("a", {"orphan": True}, "a root at depth 0"),
        ("o", {"orphan": False}, "parent never arrived"),
        ("b", {"orphan": True}, "an orphan, yet its parent arrived"),
        ("c", {"thread": "elsewhere"}, "but the post is keyed 't'"),
    ]:
        v = check(TOPICS, posts, _with_event(events, mid, **changes), steps)
        assert v.misplaced == 1 and not v.ok, (mid, changes, v.details)
        assert any(why in d for d in v.details), (why, v.details)
        assert (v.duplicates, v.lost, v.causal_violations) == (0, 0, 0)
