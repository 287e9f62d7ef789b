"""Threads, disorder counts, keys and record shapes of the mailing-list example (no broker).

Synthetic archives pin the union-find and the counting rules; the real file
(``../shared/data/lkml-linux-ext4/messages.jsonl``) must show the disorder its
``SOURCE.md`` documents: 205 replies before their parent (24 in the first
5,000) and 33 repeated arrivals of a Message-ID.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from examples.mailing_list.ingest import encode_post, end_marker
from examples.mailing_list.partition import key_for_partition, murmur2, partition_for
from examples.mailing_list.threads import (
    DATA_ENV,
    DataMissingError,
    Message,
    compute_threads,
    default_data_path,
    disorder,
    load_messages,
    resolve_data_path,
)


def msg(seq: int, mid: str, parent: str | None = None, refs: tuple[str, ...] = (),
        size: int = 100) -> Message:
    return Message(seq, mid, (parent,) if parent else (), refs, "", "a", f"s{seq}", size)


# --- union-find -------------------------------------------------------------


def test_thread_is_named_by_its_earliest_arrival_and_joins_replies() -> None:
    ms = [msg(1, "b", parent="a"), msg(2, "a"), msg(3, "c", parent="b"), msg(4, "x")]
    threads = compute_threads(ms)
    assert threads == {"b": "b", "a": "b", "c": "b", "x": "x"}, threads


def test_references_join_threads_whose_in_reply_to_disagree() -> None:
    # d names c as parent but a (not b) as first reference: References-only links join too.
    ms = [msg(1, "a"), msg(2, "b", parent="a"), msg(3, "z"),
          msg(4, "c", parent="z", refs=("a",)), msg(5, "d", parent="c")]
    threads = compute_threads(ms)
    assert len(set(threads.values())) == 1, threads
    assert threads["d"] == "a"


def test_ids_only_referenced_join_but_are_not_keys() -> None:
    ms = [msg(1, "r1", parent="ghost"), msg(2, "r2", parent="ghost")]
    threads = compute_threads(ms)
    assert threads == {"r1": "r1", "r2": "r1"}


def test_every_parent_shares_its_reply_thread_on_random_forests() -> None:
    rng = random.Random(7)
    ids = [f"m{i}" for i in range(300)]
    ms = []
    for seq, mid in enumerate(rng.sample(ids, len(ids)), 1):
        i = int(mid[1:])
        parent = f"m{rng.randrange(i)}" if i and rng.random() < 0.8 else None
        refs = (f"m{rng.randrange(i)}",) if i and rng.random() < 0.3 else ()
        ms.append(msg(seq, mid, parent, refs))
    threads = compute_threads(ms)
    first_seq = {m.message_id: m.seq for m in ms}
    for m in ms:
        if m.parent in threads:
            assert threads[m.parent] == threads[m.message_id], m
    for name in set(threads.values()):
        members = [mid for mid, t in threads.items() if t == name]
        assert name == min(members, key=first_seq.__getitem__), name


# --- disorder ---------------------------------------------------------------


def test_disorder_counts_orphans_duplicates_and_early_replies() -> None:
    ms = [
        msg(1, "c", parent="p"),       # before its parent
        msg(2, "p"),
        msg(3, "p"),                   # the same mail delivered twice
        msg(4, "o", parent="gone"),    # parent never arrives: an orphan
        msg(5, "q", parent="p"),
        msg(6, "p"),                   # and a third time
    ]
    d = disorder(ms)
    assert (d.messages, d.distinct) == (6, 4)
    assert (d.replies, d.replies_with_parent, d.replies_before_parent) == (3, 2, 1)
    assert (d.duplicate_arrivals, d.duplicate_ids, d.orphans) == (2, 1, 1)
    assert d.threads == 2


# --- the real file ----------------------------------------------------------


@pytest.fixture(scope="module")
def archive() -> list[Message]:
    return load_messages(resolve_data_path())


@pytest.mark.slow
def test_real_file_has_the_documented_disorder(archive: list[Message]) -> None:
    threads = compute_threads(archive)
    d = disorder(archive, threads)
    assert d.messages == 42_700
    assert d.replies_before_parent == 205, d
    assert d.duplicate_arrivals == 33, d
    assert d.replies_with_parent + d.orphans == d.replies
    first5k = disorder(archive[:5000], threads)
    assert first5k.replies_before_parent == 24, first5k


@pytest.mark.slow
def test_real_file_keys_every_reply_with_its_parent(archive: list[Message]) -> None:
    threads = compute_threads(archive)
    ids = {m.message_id for m in archive}
    assert set(threads) == ids
    pairs = [(m, m.parent) for m in archive if m.parent in ids]
    assert len(pairs) > 35_000
    assert all(threads[m.message_id] == threads[p] for m, p in pairs)
    largest = max(sum(1 for t in threads.values() if t == name)
                  for name in {threads[m.message_id] for m in archive[:2000]})
    assert largest > 50


# --- data path ----------------------------------------------------------------


def test_data_path_default_is_beside_the_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert default_data_path().parts[-4:] == ("shared", "data", "lkml-linux-ext4",
                                              "messages.jsonl")
    assert resolve_data_path() == default_data_path()


def test_missing_data_fails_with_a_clear_message(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "nope.jsonl"))
    with pytest.raises(DataMissingError, match=r"nope\.jsonl.*PARSLEY_DEMO_DATA.*--data"):
        resolve_data_path()
    with pytest.raises(DataMissingError, match=r"from --data"):
        resolve_data_path(tmp_path / "other.jsonl")
    good = tmp_path / "m.jsonl"
    good.write_text('{"seq": 1, "message_id": "<a>", "in_reply_to": [], "references": [], '
                    '"date": "", "author": "x", "subject": "s", "bytes": 9}\n')
    assert load_messages(resolve_data_path(good)) == [
        Message(1, "<a>", (), (), "", "x", "s", 9)]


def test_a_broken_line_names_its_line_number(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"seq": 1, "message_id": "<a>", "bytes": 3}\n{"seq": 2}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        load_messages(bad)


# --- keys and record shapes -------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    # Apache Kafka's UtilsTest.testMurmur2 vectors.
    ("21", -973932308),
    ("foobar", -790332482),
    ("a-little-bit-long-string", -985981536),
    ("a-little-bit-longer-string", -1486304829),
    ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    ("abc", 479470107),
])
def test_murmur2_matches_kafka(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


@pytest.mark.parametrize("partitions", [1, 3, 4, 7])
def test_key_for_partition_lands_there(partitions: int) -> None:
    for p in range(partitions):
        key = key_for_partition("end-of-input", p, partitions)
        assert partition_for(key.encode(), partitions) == p
    with pytest.raises(ValueError):
        key_for_partition("x", partitions, partitions)


@pytest.mark.parametrize("size", [10, 500, 4096, 1_728_742])
def test_post_value_is_padded_to_the_real_size(size: int) -> None:
    m = msg(3, "<m1@list.example>", parent="<m0@list.example>", size=size)
    value = encode_post(m, "<m0@list.example>")
    decoded = orjson.loads(value)
    assert decoded["message_id"] == m.message_id and decoded["parent"] == m.parent
    assert decoded["thread"] == "<m0@list.example>" and decoded["bytes"] == size
    fields_only = len(orjson.dumps({**decoded, "body": ""}))
    assert len(value) == max(size, fields_only)


def test_end_marker_names_its_partition_and_counts() -> None:
    key, value = end_marker(2, 4, posts=17, total=60)
    assert partition_for(key.encode(), 4) == 2
    assert orjson.loads(value) == {"type": "end", "partition": 2, "partitions": 4,
                                   "posts": 17, "total": 60}
