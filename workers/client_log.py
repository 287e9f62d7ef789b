"""librdkafka's own log lines through Python logging, with the task, repeats held back.

Without a ``logger`` in its configuration, librdkafka prints its lines to stderr itself
(``%3|1701...|FAIL|...``), past Python logging: no task named, no level filter, and
about twenty lines a second per client while a broker is down. confluent-kafka's
``logger`` property hands each line to a Python logger instead, at the matching level
(syslog 0-2 CRITICAL, 3 ERROR, 4 WARNING, 5-6 INFO, 7 DEBUG), from the client's
``poll``/``consume`` calls (docs/operations.md, "Logging").

* :class:`RepeatFilter` passes a line once per window and counts the repeats it held;
* :func:`task_client_logger` is a task's logger: ``parsley.worker.kafka``, every line
  prefixed ``<app-id> task <i>: `` and carrying ``parsley_application_id`` and
  ``parsley_task`` attributes for a handler's format;
* :func:`serve_client_logs` polls clients no other call polls, so their lines are
  handed over instead of queueing.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any, Final

__all__ = [
    "WORKER_CLIENT_LOG",
    "RepeatFilter",
    "serve_client_logs",
    "task_client_logger",
    "with_task_logger",
]

_NUMBERS = re.compile(r"\d+")


class RepeatFilter(logging.Filter):
    """Pass a librdkafka log line the first time; hold its repeats for ``window_s``.

    Lines are the same when they differ only in numbers ("after 0ms", "#producer-1"
    vs "-2"). A repeat after the window passes with "(N similar line(s) suppressed
    in the last W s)" appended. A down broker otherwise prints ~20 lines a second.

    Args:
        window_s: the hold, s.
        clock: monotonic seconds (tests pass a fake).
    """

    def __init__(self, window_s: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self._window_s = window_s
        self._clock = clock
        self._seen: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = _NUMBERS.sub("#", record.getMessage())
        now = self._clock()
        with self._lock:
            first, held = self._seen.get(key, (None, 0))
            if first is not None and now - first < self._window_s:
                self._seen[key] = (first, held + 1)
                return False
            self._seen[key] = (now, 0)
            if len(self._seen) > 1000:
                self._seen = {key: (now, 0)}
        if held:
            record.msg = f"{record.getMessage()} ({held} similar line(s) suppressed in the " \
                         f"last {self._window_s:g} s)"
            record.args = ()
        return True


WORKER_CLIENT_LOG: Final = logging.getLogger("parsley.worker.kafka")
"""Where a worker's Kafka clients log, repeats held by :class:`RepeatFilter`."""
WORKER_CLIENT_LOG.addFilter(RepeatFilter())


class _TaskAdapter(logging.LoggerAdapter):  # type: ignore[type-arg]
    """Prefixes ``<app-id> task <i>: `` and adds the task's attributes to each record."""

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]
                ) -> tuple[Any, MutableMapping[str, Any]]:
        extra = self.extra or {}
        kwargs["extra"] = {**extra, **kwargs.get("extra", {})}
        return f"{extra['parsley_application_id']} task {extra['parsley_task']}: {msg}", kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        """``LoggerAdapter.log``, defined on this class itself. confluent-kafka calls it with
        a producer's fatal error pending (docs/architecture.md, "Recovery in place"); a
        lookup that missed this class's own attributes cleared that error and raised
        ``AttributeError: '_TaskAdapter' object has no attribute 'log'`` in its place. Found
        here, the call usually fails as a ``SystemError`` whose cause is the fatal error;
        other lookups inside may still clear it, so the verdict does not rest on this
        (:func:`workers.verdicts.unmasked` asks the producer)."""
        super().log(level, msg, *args, **kwargs)


def task_client_logger(application_id: str, task: int) -> logging.LoggerAdapter:  # type: ignore[type-arg]
    """The ``logger`` for task ``task``'s clients (a ``LoggerAdapter`` over
    :data:`WORKER_CLIENT_LOG`)."""
    return _TaskAdapter(WORKER_CLIENT_LOG, {"parsley_application_id": application_id,
                                            "parsley_task": task})


def with_task_logger(properties: Mapping[str, Any], application_id: str,
                     task: int) -> dict[str, Any]:
    """``properties`` with ``logger`` set to :func:`task_client_logger` unless one is given."""
    out = dict(properties)
    out.setdefault("logger", task_client_logger(application_id, task))
    return out


def serve_client_logs(*clients: Any) -> None:
    """``poll(0)`` each client, handing its queued librdkafka lines to its logger.

    For clients no loop call polls (an admin client, a consumer between restores, a
    producer between transactions; a producer's delivery reports are recorded by its
    ledger whichever call serves them). A closed client (``RuntimeError``) is skipped;
    a ``KafkaException`` propagates to the caller's classification.
    """
    for client in clients:
        if client is None:
            continue
        with contextlib.suppress(RuntimeError):
            client.poll(0)
