"""The checkpoint of a clean stop: when a task's local stores may be trusted on restart.

A task's local stores (the sqlite ordering store and the declared stores' caches in its
state directory) are a cache of its changelogs (docs/model.md, "Restart"). After a clean
stop, whose last transaction committed, each is equal to its changelog partition. The
worker then records, in ``<state dir>/checkpoint.json``, for each changelog partition its
topic id, partition, log start and end offset (listed once no transaction is open on it)
and, for each local file, its size and modification time. A restarting task *takes* the
checkpoint (reads it and deletes it, before anything is written) and trusts its local
stores, skipping the changelog reads, only when every recorded fact still holds: the same
topic id, the same log start and end offset (nothing written to the changelog since, and
nothing deleted), and each file as it was left (nothing written to it since). After a
crash there is no checkpoint (the last start took it), and any mismatch, unreadable
checkpoint or missing file means the full restore, as Kafka Streams does with its
``.checkpoint`` file. The rule in full: docs/model.md, "When the local stores are trusted".
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from workers.admin import ADMIN_TIMEOUT_S, answer, describe_topic, offset_bounds
from workers.calls import awaiting, pause
from workers.kafka_errors import ErrorKind, SubstrateError, map_kafka_errors

__all__ = ["CHECKPOINT_FILE", "ChangelogEnd", "Checkpoint", "LocalFile", "listed", "take",
           "write"]

log = logging.getLogger("parsley.worker")

CHECKPOINT_FILE: Final = "checkpoint.json"
"""The checkpoint's name in the task's state directory."""
FORMAT: Final = 1
"""The checkpoint's format version; any other is not trusted."""


@dataclass(frozen=True, slots=True)
class ChangelogEnd:
    """One changelog partition as the clean stop left it.

    Attributes:
        topic: the changelog topic; topic_id: its id (``str(uuid.UUID)``).
        partition: the task's partition.
        start: the log start offset; end: the high watermark (offsets), with no
            transaction open on the partition.
    """

    topic: str
    topic_id: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class LocalFile:
    """One local store file as the clean stop left it: ``name`` in the state directory,
    ``size`` in bytes and ``mtime_ns`` (``os.stat``'s)."""

    name: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: Path) -> LocalFile:
        """The file's facts now.

        Raises:
            OSError: the file cannot be stat'ed.
        """
        st = path.stat()
        return cls(path.name, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What a clean stop recorded: every changelog partition of the task and every file."""

    changelogs: tuple[ChangelogEnd, ...]
    files: tuple[LocalFile, ...]

    def to_json(self) -> bytes:
        """The file's content: ``{"format": 1, "changelogs": [...], "files": [...]}``."""
        return json.dumps({"format": FORMAT,
                           "changelogs": [asdict(c) for c in self.changelogs],
                           "files": [asdict(f) for f in self.files]}, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        """Parse :meth:`to_json`'s form.

        Raises:
            ValueError: not that form (another format, a missing or mistyped field).
        """
        try:
            doc = json.loads(data)
            if doc.get("format") != FORMAT:
                raise ValueError(f"checkpoint format {doc.get('format')!r}, not {FORMAT}")
            changelogs = tuple(ChangelogEnd(str(c["topic"]), str(c["topic_id"]),
                                            _int(c["partition"]), _int(c["start"]),
                                            _int(c["end"])) for c in doc["changelogs"])
            files = tuple(LocalFile(str(f["name"]), _int(f["size"]), _int(f["mtime_ns"]))
                          for f in doc["files"])
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a checkpoint: {exc!r}") from exc
        return cls(changelogs, files)

    def mismatch(self, directory: Path, now: Mapping[tuple[str, int], tuple[str, int, int]],
                 expected: Iterable[tuple[str, int]], files: Iterable[str]) -> str | None:
        """Why the local stores may not be trusted, or ``None`` when they may (pure but for
        the files' ``stat``).

        Args:
            directory: the task's state directory.
            now: ``(topic, partition)`` -> ``(topic id, log start, end offset)`` listed now.
            expected: every changelog partition the task restores (ordering and stores).
            files: the name of every local store file the task would open.
        """
        recorded = {(c.topic, c.partition): c for c in self.changelogs}
        for key in expected:
            c = recorded.get(key)
            if c is None:
                return f"{key[0]}[{key[1]}] is not in the checkpoint"
            got = now.get(key)
            if got is None:
                return f"{key[0]}[{key[1]}] was not listed"
            topic_id, start, end = got
            if topic_id != c.topic_id:
                return f"{c.topic} has id {topic_id} now, {c.topic_id} at the stop (recreated)"
            if (start, end) != (c.start, c.end):
                return (f"{c.topic}[{c.partition}] spans offsets {start}..{end} now, "
                        f"{c.start}..{c.end} at the stop (written or deleted since)")
        if set(recorded) != set(expected):
            return "the checkpoint names other changelogs than the task restores"
        kept = {f.name: f for f in self.files}
        for name in files:
            f = kept.get(name)
            if f is None:
                return f"{name} is not in the checkpoint"
            try:
                if LocalFile.of(directory / name) != f:
                    return f"{name} was written since the stop"
            except OSError as exc:
                return f"{name}: {exc.strerror or exc}"
        return None


Listed = dict[tuple[str, int], tuple[str, int, int]]
"""``(topic, partition)`` -> ``(topic id, log start, end offset)``."""


def listed(admin: AdminClient, partitions: Iterable[tuple[str, int]],
           settle_s: float = 0.0) -> Listed | None:
    """Each changelog partition's topic id, log start and high watermark, listed now.

    Args:
        admin: the task's AdminClient (each describe and listing bounded as the restore's
            are, by :func:`workers.calls.awaiting`).
        partitions: ``(topic, partition)`` of each changelog.
        settle_s: with more than 0, also wait up to this long, s, until no transaction is
            open on each partition (its last stable offset, listed ``READ_COMMITTED``,
            equals its high watermark: the last commit's marker is written), as a clean
            stop's checkpoint needs; ``None`` is returned when one stays open.

    Raises:
        SubstrateError: a listing failed, or a topic no longer exists.
        CallStalled: a describe or a listing (answers awaited in Python, retried) took
            longer than its bound (``describe_topics``, ``list_offsets``); the worker
            recovers in place rather than exit (docs/operations.md, "Bounded client calls"
            and "The task timeout").
    """
    out: Listed = {}
    for topic, partition in partitions:
        with awaiting("describe_topics"):
            info = describe_topic(admin, topic)
        if info is None:
            raise SubstrateError(ErrorKind.SUBSTRATE_TRANSIENT, f"changelog {topic} is gone")
        tp = TopicPartition(topic, partition)
        where = f"changelog {topic}[{partition}]"
        deadline = time.monotonic() + settle_s
        while True:
            with awaiting("list_offsets"):
                start, end = offset_bounds(admin, tp, where, ADMIN_TIMEOUT_S, time.monotonic)
            if settle_s <= 0 or _stable_end(admin, tp, where) >= end:
                break
            if time.monotonic() > deadline:
                return None
            pause(0.05)
        out[(topic, partition)] = (str(info.topic_id), start, end)
    return out


def _stable_end(admin: AdminClient, tp: TopicPartition, where: str) -> int:
    """The partition's last stable offset (``READ_COMMITTED`` latest).

    Raises:
        CallStalled: no answer within the ``list_offsets`` bound
            (:func:`workers.calls.awaiting`; docs/operations.md, "Bounded client calls").
        SubstrateError: the listing failed, or no answer within its own 35 s.
    """
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    with awaiting("list_offsets"), map_kafka_errors(f"listing the stable offset of {where}"):
        future = next(iter(admin.list_offsets(
            {tp: latest}, isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=ADMIN_TIMEOUT_S).values()))
        return int(answer(future, ADMIN_TIMEOUT_S, f"listing the stable offset of {where}")
                   .offset)


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{value!r} is not an int")
    return value


def write(directory: Path, changelogs: Iterable[ChangelogEnd], files: Iterable[str]) -> None:
    """Record the checkpoint of a clean stop: the local files first flushed to disk, then
    the checkpoint written to a temporary file, flushed and renamed into place (so a
    checkpoint is whole or absent, and never names a file not yet on disk).

    Call only after the last transaction committed and every local store was closed.

    Raises:
        OSError: a file could not be flushed or the checkpoint written (the caller logs
            it: the next start then restores in full, as after a crash).
    """
    names = list(files)
    for name in names:
        fd = os.open(directory / name, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    checkpoint = Checkpoint(tuple(changelogs),
                            tuple(LocalFile.of(directory / n) for n in names))
    tmp = directory / f"{CHECKPOINT_FILE}.tmp"
    with open(tmp, "wb") as f:
        f.write(checkpoint.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / CHECKPOINT_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def take(directory: Path) -> Checkpoint | None:
    """Read the checkpoint and delete it; ``None`` when there is none or it does not parse.

    Deleting first is what makes a checkpoint good for one start only: from here on the
    local stores may be written, and a crash must leave no checkpoint behind.
    """
    path = directory / CHECKPOINT_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("the checkpoint %s could not be read (%s): restoring from the changelogs",
                    path, exc)
        data = b""
    path.unlink(missing_ok=True)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / f"{CHECKPOINT_FILE}.tmp")
    if not data:
        return None
    try:
        return Checkpoint.from_json(data)
    except ValueError as exc:
        log.warning("the checkpoint %s is not one (%s): restoring from the changelogs",
                    path, exc)
        return None
