"""The gateway's replica of the read model: thread rows, and the past they are valid for.

:class:`ThreadView` reads the projection's rows from ``<topics>.threads`` (read_committed,
from the start) and applies each one ``lag_s`` after it arrives: a deliberately lagging
replica, as a read replica or a cache behind a busy projection would be. It keeps the
latest row per thread and the model-wide recorded past: the merge of every applied row's
past. The rows of one projection task reach one partition of the threads topic in
delivery order, so once a row recording ``(channel, p)`` is applied, every comment at or
below ``p`` on that channel is in the view (docs/session.md, "The read path").

It runs in the gateway's event loop: the blocking ``consume`` runs in a worker thread,
and readers wait on an :class:`asyncio.Condition` until the past covers their token.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import orjson
from confluent_kafka import Consumer, KafkaError, TopicPartition

from parsley.session import CausalPast, Coverage

__all__ = ["ThreadView"]

_BATCH = 500
_MAX_WAIT_S = 0.05


class ThreadView:
    """Thread rows applied ``lag_s`` after they are read, and their model-wide past.

    Args:
        bootstrap_servers: ``host:port[,...]``.
        topic: the projection's rows topic.
        partitions: its partition count.
        lag_s: how long each row waits before it is applied, s (0: at once).
        settings: more librdkafka properties.
    """

    def __init__(self, bootstrap_servers: str, topic: str, partitions: int, *,
                 lag_s: float = 0.0, **settings: Any) -> None:
        self._consumer = Consumer({
            "bootstrap.servers": bootstrap_servers, "group.id": "gateway-view-unused",
            "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", **settings})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._lag_s = lag_s
        self._pending: deque[tuple[float, dict[str, Any]]] = deque()
        self._rows: dict[str, tuple[Any, ...]] = {}
        self._past = CausalPast.none()
        self._changed = asyncio.Condition()
        self._stopping = False
        self.failure: BaseException | None = None
        """Why the view stopped applying rows, if it did; readers then time out."""

    @property
    def past(self) -> CausalPast:
        """The model-wide recorded past of the rows applied so far."""
        return self._past

    def comments(self, thread: str) -> tuple[Any, ...] | None:
        """The thread's comments as applied so far, or ``None`` for an unknown thread."""
        return self._rows.get(thread)

    async def run(self) -> None:
        """Read and apply rows until :meth:`stop`; records a failure in :attr:`failure`."""
        try:
            while not self._stopping:
                wait = _MAX_WAIT_S
                if self._pending:
                    wait = min(wait, max(0.0, self._pending[0][0] - time.monotonic()))
                messages = await asyncio.to_thread(self._consumer.consume, _BATCH, wait)
                arrived = time.monotonic()
                for msg in messages:
                    error = msg.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            continue
                        raise RuntimeError(f"reading the rows: {error}")
                    value = msg.value()
                    if value is None:
                        raise RuntimeError(f"a row without a value at {msg.topic()}@"
                                           f"{msg.offset()}: not the projection's")
                    self._pending.append((arrived + self._lag_s, orjson.loads(value)))
                await self._apply_due()
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self._consumer.close()

    async def _apply_due(self) -> None:
        now = time.monotonic()
        applied = False
        while self._pending and self._pending[0][0] <= now:
            _, row = self._pending.popleft()
            self._rows[row["thread"]] = tuple(row["comments"])
            self._past = self._past.merge(CausalPast.decode(bytes.fromhex(row["past"])))
            applied = True
        if applied:
            async with self._changed:
                self._changed.notify_all()

    def stop(self) -> None:
        """Ask :meth:`run` to return after its current read (at most ~50 ms)."""
        self._stopping = True

    async def covering(self, token: CausalPast, timeout_s: float) -> Coverage:
        """Wait until the view's past covers ``token``, or ``timeout_s`` passes.

        Returns:
            The coverage at the end of the wait: ``covers`` when the view may serve the
            token's holder, otherwise the gaps it still waits for.
        """
        coverage = self._past.coverage_of(token)
        if coverage.covers:
            return coverage
        try:
            async with self._changed:
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: self._past.coverage_of(token).covers),
                    timeout_s)
        except TimeoutError:
            pass
        return self._past.coverage_of(token)
