"""``python -m examples.mailing_list.demo``: the mailing-list pipeline end to end, then the verdict.

What it does, in order:

1. uses the broker at ``--bootstrap-servers``, or starts a local one with
   ``parsley-devbroker up --dir <temporary dir>`` (stopped again at the end);
2. creates ``list.posts``, ``list.threaded`` and ``list.digest`` with the same
   partition count (``--partitions``, default 4) and ``max.message.bytes`` of
   4 MiB (posts reach 1.7 MB). On a broker given with ``--bootstrap-servers``
   the names get a run suffix (``list.posts.<hex>``), so runs never collide;
3. starts ``threader`` under its own ``parsley-coordinator run
   examples.mailing_list.app:THREADER --restart transient`` (one worker per
   partition; ``--together`` runs ``app:PROCESSES``, both processes under one
   coordinator, from the start instead);
4. replays the first 5,000 messages (``--all``: 42,700) into ``list.posts``
   with a progress bar, while a short status table (from ``parsley-coordinator
   status --json``) shows each task's held messages, its head's blockers and its lag;
5. starts ``digest`` only once the replay is done (``app:DIGEST``, its own
   coordinator): it catches up on posts and threaded events at once, so
   Parsley's hold-back works for real — events fetched ahead of their posts
   are held, and the table shows them with the ``list.posts`` position they wait for;
6. waits until the checker (``checker.py``) has read every post the ingester had
   acknowledged and finds every input handled (or nothing moves for
   ``--timeout`` seconds), runs the
   naive consumer (``naive.py``) over the full topics, stops both coordinators
   (SIGTERM, a bounded shutdown), and prints the most ``digest`` held at once
   (status sampled every 0.25 s while it catches up, :class:`HoldRecord`) with one
   example blocker, then the checker's verdict as its last line::

       RESULT messages=<n> handled=<n> duplicates=0 lost=0 causal_violations=0 naive_inversions=<k>

Exit status 0 when the verdict is clean and covers every post ingested, 1 when
it is not (an ``INCOMPLETE: ...`` line above ``RESULT`` names a shortfall), 2
when the run could not be set up. Everything it started is stopped, also on Ctrl-C.
The coordinators' logs stay in ``.parsley/demo-logs/<UTC time>-<prefix>/`` in the
repository (git-ignored); the output names the directory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson
from confluent_kafka.admin import AdminClient, NewTopic
from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from examples.mailing_list.app import TOPIC_SUFFIX_ENV, Topics
from examples.mailing_list.checker import RunReader, Verdict, print_verdict
from examples.mailing_list.ingest import (
    DEFAULT_COUNT,
    MAX_RECORD_BYTES,
    IngestPlan,
    IngestReport,
    ingest,
)
from examples.mailing_list.naive import NaiveResult, count_naive
from examples.mailing_list.threads import (
    compute_threads,
    disorder,
    load_messages,
    repo_root,
    resolve_data_path,
)

__all__ = ["Coordinator", "DemoSettings", "HoldRecord", "LocalBroker", "create_topics",
           "example_blocker", "log_dir", "main", "process_holds", "run_demo"]

APP: Final = "examples.mailing_list.app"
_CONFIG_ENV: Final = ("PARSLEY_BOOTSTRAP_SERVERS", "PARSLEY_APPLICATION_ID_PREFIX",
                      "PARSLEY_STATE_DIR")
"""``PARSLEY_*`` variables that would override the coordinators' config files."""
HOLD_POLL_S: Final = 0.25
"""Status poll interval while ``digest`` catches up, s: often enough to see its peak hold."""
FETCH_PARTITION_BYTES: Final = 262_144
"""Tasks' consumers' ``max.partition.fetch.bytes`` (librdkafka default 1 MiB): a fetch
brings about 35 posts but thousands of threaded events, so digest's catch-up holds
events for longer, long enough for the status samples to see it."""
STATUS_INTERVAL_MS: Final = 200
"""The coordinators' task status period, ms (default 1000): digest catches up on 5,000
posts in a few seconds, so a report a second old would miss most of its holding."""
BIN: Final = Path(sys.executable).parent
"""The virtual environment's ``bin``: ``parsley-coordinator`` and ``parsley-devbroker``."""


def _tool(name: str) -> str:
    local = BIN / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FileNotFoundError(f"{name} not found beside {sys.executable} nor on PATH; "
                                "install the project (make venv)")
    return found


@dataclass(frozen=True)
class DemoSettings:
    """One run's settings (the command-line flags).

    Attributes:
        bootstrap_servers: an existing broker, or ``None`` to start a local one.
        count: messages to replay (``None``: all).
        data: the archive file, or ``None`` for ``$PARSLEY_DEMO_DATA`` / the default.
        partitions: partitions of each topic = tasks of each process.
        rate_per_s: ingest rate, posts per second (0: unlimited).
        delay_every: hold back every N-th post (0: none).
        delay_ms: for how long, ms.
        suffix: topic name suffix (``None``: none on an own broker, a random one otherwise).
        digest_delay_s: extra wait after the replay before ``digest`` starts, s.
        digest_after: start ``digest`` once this many posts are replayed
            (``None``: after the replay and ``digest_delay_s``).
        together: run both processes under one coordinator
            (``app:PROCESSES``) from the start; ``digest`` then keeps pace
            instead of catching up, and holds are brief.
        timeout_s: give up waiting for the checker after this long without progress, s.
        keep: keep the run's topics (on a given broker) for inspection.
        live: draw the progress bar and table in place (else print plain lines).
    """

    bootstrap_servers: str | None = None
    count: int | None = DEFAULT_COUNT
    data: str | None = None
    partitions: int = 4
    rate_per_s: float = 0.0
    delay_every: int = 0
    delay_ms: int = 0
    suffix: str | None = None
    digest_delay_s: float = 0.0
    digest_after: int | None = None
    together: bool = False
    timeout_s: float = 120.0
    keep: bool = False
    live: bool = True


class LocalBroker:
    """A broker of our own: ``parsley-devbroker up --dir <tmp>``, and ``down`` at the end.

    Never touches a broker it did not start (other ``--dir``\\ s are other brokers).
    """

    def __init__(self, say: Callable[[str], None]) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="parsley-demo-broker-"))
        self._say = say
        self.bootstrap = ""

    def up(self) -> str:
        """Start it; returns ``host:port``.

        Raises:
            RuntimeError: ``parsley-devbroker up`` failed (its output is in the message).
        """
        self._say(f"starting a local Kafka broker (parsley-devbroker up --dir {self._dir}) ...")
        done = subprocess.run([_tool("parsley-devbroker"), "up", "--dir", str(self._dir)],
                              capture_output=True, text=True, timeout=600)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines or not lines[-1].startswith("bootstrap.servers="):
            raise RuntimeError(f"parsley-devbroker up failed ({done.returncode}): "
                               f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
        self.bootstrap = lines[-1].split("=", 1)[1]
        return self.bootstrap

    def down(self) -> None:
        """Stop it and remove its data."""
        subprocess.run([_tool("parsley-devbroker"), "down", "--dir", str(self._dir)],
                       capture_output=True, timeout=120)
        shutil.rmtree(self._dir, ignore_errors=True)


def create_topics(bootstrap_servers: str, topics: Topics, partitions: int,
                  timeout_s: float = 30.0) -> None:
    """Create the three topics with ``partitions`` partitions and 4 MiB records.

    Raises:
        KafkaException: the broker refused (e.g. a topic already exists).
        TimeoutError: a topic was not served with a leader per partition in time.
    """
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 3})
    config = {"max.message.bytes": str(MAX_RECORD_BYTES)}
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=config)
                                   for name in topics.all()], request_timeout=timeout_s)
    for future in futures.values():
        future.result(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    for name in topics.all():
        while True:
            desc = admin.list_topics(name, timeout=10).topics.get(name)
            if (desc is not None and desc.error is None and len(desc.partitions) == partitions
                    and all(p.leader >= 0 for p in desc.partitions.values())):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {name} not served in {timeout_s} s")
            time.sleep(0.1)


def delete_run_topics(bootstrap_servers: str, topics: Topics, prefix: str) -> None:
    """Delete the run's topics and its processes' changelogs (names starting ``<prefix>-``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 3})
    existing = admin.list_topics(timeout=10).topics
    doomed = [t for t in existing if t in topics.all() or t.startswith(f"{prefix}-")]
    if doomed:
        for future in admin.delete_topics(doomed, request_timeout=30).values():
            with contextlib.suppress(Exception):
                future.result(timeout=30)


@dataclass
class Coordinator:
    """One ``parsley-coordinator run`` subprocess for one attribute of the app module.

    Attributes:
        attribute: ``THREADER``, ``DIGEST`` or ``PROCESSES``.
        config_path: its TOML configuration (prefix, state dir, client properties);
            ``parsley-coordinator status --json --config <it>`` reads its status.
        log_path: where its stderr goes.
    """

    attribute: str
    config_path: Path
    log_path: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    last_status: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def write_config(path: Path, bootstrap: str, prefix: str, state_dir: Path) -> None:
        """A coordinator configuration: 4 MiB producer records like the topics, and
        task status reports every :data:`STATUS_INTERVAL_MS` (fresh enough for the
        0.25 s polls that look for the peak hold, :data:`HOLD_POLL_S`)."""
        path.write_text(
            f'bootstrap_servers = "{bootstrap}"\n'
            f'application_id_prefix = "{prefix}"\n'
            f'state_dir = "{state_dir}"\n'
            f"status_interval_ms = {STATUS_INTERVAL_MS}\n"
            "\n[kafka_properties]\n"
            f'"producer.message.max.bytes" = {MAX_RECORD_BYTES}\n'
            f'"consumer.max.partition.fetch.bytes" = {FETCH_PARTITION_BYTES}\n')

    def command(self) -> list[str]:
        """The ``run`` command line."""
        return [_tool("parsley-coordinator"), "run", f"{APP}:{self.attribute}",
                "--config", str(self.config_path), "--restart", "transient"]

    def start(self) -> None:
        """Start it; its stderr goes to :attr:`log_path`."""
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's life
        self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                     env=self.env, cwd=repo_root(), start_new_session=True)
        log.close()

    def status(self, timeout_s: float = 20.0) -> dict[str, Any]:
        """``parsley-coordinator status --json``, parsed; ``{}`` when it gives no answer."""
        try:
            done = subprocess.run([_tool("parsley-coordinator"), "status", "--json",
                                   "--config", str(self.config_path)],
                                  capture_output=True, timeout=timeout_s, env=self.env,
                                  cwd=repo_root())
        except subprocess.TimeoutExpired:
            return {}
        if done.returncode != 0:
            return {}
        try:
            parsed = orjson.loads(done.stdout)
        except orjson.JSONDecodeError:
            return {}
        if isinstance(parsed, dict):
            self.last_status = parsed
            return parsed
        return {}

    def alive(self) -> bool:
        """Whether the subprocess is still running."""
        return self.proc is not None and self.proc.poll() is None

    def stop(self, deadline_s: float = 60.0) -> int | None:
        """SIGTERM (the coordinator's bounded shutdown), SIGKILL after ``deadline_s``.

        Returns:
            Its exit status (negative: killed by that signal), or ``None`` if never started.
        """
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        return self.proc.returncode


def _blockers(held: dict[str, Any]) -> str:
    parts = []
    for b in held.get("blockers") or []:
        settled = b.get("settled")
        parts.append(f"{b.get('topic')}-{b.get('partition')} needs {b.get('required')}, "
                     f"settled {'none' if settled is None else settled}")
    # A head with no blocker waits only for the task's next delivery pass
    # (docs/runbooks.md): it is queued behind nothing.
    return "; ".join(parts) or "nothing it waits for, delivered at the next step"


def short_topic(topic: object) -> str:
    """``list.posts.<run suffix>`` -> ``posts``: the demo's topics without prefix and suffix."""
    return str(topic).removeprefix("list.").split(".")[0]


def short_blocker(held: dict[str, Any]) -> str:
    """A held head and its first blocker in one short cell for the table (pure).

    Args:
        held: one ``held`` entry of a task in ``status --json``.

    Returns:
        e.g. ``threaded-1@118 ← posts-1 needs 123 (at 122)`` (``at none``: the
        blocking channel settled nothing yet; `` +N`` when N more blockers);
        ``threaded-1@118`` when no blocker is named.
    """
    text = f"{short_topic(held.get('topic'))}-{held.get('partition')}@{held.get('head')}"
    blockers = held.get("blockers") or []
    if not blockers:
        return text
    b = blockers[0]
    settled = b.get("settled")
    text += (f" \u2190 {short_topic(b.get('topic'))}-{b.get('partition')} needs "
             f"{b.get('required')} (at {'none' if settled is None else settled})")
    return text + (f" +{len(blockers) - 1}" if len(blockers) > 1 else "")


def status_rows(status: dict[str, Any]) -> list[tuple[str, ...]]:
    """Rows of the status table from one ``status --json`` answer (pure).

    One row per process: its name and state (with the refusal reason after a
    stop), the rest blank. Under it one row per task: ``task <n>``, the task's own
    state from its last report (``-`` where the answer has none), pid, held
    count, the first held channel's head and its blocker (:func:`short_blocker`),
    lag (offsets), frontier bytes.
    """
    rows: list[tuple[str, ...]] = []
    for name, proc in sorted((status.get("processes") or {}).items()):
        state = str(proc.get("state"))
        if proc.get("refusal_reason"):
            state += f" {proc['refusal_reason']}"
        rows.append((name, state, "", "", "", "", ""))
        for task in sorted(proc.get("tasks") or [], key=lambda t: t.get("task", 0)):
            held = task.get("held") or []
            count = sum(int(h.get("count") or 0) for h in held)
            head = short_blocker(held[0]) if held else ""
            lag = task.get("lag")
            rows.append((f"  task {task.get('task')}", str(task.get("state") or "-"),
                         str(task.get("pid")), str(count), head,
                         "-" if lag is None else str(lag), str(task.get("frontier_bytes", "-"))))
    return rows


def status_lines(status: dict[str, Any]) -> list[str]:
    """One line per process: state, tasks, held total, lag total, and the first held head."""
    return [line for _name, _held, line in process_lines(status)]


def process_lines(status: dict[str, Any]) -> list[tuple[str, int, str]]:
    """``(process, messages held, line)`` per process of one ``status --json`` answer,
    the line as :func:`status_lines` gives it (pure)."""
    lines = []
    for name, proc in sorted((status.get("processes") or {}).items()):
        tasks = proc.get("tasks") or []
        held = sum(int(h.get("count") or 0) for t in tasks for h in (t.get("held") or []))
        lag = sum(int(t.get("lag") or 0) for t in tasks)
        text = (f"{name} {proc.get('state')}: {len(tasks)} tasks, held {held}, lag {lag}")
        if proc.get("refusal_reason") or proc.get("failure_detail"):
            text += f", stopped: {proc.get('refusal_reason')} {proc.get('failure_detail')}"
        heads = [(t, h) for t in tasks for h in (t.get("held") or [])]
        # A head waiting for a cause says more than one only queued behind a delivery pass.
        first = next((th for th in heads if th[1].get("blockers")), heads[0] if heads else None)
        if first is not None:
            t, h = first
            text += (f"; task {t.get('task')} holds {h.get('topic')}-{h.get('partition')}"
                     f"@{h.get('head')}: {_blockers(h)}")
        lines.append((name, held, text))
    return lines


class PlainStatus:
    """Which ``status:`` lines the plain display prints, sample by sample.

    Every :data:`PERIOD_S` each process's line, unless it is the same as the last one
    printed for that process; and a line that shows messages held at once (at most one
    every :data:`HOLD_EVERY_S` per process), since ``digest``'s holds last about a second
    and a line every period alone would miss them.
    """

    PERIOD_S: Final = 5.0
    HOLD_EVERY_S: Final = 1.0

    def __init__(self) -> None:
        self._period_at = float("-inf")
        self._printed: dict[str, str] = {}
        self._hold_at: dict[str, float] = {}

    def lines(self, statuses: Sequence[dict[str, Any]], now: float) -> list[str]:
        """The lines to print for one sample of every coordinator's answer at ``now`` (s,
        monotonic)."""
        due = now - self._period_at >= self.PERIOD_S
        if due:
            self._period_at = now
        out = []
        for status in statuses:
            for name, held, line in process_lines(status):
                if line == self._printed.get(name):
                    continue
                holding = held > 0 and now - self._hold_at.get(name, float("-inf")) \
                    >= self.HOLD_EVERY_S
                if due or holding:
                    out.append(line)
                    self._printed[name] = line
                    if held > 0:
                        self._hold_at[name] = now
        return out


def example_blocker(held: dict[str, Any]) -> str | None:
    """One held head and what it waits for, in words, or ``None`` without a blocker (pure).

    Args:
        held: one ``held`` entry of a task in ``parsley-coordinator status --json``
            (docs/operations.md "Status" shape: ``topic``, ``partition``, ``head`` offset,
            ``blockers``).

    Returns:
        e.g. ``list.threaded-1@118 waited for list.posts-1 up to 123 (settled 122)``;
        ``settled none`` where the blocking channel has settled nothing yet.
    """
    blockers = held.get("blockers") or []
    if not blockers:
        return None
    b = blockers[0]
    settled = b.get("settled")
    return (f"{held.get('topic')}-{held.get('partition')}@{held.get('head')} waited for "
            f"{b.get('topic')}-{b.get('partition')} up to {b.get('required')} "
            f"(settled {'none' if settled is None else settled})")


def process_holds(status: dict[str, Any], process: str = "digest") -> tuple[int, str | None]:
    """Messages ``process`` holds in one ``status --json`` answer, and one example (pure).

    Returns:
        (held messages summed over its tasks and channels, :func:`example_blocker`
        of the first held head that has a blocker, or ``None``); ``(0, None)`` when
        the answer does not name the process.
    """
    proc = (status.get("processes") or {}).get(process) or {}
    total, example = 0, None
    for task in sorted(proc.get("tasks") or [], key=lambda t: t.get("task", 0)):
        for held in task.get("held") or []:
            total += int(held.get("count") or 0)
            if example is None:
                example = example_blocker(held)
    return total, example


def process_waited(status: dict[str, Any], process: str = "digest") -> dict[int, int]:
    """Per task of ``process``, its ``waited`` count in one ``status --json`` answer: the
    heads its engine found waiting for a cause not delivered yet (pure)."""
    proc = (status.get("processes") or {}).get(process) or {}
    return {int(t.get("task", 0)): int(t.get("waited") or 0) for t in proc.get("tasks") or []}


@dataclass
class HoldRecord:
    """What ``digest`` held back over the status samples seen, with an example.

    Attributes:
        process: the process watched.
        samples: answers observed.
        peak: the largest held total in one answer (messages).
        example: a blocker from the peak answer (or the first one seen, if the
            peak answer had none), :func:`example_blocker`'s words.
        waited: per task, the most waits its engine reported (``waited``: heads that
            waited for a cause, each holding its channel back; counted by the engine
            however short the wait, so a sample need not catch it).
    """

    process: str = "digest"
    samples: int = 0
    peak: int = 0
    example: str | None = None
    waited: dict[int, int] = field(default_factory=dict)
    _last: dict[int, int] = field(default_factory=dict)

    def observe(self, status: dict[str, Any]) -> None:
        """Take one ``status --json`` answer into account (one naming the process)."""
        if self.process not in (status.get("processes") or {}):
            return
        held, example = process_holds(status, self.process)
        self.samples += 1
        for task, count in process_waited(status, self.process).items():
            # A count below the last one is a new execution of the task (a respawn, a
            # rebalance): the earlier one's waits stay counted.
            last = self._last.get(task, 0)
            self.waited[task] = self.waited.get(task, 0) + (count - last if count >= last
                                                            else count)
            self._last[task] = count
        if held > self.peak:
            self.peak = held
            self.example = example or self.example
        elif self.example is None:
            self.example = example

    def summary(self) -> str:
        """One line for the end of the run, e.g. ``digest held a channel back 17 times
        until a cause was delivered; up to 1087 messages held at once in a status
        sample, e.g. list.threaded-1@118 waited for list.posts-1 up to 123 (settled
        122)``."""
        waited = sum(self.waited.values())
        if waited == 0:
            if self.peak == 0:
                return (f"{self.process} held no message back ({self.samples} status "
                        "samples: nothing it received was ahead of its causes)")
            return (f"{self.process} never waited for a cause; up to {self.peak} messages "
                    "queued at once in a status sample, each deliverable at the next step")
        times = "1 time" if waited == 1 else f"{waited} times"
        text = f"{self.process} held a channel back {times} until a cause was delivered"
        if self.peak == 0:
            return (f"{text}; each hold was shorter than a status sample "
                    f"({self.samples} samples)")
        text = f"{text}; up to {self.peak} messages held at once in a status sample"
        return f"{text}, e.g. {self.example}" if self.example else text


def digest_label(steps: int | None) -> str:
    """The digest progress row's label; its bar counts posts handled (pure)."""
    if steps is None:
        return "digest: posts handled (catching up)"
    return f"digest: posts handled ({steps} steps)"


_HEADERS: Final = ("process", "state", "pid", "held", "held head \u2190 blocker", "lag",
                   "frontier B")
_BLOCKER: Final = 4
"""Index of the blocker column in :data:`_HEADERS`."""


def status_table(statuses: Sequence[dict[str, Any]]) -> Table:
    """The live status table over every coordinator's answer."""
    table = Table(title="parsley-coordinator status", title_justify="left", expand=False,
                  box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True)
    # One line per task. The blocker column is the one rich narrows first (it is
    # the only wrappable column), and its cells never wrap: they end in an ellipsis.
    for i, h in enumerate(_HEADERS):
        table.add_column(Text(h, no_wrap=True, overflow="ellipsis"), no_wrap=i != _BLOCKER,
                         overflow="ellipsis",
                         justify="right" if i in (2, 3, 5, 6) else "left")
    for status in statuses:
        for row in status_rows(status):
            table.add_row(*(Text(cell, no_wrap=True, overflow="ellipsis") if i == _BLOCKER
                            else cell for i, cell in enumerate(row)))
    return table


class _Display:
    """Progress bar and status table, drawn live on a terminal, as plain lines otherwise."""

    def __init__(self, console: Console, live: bool, total: int) -> None:
        self.console = console
        self.live = live and console.is_terminal
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                 disable=not self.live)
        self.task = self.progress.add_task("replay: posts sent to list.posts", total=total)
        self.digest_task: TaskID | None = None
        self.statuses: list[dict[str, Any]] = []
        self._live: Live | None = None
        self._plain = PlainStatus()

    def __enter__(self) -> _Display:
        if self.live:
            self._live = Live(self._render(), console=self.console, refresh_per_second=4,
                              transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.update(self._render())
            self._live.__exit__(None, None, None)
            self._live = None

    def _render(self) -> Group:
        return Group(self.progress, status_table(self.statuses))

    def advance(self, done: int) -> None:
        self.progress.update(self.task, completed=done)
        if self._live is not None:
            self._live.update(self._render())

    def digest_progress(self, handled: int, total: int, steps: int | None = None) -> None:
        """The second row: posts ``digest`` handled (checker's count) of ``total`` ingested."""
        label = digest_label(steps)
        if self.digest_task is None:
            self.digest_task = self.progress.add_task(label, total=total)
        self.progress.update(self.digest_task, completed=handled, total=total,
                             description=label)

    def say(self, text: str) -> None:
        self.console.print(text)

    def show_status(self, statuses: list[dict[str, Any]]) -> None:
        self.statuses = statuses
        if self.live:  # drawn in place while live; nothing printed before or after
            if self._live is not None:
                self._live.update(self._render())
            return
        for line in self._plain.lines(statuses, time.monotonic()):
            self.console.print(f"  status: {line}", highlight=False, soft_wrap=True)


class _StatusPoller:
    """Polls every coordinator's ``status --json`` on its own thread, every ``interval_s``.

    After :meth:`focus`, the coordinators running ``digest`` are polled every
    :data:`HOLD_POLL_S` (their holding lasts about a second) and the others
    every ``interval_s`` still.
    """

    def __init__(self, coordinators: list[Coordinator], display: _Display,
                 interval_s: float = 2.0) -> None:
        self._coordinators = coordinators
        self._display = display
        self._interval_s = interval_s
        self._focus: list[Coordinator] = []
        self.holds = HoldRecord()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="status-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def focus(self, coordinators: Sequence[Coordinator]) -> None:
        """Poll ``coordinators`` every :data:`HOLD_POLL_S` from now on (``digest`` catching up)."""
        self._focus = list(coordinators)

    def _run(self) -> None:
        latest: dict[int, dict[str, Any]] = {}
        last_all = time.monotonic()
        while not self._stop.wait(HOLD_POLL_S if self._focus else self._interval_s):
            now = time.monotonic()
            every = not self._focus or now - last_all >= self._interval_s
            if every:
                last_all = now
            for c in list(self._coordinators):
                if not c.alive() or not (every or any(c is f for f in self._focus)):
                    continue
                answer = c.status()
                if answer:
                    self.holds.observe(answer)
                    latest[id(c)] = answer
            self._display.show_status(list(latest.values()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def caught_up_since(answer: dict[str, Any], process: str, age_limit_ms: float) -> bool:
    """Whether ``process`` is caught up in one ``status --json`` answer by reports every
    one of its tasks made within the last ``age_limit_ms`` (pure)."""
    proc = (answer.get("processes") or {}).get(process) or {}
    tasks = proc.get("tasks") or []
    return bool(proc.get("caught_up")) and bool(tasks) and all(
        int(t.get("updated_ms_ago") or 0) < age_limit_ms for t in tasks)


def _await_caught_up(coordinator: Coordinator, process: str, timeout_s: float,
                     poll_s: float = 0.5) -> float | None:
    """Wait until ``process`` under ``coordinator`` is caught up (``status --json``'s
    ``caught_up``: running, nothing held, nothing left to read) in two answers in a
    row, ``poll_s`` apart, each from reports its tasks made after this call began (a
    report from before the replay ended can say caught up too).

    Returns:
        Seconds waited, or ``None`` when ``timeout_s`` passed first or the coordinator
        exited (the run goes on; its verdict says what happened).
    """
    began = time.monotonic()
    in_a_row = 0
    while time.monotonic() - began < timeout_s and coordinator.alive():
        since_ms = (time.monotonic() - began) * 1000.0
        answer = coordinator.status(timeout_s=5.0)
        in_a_row = in_a_row + 1 if caught_up_since(answer, process, since_ms) else 0
        if in_a_row == 2:
            return time.monotonic() - began
        time.sleep(poll_s)
    return None


@dataclass
class DemoOutcome:
    """What a run ended with."""

    verdict: Verdict | None = None
    naive: NaiveResult | None = None
    ingest: IngestReport | None = None
    exit_codes: dict[str, int | None] = field(default_factory=dict)

    @property
    def incomplete(self) -> str | None:
        """Why the verdict does not cover the whole input, or ``None`` (:func:`incompleteness`)."""
        if self.verdict is None or self.ingest is None:
            return "no verdict: the run ended before the checker judged it"
        return incompleteness(self.verdict, self.ingest.posts)

    @property
    def ok(self) -> bool:
        """A clean verdict over every post ingested, and a naive count."""
        return (self.verdict is not None and self.naive is not None and self.verdict.ok
                and self.incomplete is None)


def incompleteness(verdict: Verdict, posts_ingested: int) -> str | None:
    """Why ``verdict`` does not judge the whole input, or ``None`` when it does (pure).

    A clean verdict over part of the input proves nothing about the rest, so the
    checker must have read exactly the posts the ingester had acknowledged.

    Args:
        verdict: the checker's verdict.
        posts_ingested: post records the broker acknowledged to the ingester
            (:attr:`IngestReport.posts`; end markers not included).

    Returns:
        A one-line reason, or ``None``.
    """
    if verdict.messages != posts_ingested:
        return (f"INCOMPLETE: the checker read {verdict.messages} posts from list.posts, "
                f"but {posts_ingested} were ingested; the verdict does not cover the input")
    return None


@contextlib.contextmanager
def _broker(settings: DemoSettings, say: Callable[[str], None]) -> Iterator[tuple[str, bool]]:
    if settings.bootstrap_servers:
        yield settings.bootstrap_servers, False
        return
    broker = LocalBroker(say)
    try:
        yield broker.up(), True
    finally:
        say("stopping the local broker ...")
        broker.down()


def log_dir(root: Path, prefix: str, now: float | None = None) -> Path:
    """Create and return where a run's coordinator logs go, kept after the run.

    Args:
        root: the repository root (``.parsley/`` in it is git-ignored).
        prefix: the run's application id prefix, which makes the name unique.
        now: the run's start, s since the epoch (default: now).

    Returns:
        ``<root>/.parsley/demo-logs/<UTC yyyymmddThhmmssZ>-<prefix>/``, created;
        under the system's temporary directory instead when ``root`` is not writable.
    """
    name = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}-{prefix}"
    for base in (root / ".parsley" / "demo-logs",
                 Path(tempfile.gettempdir()) / "parsley-demo-logs"):
        try:
            (base / name).mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        return base / name
    raise OSError(f"cannot create a log directory for {prefix} under {root} nor the temp dir")


def run_demo(settings: DemoSettings, console: Console | None = None) -> DemoOutcome:
    """Run the whole demo (see the module docstring) and print the verdict last.

    The coordinators' logs are kept in :func:`log_dir` (named in the output).

    Raises:
        FileNotFoundError: the archive file or a command is missing.
        RuntimeError: the broker could not be started.
        KafkaException: topics could not be created or written.
    """
    console = console or Console(highlight=False, soft_wrap=True)
    data = resolve_data_path(settings.data)
    everything = load_messages(data)
    threads = compute_threads(everything)
    chosen = everything if settings.count is None else everything[:settings.count]
    facts = disorder(chosen, threads)
    outcome = DemoOutcome()
    work = Path(tempfile.mkdtemp(prefix="parsley-demo-"))
    with _broker(settings, console.print) as (bootstrap, own):
        suffix = settings.suffix if settings.suffix is not None else (
            "" if own else f".{uuid.uuid4().hex[:8]}")
        topics = Topics.with_suffix(suffix)
        prefix = f"mldemo-{uuid.uuid4().hex[:8]}"
        logs = log_dir(repo_root(), prefix)
        console.print(f"broker {bootstrap}; topics {', '.join(topics.all())} "
                      f"({settings.partitions} partitions each); application id prefix {prefix}")
        console.print(f"input: {facts.messages} messages from {data.name}: "
                      f"{facts.duplicate_arrivals} repeated Message-IDs, "
                      f"{facts.replies_before_parent} replies before their parent, "
                      f"{facts.orphans} replies whose parent never arrives, "
                      f"{facts.threads} threads")
        create_topics(bootstrap, topics, settings.partitions)
        env = dict(os.environ)
        env[TOPIC_SUFFIX_ENV] = suffix
        for name in _CONFIG_ENV:  # the run's own config file decides these
            env.pop(name, None)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(repo_root()), *filter(None, [env.get("PYTHONPATH")])])
        coordinators: list[Coordinator] = []

        def coordinator(attribute: str) -> Coordinator:
            state = work / attribute.lower()
            state.mkdir()
            cfg = work / f"{attribute.lower()}.toml"
            Coordinator.write_config(cfg, bootstrap, prefix, state)
            c = Coordinator(attribute, cfg, logs / f"{attribute.lower()}.log", env)
            c.start()
            coordinators.append(c)
            console.print(f"started {attribute.lower()}: {' '.join(c.command())}  "
                          f"(status: parsley-coordinator status --json --config {cfg}; "
                          f"log {c.log_path})", soft_wrap=True)
            return c

        display = _Display(console, settings.live, len(chosen))
        poller = _StatusPoller(coordinators, display)
        reader: RunReader | None = None
        try:
            coordinator("PROCESSES" if settings.together else "THREADER")
            poller.start()
            with display:
                plan = IngestPlan(settings.count, settings.rate_per_s, settings.delay_every,
                                  settings.delay_ms)
                digest: list[Coordinator] = list(coordinators) if settings.together else []

                def progress(done: int) -> None:
                    display.advance(done)
                    if settings.digest_after is not None and done >= settings.digest_after \
                            and not digest:
                        digest.append(coordinator("DIGEST"))

                outcome.ingest = ingest(bootstrap, topics.posts, chosen, threads, plan,
                                        on_progress=progress)
                display.say(f"replayed {outcome.ingest.posts} posts "
                            f"({outcome.ingest.bytes_sent / 1e6:.1f} MB"
                            + (f", {outcome.ingest.delayed} delayed by --delay-every"
                               if outcome.ingest.delayed else "")
                            + f") in {outcome.ingest.elapsed_s:.1f} s; "
                            "end-of-input markers sent")
                if not digest:
                    # digest catches up on the whole backlog: every threaded event is
                    # there, small, ahead of the posts it names (README, "See it work").
                    waited = _await_caught_up(coordinators[0], "threader", settings.timeout_s)
                    display.say(
                        f"threader not caught up after {settings.timeout_s:g} s (or its "
                        "coordinator exited); starting digest anyway" if waited is None else
                        f"threader caught up {waited:.1f} s after the replay; "
                        "starting digest on the whole backlog")
                    if settings.digest_delay_s:
                        time.sleep(settings.digest_delay_s)
                    display.digest_progress(0, outcome.ingest.posts)
                    digest.append(coordinator("DIGEST"))
                poller.focus(digest)  # catch the peak of the hold-back
                reader = RunReader(bootstrap, topics)
                outcome.verdict = _wait_complete(reader, coordinators, display,
                                                 settings.timeout_s, outcome.ingest.posts)
            poller.stop()
            console.print("naive consumer: reading list.posts and list.threaded from the "
                          "beginning ...")
            outcome.naive = count_naive(bootstrap, topics)
        finally:
            poller.stop()
            for c in coordinators:
                outcome.exit_codes[c.attribute] = c.stop()
            if reader is not None:
                reader.close()
            if not own and not settings.keep:
                with contextlib.suppress(Exception):
                    delete_run_topics(bootstrap, topics, prefix)
        stopped = ", ".join(f"{name.lower()} exit {code}"
                            for name, code in outcome.exit_codes.items())
        console.print(f"coordinators stopped: {stopped}; their logs are kept in {logs}")
    shutil.rmtree(work, ignore_errors=True)  # configs and state; the logs stay
    verdict = outcome.verdict
    naive = outcome.naive
    if verdict is not None and naive is not None:
        incomplete = outcome.incomplete
        print_verdict(verdict, naive.inversions, extra=[
            f"digest handled {verdict.steps} deliveries (posts and threaded events), "
            f"threaded events {verdict.threaded} "
            f"({verdict.misplaced} contradicting their posts); "
            f"naive consumer saw {naive.inversions} of {naive.threaded} threaded events "
            "before their post or their parent's",
            poller.holds.summary(),
            *([incomplete] if incomplete else [])])
    return outcome


def _wait_complete(reader: RunReader, coordinators: list[Coordinator], display: _Display,
                   timeout_s: float, posts_ingested: int) -> Verdict:
    """Re-judge every 2 s until the checker has read all ``posts_ingested`` posts and
    every input is handled, or nothing moves for ``timeout_s`` (the caller then
    reports the shortfall, :func:`incompleteness`)."""
    last_seen = (-1, -1)
    last_move = time.monotonic()
    while True:
        verdict = reader.refresh()
        complete = (verdict.messages == posts_ingested and verdict.lost == 0
                    and verdict.handled == verdict.messages > 0)
        display.digest_progress(verdict.handled, posts_ingested, verdict.steps)
        if complete:
            time.sleep(2.0)  # anything still in flight would show as a duplicate
            verdict = reader.refresh()
            display.digest_progress(verdict.handled, posts_ingested, verdict.steps)
            return verdict
        if (verdict.steps, verdict.messages) != last_seen:
            last_seen, last_move = (verdict.steps, verdict.messages), time.monotonic()
        elif time.monotonic() - last_move > timeout_s:
            display.say(f"no progress (digest steps, posts read) for {timeout_s:.0f} s; "
                        "judging what is there")
            return verdict
        if not all(c.alive() for c in coordinators):
            dead = [c.attribute for c in coordinators if not c.alive()]
            display.say(f"coordinator {', '.join(dead)} exited; judging what is there "
                        f"(logs: {', '.join(str(c.log_path) for c in coordinators)})")
            return reader.refresh()
        time.sleep(2.0)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m examples.mailing_list.demo``; exit 0 on a clean verdict."""
    ap = argparse.ArgumentParser(
        prog="python -m examples.mailing_list.demo",
        description="Thread a real mailing list through two Parsley processes and check "
                    "the result independently.")
    ap.add_argument("--bootstrap-servers", help="use this broker instead of starting one")
    ap.add_argument("--all", action="store_true", help="replay all 42,700 messages")
    ap.add_argument("--count", type=int, default=DEFAULT_COUNT,
                    help=f"messages to replay (default {DEFAULT_COUNT})")
    ap.add_argument("--data", help="messages.jsonl (default: $PARSLEY_DEMO_DATA, else "
                                   "../shared/data/lkml-linux-ext4/messages.jsonl)")
    ap.add_argument("--partitions", type=int, default=4,
                    help="partitions per topic = tasks per process (default 4)")
    ap.add_argument("--rate", type=float, default=0.0, help="posts per second (0: unlimited)")
    ap.add_argument("--delay-every", type=int, default=0, help="hold back every N-th post")
    ap.add_argument("--delay-ms", type=int, default=0, help="for this many ms")
    ap.add_argument("--digest-delay", type=float, default=0.0,
                    help="seconds to wait after the replay before starting digest")
    ap.add_argument("--digest-after", type=int,
                    help="start digest once this many posts are replayed (default: after "
                         "the replay)")
    ap.add_argument("--together", action="store_true",
                    help="run threader and digest under one coordinator (app:PROCESSES) "
                         "from the start")
    ap.add_argument("--suffix", help="topic name suffix (default: none on an own broker, "
                                     "random on a given one)")
    ap.add_argument("--timeout", type=float, default=120.0,
                    help="give up after this many seconds without progress")
    ap.add_argument("--keep", action="store_true", help="keep the run's topics")
    ap.add_argument("--plain", action="store_true", help="plain output, no live display")
    args = ap.parse_args(argv)
    settings = DemoSettings(
        bootstrap_servers=args.bootstrap_servers, count=None if args.all else args.count,
        data=args.data, partitions=args.partitions, rate_per_s=args.rate,
        delay_every=args.delay_every, delay_ms=args.delay_ms, suffix=args.suffix,
        digest_delay_s=args.digest_delay, digest_after=args.digest_after,
        together=args.together,
        timeout_s=args.timeout, keep=args.keep,
        live=not args.plain)
    try:
        outcome = run_demo(settings)
    except FileNotFoundError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("demo: interrupted; everything it started was stopped", file=sys.stderr)
        return 130
    if outcome.verdict is None or outcome.naive is None:
        print(f"demo: {outcome.incomplete or 'no naive count'}", file=sys.stderr)
        return 1
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
