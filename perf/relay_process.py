"""A relay in a subprocess that prints ``ready``: the baseline's and the peers' common part.

:class:`RelayProcess` starts ``argv``, waits for a ``ready`` line on its stdout, gives its
pid for the CPU and memory samples, and stops it with SIGTERM (SIGKILL after 30 s), as
``perf.runs`` does with every relay (docs/performance.md, "End-to-end relay").
"""

from __future__ import annotations

import subprocess
import threading
import time
from uuid import UUID

__all__ = ["RelayProcess"]


class RelayProcess:
    """``argv`` in a subprocess.

    Args:
        name: the run kind, for messages.
        argv: the command; it must print ``ready`` on a line of its own once it relays.
        warmup_records: 1 when the run relays an untimed backlog before the timed one (a
            JVM's JIT warm-up, ``perf.peers``), else 0.
    """

    def __init__(self, name: str, argv: list[str], warmup_records: int = 0) -> None:
        self.name = name
        self.argv = argv
        self.warmup_records = warmup_records
        self.proc: subprocess.Popen[str] | None = None
        self.topic_ids: dict[str, UUID] = {}

    def start(self, timeout_s: float) -> None:
        """Spawn it and wait for its ``ready`` line.

        Raises:
            RuntimeError: it exited, or said nothing within ``timeout_s``.
        """
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, text=True)
        ready = threading.Event()

        def watch() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.strip() == "ready":
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        deadline = time.monotonic() + timeout_s
        while not ready.wait(0.2):
            code = self.proc.poll()
            if code is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the {self.name} relay did not get ready "
                                   f"(exit status {code})")

    def pids(self) -> list[int]:
        """The relay's pid."""
        return [self.proc.pid] if self.proc else []

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 30 s)."""
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
