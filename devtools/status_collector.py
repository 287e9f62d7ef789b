"""A collector of worker status messages, for tests and benchmarks that run workers alone.

Workers report over ZeroMQ PUSH (``workers/protocol.py``); :class:`StatusCollector` is the
PULL end a test or benchmark binds when it spawns a worker without a coordinator.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class NoWorkerMessage(RuntimeError):
    """:meth:`StatusCollector.wait_for` saw no matching worker message, or a worker stopped."""


class StatusCollector:
    """A ZeroMQ PULL socket on 127.0.0.1 collecting worker status/final messages (orjson).

    The one collector of the repository: the worker tests (through
    :mod:`devtools.worker_support`) and the benchmarks use it.

    The workers' side of the seam is ``workers.protocol``; a background thread
    appends every decoded message to :attr:`messages`.

    Attributes:
        endpoint: what to put in ``TaskSpec.status_endpoint``.
    """

    def __init__(self) -> None:
        import threading

        import zmq

        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.PULL)
        port = self._sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.messages: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = False
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        import orjson
        import zmq

        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop:
            if poller.poll(100):
                msg = orjson.loads(self._sock.recv())
                with self._lock:
                    self.messages.append(msg)

    def snapshot(self) -> list[dict[str, Any]]:
        """A copy of the messages so far."""
        with self._lock:
            return list(self.messages)

    def wait_for(self, pred: Callable[[dict[str, Any]], bool], timeout_s: float = 60.0,
                 since: int = 0, *, fail_on_stop: bool = False) -> dict[str, Any]:
        """The first message (at index >= ``since`` of :attr:`messages`) satisfying ``pred``.

        Args:
            pred: the test, given each decoded message.
            timeout_s: how long to wait, seconds.
            since: skip the messages received before this index.
            fail_on_stop: raise as soon as a worker's final message with a
                ``stop_kind`` other than ``CLEAN`` comes before a match (the
                benchmark's startup waits; a test waiting for a refusal leaves it off).

        Raises:
            NoWorkerMessage: none within ``timeout_s`` (the last message is quoted),
                or with ``fail_on_stop`` a worker stopped first (its final message is quoted).
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for m in self.snapshot()[since:]:
                if pred(m):
                    return m
                if fail_on_stop and m.get("kind") == "final" and m.get("stop_kind") != "CLEAN":
                    raise NoWorkerMessage(f"a worker stopped: {m}")
            time.sleep(0.05)
        snap = self.snapshot()
        last = snap[-1] if snap else None
        raise NoWorkerMessage(f"no matching worker message in {timeout_s} s; last: {last}")

    def final(self, pid: int, timeout_s: float = 60.0) -> dict[str, Any]:
        """The final message of worker ``pid``.

        Raises:
            NoWorkerMessage: none within ``timeout_s``.
        """
        return self.wait_for(lambda m: m.get("kind") == "final" and m.get("pid") == pid,
                             timeout_s)

    def close(self) -> None:
        """Stop the thread and close the socket."""
        self._stop = True
        self._thread.join(2)
        self._sock.close(0)
        self._ctx.term()
