"""The archive file, and the threads computed over all of it before anything is replayed.

``messages.jsonl`` (``../shared/data/lkml-linux-ext4/``, see its ``SOURCE.md``)
holds 42,700 real linux-ext4 posts in arrival order, one JSON object a line:
``seq``, ``message_id``, ``in_reply_to`` (direct parent first),
``references`` (ancestors, oldest first), ``date``, ``author``, ``subject``,
``bytes`` (the raw message's size).

Real ``References`` headers disagree with each other (about 6% of replies name
a different first ancestor than their parent does), so a thread is not "the
first reference". :func:`compute_threads` joins every message with every id in
its ``in_reply_to`` and ``references`` (union-find over the whole file) and
names each component by its earliest-arriving message. Keying posts by that
name puts every reply on its parent's partition, which is what lets the
``digest`` process enforce "the parent's post before the reply's threaded
event" (docs/failing-closed.md, "Cross-partition causes").
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

__all__ = [
    "DATA_ENV",
    "DataMissingError",
    "Disorder",
    "Message",
    "compute_threads",
    "default_data_path",
    "disorder",
    "load_messages",
    "repo_root",
    "resolve_data_path",
]

DATA_ENV: Final = "PARSLEY_DEMO_DATA"
"""Environment variable naming the archive file (overridden by ``--data``)."""

_RELATIVE_DATA: Final = Path("..", "shared", "data", "lkml-linux-ext4", "messages.jsonl")


class DataMissingError(FileNotFoundError):
    """The archive file is not where it was looked for; the message says where and how to fix it."""


def repo_root() -> Path:
    """The repository root (the directory holding ``examples/``)."""
    return Path(__file__).resolve().parents[2]


def default_data_path() -> Path:
    """``<repo root>/../shared/data/lkml-linux-ext4/messages.jsonl``.

    CI clones the repository beside ``shared/``, so this holds there as here.
    """
    return (repo_root() / _RELATIVE_DATA).resolve()


def resolve_data_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The archive file to read: ``explicit``, else ``$PARSLEY_DEMO_DATA``, else the default.

    Args:
        explicit: a path given on the command line (``--data``), or ``None``.

    Returns:
        An existing file's path.

    Raises:
        DataMissingError: the chosen path is not a file; the message names the
            path, where it came from, and both ways to point elsewhere.
    """
    if explicit is not None:
        path, source = Path(explicit), "--data"
    elif os.environ.get(DATA_ENV, "").strip():
        path, source = Path(os.environ[DATA_ENV].strip()), f"${DATA_ENV}"
    else:
        path, source = default_data_path(), "the default, relative to the repository root"
    if not path.is_file():
        raise DataMissingError(
            f"mailing-list data not found: {path} (from {source}). The demo reads "
            f"lkml-linux-ext4/messages.jsonl; pass --data PATH or set {DATA_ENV}=PATH."
        )
    return path


@dataclass(frozen=True, slots=True)
class Message:
    """One archived post, as the file has it.

    Attributes:
        seq: 1-based arrival order in the archive.
        message_id: the (pseudonymised) Message-ID, ``<m...@list.example>``.
        in_reply_to: In-Reply-To ids, the direct parent first.
        references: References ids, oldest ancestor first.
        date: the raw Date header (clock-skewed in places; never used for order).
        author: pseudonymised author.
        subject: the Subject header.
        size_bytes: the raw message's real size, bytes.
    """

    seq: int
    message_id: str
    in_reply_to: tuple[str, ...]
    references: tuple[str, ...]
    date: str
    author: str
    subject: str
    size_bytes: int

    @property
    def parent(self) -> str | None:
        """The direct cause: ``in_reply_to[0]``, or ``None`` for a message that replies to nothing.

        Source: the data's ``SOURCE.md`` ("A reply's direct cause is ``in_reply_to[0]``").
        """
        return self.in_reply_to[0] if self.in_reply_to else None


def load_messages(path: str | os.PathLike[str], limit: int | None = None) -> list[Message]:
    """Read the archive in arrival order.

    Args:
        path: the ``messages.jsonl`` file.
        limit: read only the first ``limit`` lines (``None``: all).

    Returns:
        Messages in file order.

    Raises:
        OSError: the file cannot be read.
        ValueError: a line is not a JSON object with the documented fields
            (the message names the line number).
    """
    out: list[Message] = []
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, 1):
            if limit is not None and len(out) >= limit:
                break
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
                out.append(Message(
                    seq=int(row["seq"]),
                    message_id=str(row["message_id"]),
                    in_reply_to=tuple(row.get("in_reply_to") or ()),
                    references=tuple(row.get("references") or ()),
                    date=str(row.get("date") or ""),
                    author=str(row.get("author") or ""),
                    subject=str(row.get("subject") or ""),
                    size_bytes=int(row["bytes"]),
                ))
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{lineno}: not a message record ({exc})") from exc
    return out


def compute_threads(messages: Iterable[Message]) -> dict[str, str]:
    """Thread of every message: union-find over ``in_reply_to`` and ``references``.

    Every message is joined with every id it names, whether or not that id is
    in the input; each component is named by the ``message_id`` of its
    earliest-arriving message (lowest ``seq``; the first copy of a
    duplicate counts).

    Args:
        messages: the whole archive (or any prefix of it), in any order.

    Returns:
        ``message_id -> thread name`` for every message of the input (ids only
        referenced are not keys). A message's parent, when present, always has
        the same thread name.
    """
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)

    first_seq: dict[str, int] = {}
    msgs = list(messages)
    for m in msgs:
        first_seq[m.message_id] = min(first_seq.get(m.message_id, m.seq), m.seq)
        find(m.message_id)
        for other in (*m.in_reply_to, *m.references):
            union(m.message_id, other)
    name: dict[str, tuple[int, str]] = {}
    for mid, seq in first_seq.items():
        root = find(mid)
        if root not in name or (seq, mid) < name[root]:
            name[root] = (seq, mid)
    return {mid: name[find(mid)][1] for mid in first_seq}


@dataclass(frozen=True, slots=True)
class Disorder:
    """The real-world disorder in a run of messages (what the pipeline must survive).

    Attributes:
        messages: records in the input, duplicates included.
        distinct: distinct Message-IDs.
        replies: records of distinct messages with an ``in_reply_to``.
        replies_with_parent: of those, whose parent is in the input.
        replies_before_parent: of those, that arrive before their parent's first copy.
        duplicate_arrivals: records repeating a Message-ID already seen (the
            extra copies: an id arriving three times counts two).
        duplicate_ids: distinct Message-IDs that arrive more than once.
        orphans: distinct replies whose parent is not in the input.
        threads: distinct thread names (:func:`compute_threads`).
    """

    messages: int
    distinct: int
    replies: int
    replies_with_parent: int
    replies_before_parent: int
    duplicate_arrivals: int
    duplicate_ids: int
    orphans: int
    threads: int


def disorder(messages: Sequence[Message], threads: dict[str, str] | None = None) -> Disorder:
    """Count the disorder in ``messages`` (arrival order), as ``SOURCE.md`` reports it.

    Args:
        messages: the input, in arrival order.
        threads: :func:`compute_threads` of a superset, or ``None`` to compute it here.

    Returns:
        A :class:`Disorder`.
    """
    first: dict[str, Message] = {}
    for m in messages:
        first.setdefault(m.message_id, m)
    counts = Counter(m.message_id for m in messages)
    replies = [m for m in first.values() if m.parent is not None]
    with_parent = [m for m in replies if m.parent in first]
    before = [m for m in with_parent if first[m.parent or ""].seq > m.seq]
    names = threads if threads is not None else compute_threads(messages)
    return Disorder(
        messages=len(messages),
        distinct=len(first),
        replies=len(replies),
        replies_with_parent=len(with_parent),
        replies_before_parent=len(before),
        duplicate_arrivals=sum(c - 1 for c in counts.values()),
        duplicate_ids=sum(1 for c in counts.values() if c > 1),
        orphans=len(replies) - len(with_parent),
        threads=len({names[mid] for mid in first}),
    )
