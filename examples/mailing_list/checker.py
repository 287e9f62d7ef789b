"""The independent checker: reads the topics back and judges the run, knowing nothing of Parsley.

It reads ``list.posts`` (the ground truth the ingester wrote), ``list.threaded``
and ``list.digest`` with plain consumers, ``isolation.level=read_committed``,
and verifies, by each record's topic, partition and offset (33 Message-IDs
really arrive twice, so ids alone would hide a double delivery):

- **exactly once**: every record of ``list.posts`` (end markers included) and
  of ``list.threaded`` was handled by exactly one committed ``digest`` step;
  every distinct Message-ID of ``list.posts`` got exactly one threaded event.
  ``duplicates`` counts the extra handlings and extra events, ``lost`` the
  records never handled and the ids never threaded;
- **step integrity**: each ``digest`` task numbers its steps 1, 2, 3, ... from
  a counter in its store, so the committed steps of one task are exactly
  1..n. A step naming an input that does not exist (a phantom), a step number
  seen twice (a rolled-back delivery whose emission survived) and a missing
  step number (the store's counter advanced twice, or a step's emission was
  lost) are faults. Each surplus ``digest`` record (a phantom, a repeated step
  number, or a second handling of one input) counts once in ``duplicates``;
  each missing step number not already explained by an unhandled input of
  that task's partition counts in ``lost``. They also make up
  :attr:`Verdict.integrity`, printed on the note line above ``RESULT``;
- **causal order**: in each ``list.digest`` partition (one ``digest`` task's
  steps, in commit order), every threaded step comes after the step of its own
  post's first copy and of its parent's, when the parent is in the input;
  a step whose ``digest`` found either post missing from its store counts too.
  ``causal_violations`` counts the threaded steps that break either rule.

Its last line (``RESULT ...``) is the demo's verdict. Run alone:
``python -m examples.mailing_list.checker --bootstrap-servers HOST:PORT [--suffix S]``.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from examples.mailing_list.app import Topics

__all__ = [
    "Rec",
    "TopicTail",
    "Verdict",
    "check",
    "integrity_line",
    "main",
    "post_fields",
    "result_line",
]

InputRef = tuple[str, int, int]
"""``(topic, partition, offset)`` of one input record."""


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as read back: where it is, its key, and its decoded (trimmed) value.

    Attributes:
        topic: topic name.
        partition: partition.
        offset: the record's offset.
        key: the key as text, or ``None``.
        value: the JSON value, decoded; posts keep only their small fields.
    """

    topic: str
    partition: int
    offset: int
    key: str | None
    value: dict[str, Any]


def post_fields(value: bytes) -> dict[str, Any]:
    """A ``list.posts`` value without its padded body (bodies reach 1.7 MB)."""
    decoded = orjson.loads(value)
    decoded.pop("body", None)
    return dict(decoded)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The checker's judgement of a run.

    Attributes:
        messages: post records in ``list.posts`` (duplicated mails counted twice).
        handled: of those, handled by at least one committed ``digest`` step.
        duplicates: extra handlings of any input record, plus extra threaded
            events for one Message-ID.
        lost: input records (posts, markers, threaded events) never handled, plus
            distinct Message-IDs never threaded.
        causal_violations: threaded steps before their own or their parent's post.
        misplaced: threaded events that contradict the posts: a parent other
            than the post's ``in_reply_to[0]``, another thread than the post's
            key, a depth other than the parent event's plus one (0 for a root),
            or an orphan flag on a reply whose parent did arrive (or missing on
            one whose parent did not). Not on the RESULT line; part of :attr:`ok`.
        threaded: records in ``list.threaded``.
        steps: committed ``digest`` steps.
        details: up to 20 human-readable findings, each naming the records.
        integrity: step-integrity faults: ``digest`` steps naming an input that
            does not exist, plus step numbers repeated within a task, plus step
            numbers missing from a task's 1..max. Folded into ``duplicates``
            (surplus records) and ``lost`` (missing numbers) as the module
            docstring says; part of :attr:`ok`.
        phantoms: of ``integrity``, steps naming an input that does not exist.
        repeated_steps: of ``integrity``, step numbers seen more than once
            (extra occurrences), or not a positive integer.
        missing_steps: of ``integrity``, step numbers absent from a task's 1..max.
    """

    messages: int
    handled: int
    duplicates: int
    lost: int
    causal_violations: int
    threaded: int
    steps: int
    details: tuple[str, ...] = ()
    misplaced: int = 0
    phantoms: int = 0
    repeated_steps: int = 0
    missing_steps: int = 0

    @property
    def integrity(self) -> int:
        """Step-integrity faults: phantoms + repeated + missing step numbers."""
        return self.phantoms + self.repeated_steps + self.missing_steps

    @property
    def ok(self) -> bool:
        """Nothing duplicated, lost, out of causal order or out of step; every post handled."""
        return (self.duplicates == 0 and self.lost == 0 and self.causal_violations == 0
                and self.handled == self.messages and self.misplaced == 0
                and self.integrity == 0)


def integrity_line(verdict: Verdict) -> str:
    """The note printed just above ``RESULT``: the step-integrity counts and where they went."""
    return (f"digest step integrity: {verdict.phantoms} steps naming no input, "
            f"{verdict.repeated_steps} repeated step numbers, {verdict.missing_steps} missing "
            "step numbers (surplus steps are counted in duplicates, missing ones in lost)")


def result_line(verdict: Verdict, naive_inversions: int) -> str:
    """``RESULT messages=<n> handled=<n> duplicates=<n> lost=<n> causal_violations=<n>
    naive_inversions=<k>``: the demo's last line."""
    return (f"RESULT messages={verdict.messages} handled={verdict.handled} "
            f"duplicates={verdict.duplicates} lost={verdict.lost} "
            f"causal_violations={verdict.causal_violations} naive_inversions={naive_inversions}")


def check(topics: Topics, posts: Sequence[Rec], threaded: Sequence[Rec],
          digest: Sequence[Rec]) -> Verdict:
    """Judge a run from what the three topics hold (pure).

    Args:
        topics: the topic names (``input.topic`` of each step names one of them).
        posts: every committed ``list.posts`` record.
        threaded: every committed ``list.threaded`` record.
        digest: every committed ``list.digest`` record.

    Returns:
        The :class:`Verdict`.
    """
    details: list[str] = []

    def note(text: str) -> None:
        if len(details) < 20:
            details.append(text)

    first_post: dict[str, InputRef] = {}
    post_refs: list[InputRef] = []
    parents: dict[str, str | None] = {}
    threads: dict[str, str | None] = {}
    inputs: set[InputRef] = set()
    for r in sorted(posts, key=lambda r: (r.partition, r.offset)):
        ref = (r.topic, r.partition, r.offset)
        inputs.add(ref)
        if r.value.get("type") == "post":
            post_refs.append(ref)
            mid = r.value["message_id"]
            if mid not in first_post:
                first_post[mid] = ref
                parents[mid] = r.value.get("parent")
                threads[mid] = r.key
    events: Counter[str] = Counter()
    placed: dict[str, dict[str, Any]] = {}
    for r in threaded:
        inputs.add((r.topic, r.partition, r.offset))
        if r.value.get("type") == "threaded":
            events[r.value["message_id"]] += 1
            placed.setdefault(r.value["message_id"], r.value)
    misplaced = 0
    for mid, event in placed.items():
        wrong = _misplacement(event, parents, threads, placed, mid in parents)
        if wrong:
            misplaced += 1
            note(f"threaded {mid}: {wrong}")

    handled: Counter[InputRef] = Counter()
    by_partition: dict[int, list[Rec]] = defaultdict(list)
    seen_steps: dict[int, set[int]] = defaultdict(set)
    surplus = 0  # digest records that are extra by any rule, each counted once
    phantoms = repeated = 0
    for r in sorted(digest, key=lambda r: (r.partition, r.offset)):
        by_partition[r.partition].append(r)
        source = r.value.get("input") or {}
        ref = (source.get("topic"), source.get("partition"), source.get("offset"))
        handled[ref] += 1  # type: ignore[index]
        extra = handled[ref] > 1  # type: ignore[index]
        if ref not in inputs:
            phantoms += 1
            extra = True
            note(f"digest step {r.partition}@{r.offset} names an input that does not exist: {ref}")
        task, step = r.value.get("task", -1), r.value.get("step")
        task = task if isinstance(task, int) else -1
        if not isinstance(step, int) or isinstance(step, bool) or step < 1 \
                or step in seen_steps[task]:
            repeated += 1
            extra = True
            note(f"digest step {r.partition}@{r.offset}: task {task} step number {step!r} "
                 "repeated or invalid")
        else:
            seen_steps[task].add(step)
        surplus += extra

    duplicates = surplus
    for ref, n in handled.items():
        if n > 1 and ref in inputs:
            note(f"{ref[0]}-{ref[1]}@{ref[2]} handled {n} times")
    for mid, n in events.items():
        if n > 1:
            duplicates += n - 1
            note(f"{mid} threaded {n} times")
    lost = 0
    unhandled_by_partition: Counter[int] = Counter()
    for ref in sorted(inputs):
        if handled[ref] == 0:
            lost += 1
            unhandled_by_partition[ref[1]] += 1
            note(f"{ref[0]}-{ref[1]}@{ref[2]} never handled by digest")
    for mid in first_post:
        if events[mid] == 0:
            lost += 1
            note(f"{mid} never threaded")
    missing = 0
    for task, numbers in sorted(seen_steps.items()):
        gaps = (max(numbers) - len(numbers)) if numbers else 0
        if gaps:
            missing += gaps
            # Task i receives partition i of each input: an input it never
            # handled explains one missing number, already counted above.
            lost += max(0, gaps - unhandled_by_partition[task])
            absent = sorted(set(range(1, max(numbers) + 1)) - numbers)
            note(f"digest task {task}: {gaps} step numbers missing from 1..{max(numbers)} "
                 f"(first {absent[:5]})")

    violations = 0
    for partition, recs in sorted(by_partition.items()):
        done: set[InputRef] = set()
        for r in sorted(recs, key=lambda r: r.offset):
            v = r.value
            source = v.get("input") or {}
            ref = (source.get("topic"), source.get("partition"), source.get("offset"))
            if v.get("kind") != "threaded":
                done.add(ref)  # type: ignore[arg-type]
                continue
            mid = v.get("message_id", "")
            needed = [("its post", first_post.get(mid))]
            parent = parents.get(mid)
            if parent is not None and parent in first_post:
                needed.append(("its parent's post", first_post[parent]))
            broken = [what for what, need in needed if need is None or need not in done]
            if v.get("post_seen") is False:
                broken.append("digest found no post in its store")
            if v.get("parent_post_seen") is False:
                broken.append("digest found no parent post in its store")
            if broken:
                violations += 1
                note(f"{topics.digest}-{partition}@{r.offset}: threaded {mid} handled before "
                     + ", ".join(broken))
    handled_posts = sum(1 for ref in post_refs if handled[ref] > 0)
    return Verdict(messages=len(post_refs), handled=handled_posts, duplicates=duplicates,
                   lost=lost, causal_violations=violations, threaded=len(threaded),
                   steps=len(digest), details=tuple(details), misplaced=misplaced,
                   phantoms=phantoms, repeated_steps=repeated, missing_steps=missing)


def _misplacement(event: dict[str, Any], parents: dict[str, str | None],
                  threads: dict[str, str | None], placed: dict[str, dict[str, Any]],
                  posted: bool) -> str | None:
    """What is wrong with one threaded event given the posts, or ``None``."""
    mid = event["message_id"]
    if not posted:
        return "no post carries this Message-ID"
    parent = parents[mid]
    if event.get("parent") != parent:
        return f"parent {event.get('parent')!r}, but the post replies to {parent!r}"
    if event.get("thread") != threads[mid]:
        return f"thread {event.get('thread')!r}, but the post is keyed {threads[mid]!r}"
    depth = event.get("depth")
    if parent is None:
        return None if (depth, bool(event.get("orphan"))) == (0, False) else \
            f"a root at depth {depth}, orphan={event.get('orphan')}"
    if parent not in parents:
        return None if (depth, bool(event.get("orphan"))) == (0, True) else \
            f"parent never arrived, yet depth {depth}, orphan={event.get('orphan')}"
    if event.get("orphan"):
        # Only a reply cycle (none in the archive) is broken by placing an orphan
        # whose parent arrived: the parent's ancestry then leads back here.
        seen, up = {mid}, parent
        while up is not None and up in parents and up not in seen:
            seen.add(up)
            up = parents[up]
        return None if up == mid else "an orphan, yet its parent arrived"
    parent_event = placed.get(parent)
    if parent_event is None or depth != parent_event.get("depth", -2) + 1:
        return (f"depth {depth}, parent's "
                f"{None if parent_event is None else parent_event.get('depth')}")
    return None


class TopicTail:
    """A plain ``read_committed`` reader of every partition of one topic, from the beginning.

    :meth:`read_available` returns what was committed since the last call, up
    to the end each partition has now; it is cheap to call again.

    Args:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        topic: the topic.
        trim_posts: keep only the small fields of post values (:func:`post_fields`).

    Raises:
        KafkaException: the topic is not available.
    """

    def __init__(self, bootstrap_servers: str, topic: str, *, trim_posts: bool = False) -> None:
        self.topic = topic
        self._trim = trim_posts
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap_servers,
            "group.id": f"mailing-list-checker-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        })
        meta = self._consumer.list_topics(topic, timeout=15)
        desc = meta.topics.get(topic)
        if desc is None or desc.error is not None:
            raise KafkaException(f"topic {topic!r} is not available: "
                                 f"{None if desc is None else desc.error}")
        self.partitions = sorted(desc.partitions)
        self._at_end: set[int] = set()
        self._consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)
                               for p in self.partitions])

    def read_available(self, idle_s: float = 1.0, timeout_s: float = 60.0) -> list[Rec]:
        """Records committed since the last call, as far as the consumer can see now.

        Reads until every partition has reported its end (librdkafka's partition
        EOF: the high watermark, or under ``read_committed`` the last stable
        offset) since its last record and a poll comes back empty; or until
        nothing has arrived for ``idle_s`` (a trailing commit marker or an open
        transaction never yields a record); or ``timeout_s`` at most. Records
        committed later are returned by a later call.

        Raises:
            KafkaException: a consumer error other than reaching a partition's end.
        """
        out: list[Rec] = []
        deadline = time.monotonic() + timeout_s
        last_record = time.monotonic()
        while time.monotonic() < deadline:
            batch = self._consumer.consume(500, 0.2)
            got = False
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        self._at_end.add(msg.partition())
                        continue
                    raise KafkaException(err)
                got = True
                self._at_end.discard(msg.partition())
                raw = msg.value()
                if raw is None:
                    continue
                value = post_fields(raw) if self._trim else orjson.loads(raw)
                key = msg.key()
                out.append(Rec(msg.topic(), msg.partition(), msg.offset(),
                               None if key is None else key.decode("utf-8", "replace"), value))
            now = time.monotonic()
            if got:
                last_record = now
                continue
            if len(self._at_end) == len(self.partitions) or now - last_record >= idle_s:
                break
        return out

    def close(self) -> None:
        """Close the consumer."""
        self._consumer.close()


class RunReader:
    """Tails the three topics of a run and judges what has been committed so far.

    Args:
        bootstrap_servers: Kafka ``bootstrap.servers``.
        topics: the run's topic names.
    """

    def __init__(self, bootstrap_servers: str, topics: Topics) -> None:
        self.topics = topics
        self._tails = (TopicTail(bootstrap_servers, topics.posts, trim_posts=True),
                       TopicTail(bootstrap_servers, topics.threaded),
                       TopicTail(bootstrap_servers, topics.digest))
        self._records: tuple[list[Rec], list[Rec], list[Rec]] = ([], [], [])

    def refresh(self) -> Verdict:
        """Read what is newly committed on each topic and judge everything read so far."""
        for tail, records in zip(self._tails, self._records, strict=True):
            records.extend(tail.read_available())
        return check(self.topics, *self._records)

    def close(self) -> None:
        """Close the readers."""
        for tail in self._tails:
            tail.close()


def judge(bootstrap_servers: str, topics: Topics) -> Verdict:
    """Read all three topics once and judge them."""
    reader = RunReader(bootstrap_servers, topics)
    try:
        return reader.refresh()
    finally:
        reader.close()


def print_verdict(verdict: Verdict, naive_inversions: int, out: Any = sys.stdout,
                  extra: Iterable[str] = ()) -> None:
    """Print the findings, then the RESULT line last."""
    for line in (*verdict.details, *extra):
        print(f"  {line}", file=out)
    print(f"  {integrity_line(verdict)}", file=out)
    print(result_line(verdict, naive_inversions), file=out, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.mailing_list.checker``: exit 0 when the verdict is clean."""
    from examples.mailing_list.naive import count_naive

    ap = argparse.ArgumentParser(prog="python -m examples.mailing_list.checker",
                                 description="Judge a mailing-list run from its topics.")
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--suffix", default="", help="topic name suffix of the run")
    args = ap.parse_args(argv)
    topics = Topics.with_suffix(args.suffix)
    verdict = judge(args.bootstrap_servers, topics)
    naive = count_naive(args.bootstrap_servers, topics)
    print_verdict(verdict, naive.inversions)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
