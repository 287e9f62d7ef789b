"""One task's step: feed a polled batch to the engine, deliver, frame, write, commit.

:class:`TaskStep` owns the per-execution state of a running task — the engine, the
handler frame, the stores and the open transaction's account — and does the
exactly-once step (docs/model.md, "Restart"): :meth:`TaskStep.feed` hands the fetched
records to the engine; :meth:`TaskStep.drain` delivers deliverable heads in batches
through the handler frame (a pass lasts at most ``pass_s``, leaving :attr:`TaskStep.more`
set); :meth:`TaskStep.commit` writes the engine's deltas, the stores' writes and the read
positions in the one transaction. A transaction is opened lazily by the first record fed
(or the first delivery) and none exists while idle. The step in full:
docs/architecture.md, "The worker", "The step".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException, Message

from parsley.engine.channel import ChannelId
from parsley.engine.engine import ProcessEngine
from parsley.frame import HandlerFrame
from parsley.task_stores import TaskStores
from parsley.wire import CAUSES_HEADER
from workers.fastpath import STOP_EFFECTS, STOP_RAISED, STOP_RECORD, fast_frame
from workers.pacing import MAX_DELIVERY_BATCH, delivery_batches
from workers.transaction import TaskTransaction

__all__ = ["TaskStep"]


class TaskStep:
    """The step of one task over one execution of its engine.

    Args:
        task: the task index ``i`` (the changelog partition written).
        engine: a started :class:`ProcessEngine`.
        frame: the task's handler frame (reading ``stores``).
        stores: the task's declared stores.
        txn: the task's transactional producer.
        channels: received topic name -> its channel (topic id, partition ``i``).
        ordering_topic: the ordering changelog topic.
        store_topics: store name -> its changelog topic.
        close_after_s: how long a transaction may stay open before :meth:`drain`
            commits it between two deliveries, s (:func:`workers.pacing.close_after_s`).
        close: commits the open transaction (the worker's commit, which has the
            consumer's group metadata); ``None``: :meth:`drain` never commits.
        pass_s: the longest one :meth:`drain` pass runs before it returns to the
            caller's loop, s; ``None``: no limit but the mid-drain commit. Both bounds
            are checked between delivery batches, each sized to take a tenth of the
            shorter (:func:`workers.pacing.delivery_batches`).
        fast: run plain deliveries through the native fast path
            (:mod:`workers.fastpath`) when the native core runs; ``False``: every
            delivery through ``frame`` (the reference, for differential tests).
        read_ends: a map this step raises in place, ``(topic, partition)`` -> the offset
            past the last record fed (never lowered; a step after a rebuild is given
            its predecessor's, so it spans the process's life); ``None``: a new one.

    Attributes:
        more: the last :meth:`drain` pass ended with heads possibly still deliverable
            (its time ran out or it committed mid-drain): the next pass continues.
        fed: messages fed; duplicates: of them, dropped as duplicates.
        delivered: messages delivered, the open transaction's included.
        delivered_committed: messages delivered in transactions that committed.
        handler_batches: calls of batch handlers (``Process.receives_batch``), the open
            transaction's included. A call counts once the handler has been called, whether
            it returned or raised, and even when planning or producing its sends then fails
            (a refusal before the call, an undecodable entry say, is no call); the same on
            the native fast path (``FastFrame.run``'s ``calls``) as through the frame
            (:attr:`parsley.frame.HandlerFrame.batch_calls`).
        handler_batches_committed: of them, in transactions that committed.
        read_ends: as the argument: what an aborted transaction's reads reached, which
            the identity check weighs against a deleted topic
            (:func:`workers.identity.unread_on_deleted`).
        batches: sizes the engine's delivery batches from their measured cost.
    """

    def __init__(
        self,
        *,
        task: int,
        engine: ProcessEngine,
        frame: HandlerFrame,
        stores: TaskStores,
        txn: TaskTransaction,
        channels: Mapping[str, ChannelId],
        ordering_topic: str,
        store_topics: Mapping[str, str],
        close_after_s: float | None = None,
        close: Callable[[], Any] | None = None,
        pass_s: float | None = None,
        fast: bool = True,
        read_ends: dict[tuple[str, int], int] | None = None,
    ) -> None:
        self.task = task
        self.read_ends = {} if read_ends is None else read_ends
        self.engine = engine
        self.frame = frame
        self.stores = stores
        self.txn = txn
        self._channels = dict(channels)
        # Keyed by the identity of the channel objects the engine was given, which it
        # hands back (kept alive by _channels, so an id is never reused): an int's hash,
        # no ChannelId.__hash__ call per delivery.
        self._by_channel = {id(ch): (name, ch.partition) for name, ch in channels.items()}
        # The native fast path of a delivery batch (None without the native core).
        self._fast = fast_frame(frame, txn, channels) if fast else None
        self._ordering_topic = ordering_topic
        self._store_topics = dict(store_topics)
        self.close_after_s = close_after_s
        self.close = close
        self.pass_s = pass_s
        self.more = False
        # Batch-handled channels (Process.receives_batch), by channel object identity:
        # their deliveries go to the frame's run_batch in runs of at most max_records.
        limits = frame.batch_limits
        self._batched = {id(ch): limits[name] for name, ch in channels.items()
                         if name in limits}
        self.batches = delivery_batches(close_after_s if close is not None else None, pass_s,
                                        max([MAX_DELIVERY_BATCH, *limits.values()]))
        self._positions: dict[tuple[str, int], int] = {}
        self.fed = 0
        self.delivered = 0
        self.delivered_committed = 0  # delivered in transactions that committed
        self._delivered_open = 0  # delivered in the open transaction
        self.duplicates = 0
        self.handler_batches = 0  # batch-handler calls (see the class docstring)
        self.handler_batches_committed = 0  # of them, in transactions that committed
        self._batches_open = 0

    def feed(self, messages: Sequence[Message]) -> int:
        """Feed fetched records (no errors among them) to the engine.

        Args:
            messages: records of the task's received partitions, in fetch order.

        Returns:
            How many were fed.

        Raises:
            ParsleyFailClosedError: the engine's receipt refusals
                (``UNDECODABLE_METADATA``, ``METADATA_BUDGET_EXCEEDED``,
                ``OUT_OF_ORDER_FEED``, ``COVERED_POSITION_FED``).
            SubstrateError: beginning the transaction failed.
        """
        if not messages:
            return 0
        self.txn.begin()
        # One call for the batch. A refusal leaves the records before it fed, but the
        # caller then aborts, and nothing of this feed (positions, counts) is kept.
        count, duplicates, last = self.engine.feed_records(messages, self._channels)
        # Per batch, not per record: the read position is the last fed offset + 1.
        positions = self._positions
        ends = self.read_ends
        task = self.task
        for topic, offset in last.items():
            key = (topic, task)
            positions[key] = offset + 1
            if offset >= ends.get(key, 0):
                ends[key] = offset + 1
        self.fed += count
        self.duplicates += duplicates
        return count

    def drain(self) -> int:
        """Deliver deliverable heads, for one pass; write their effects into the open
        transaction.

        Heads come from the engine in batches (``ProcessEngine.deliver_batch``), each
        handled whole before anything else is decided: a head taken counts as delivered
        in the engine's next deltas, so no commit may fall between taking a head and
        handling it. Each batch is sized by :attr:`batches` to take about a tenth of
        the shorter of ``close_after_s`` and ``pass_s`` at the slowest recent cost of
        a delivery (the first batch is one head), and to fit in the time left before
        the nearer of the two at that cost; so a bound is overrun only when the
        handler slows within a batch, by at most that batch at its new cost
        (:func:`workers.pacing.delivery_batches`). Each send gets a fresh header list
        ending with the ``parsley.causes`` stamp: the frame's list, which a
        headers-aware serializer may have kept, is never changed. A run of consecutive
        heads of a batch-handled channel (``Process.receives_batch``), at most its
        ``max_records``, goes to its handler in one call
        (:meth:`parsley.frame.HandlerFrame.run_batch`), and every send of that call
        carries the header of the run's last delivery: the frontier as of its end. With
        the native core, plain entries and plain runs are handled in Rust instead
        (:mod:`workers.fastpath`), with the same results; what they hand back is
        finished here.

        A transaction open for ``close_after_s`` is committed between two batches
        (through ``close``), so one long drain spans several transactions, each well
        inside ``transaction.timeout.ms`` (docs/operations.md, "Transaction time bound").
        Committing there is sound: every fed message not yet delivered is still held,
        and the commit persists it with the read positions.

        The pass then ends, as it does after ``pass_s`` (checked between two
        batches, after at least one delivery), with :attr:`more` set: the caller
        consumes (within ``max.poll.interval.ms``), reports status (within the
        coordinator's stale bound) and calls again to continue (docs/operations.md,
        "Transaction time bound"). Ending between two batches is sound: each delivered
        message's effects and ordering delta are in the open transaction, which the
        next commit carries whole with the read positions fed; the heads left stay in
        the engine, in causal order. A batch shorter than asked for means nothing
        else is deliverable (handling feeds the engine nothing): the pass ends with
        :attr:`more` clear.

        Returns:
            How many messages were delivered.

        Raises:
            ParsleyFailClosedError: a frame or engine refusal (nothing of the
                step is committed: the caller aborts).
            HandlerFailure: the handler raised.
            SubstrateError: producing failed.
        """
        deliver_batch = self.engine.deliver_batch
        frame = self.frame
        run = frame.run
        plan = frame.plan
        raised = frame.handler_raised
        fast = self._fast
        txn = self.txn
        send = txn.send_counted
        # The producer's own call on the hot path; anything but a plain success goes
        # through send_counted, which waits out a full queue and classifies a failure.
        produce = txn.producer.produce
        on_delivery = txn.ledger.on_delivery
        apply = self.stores.apply
        by_channel = self._by_channel
        latching = self.frame.latching
        batched = self._batched
        batches = self.batches
        close = self.close
        close_after = self.close_after_s if close is not None else None
        clock = time.monotonic
        ends_at = None if self.pass_s is None else clock() + self.pass_s
        count = sent = 0
        exhausted = False
        self.more = True
        try:
            while True:
                # Between batches only: a head taken counts as delivered in the engine's
                # deltas, so a commit must never fall between taking a head and handling it.
                if close_after is not None and txn.open \
                        and clock() - txn.opened_at >= close_after:
                    txn.ledger.sent(sent)
                    self.delivered += count
                    self._delivered_open += count
                    total = count
                    count = sent = 0
                    assert close is not None
                    close()
                    return total
                if exhausted:
                    self.more = False
                    break
                if ends_at is not None and count and clock() >= ends_at:
                    break
                # No more heads than fit in the time left before the nearer bound at the
                # slowest recent cost (workers.pacing.BatchSizer.limit).
                began = clock()
                if close_after is not None:
                    left = close_after - (began - txn.opened_at) if txn.open else close_after
                    if ends_at is not None and ends_at - began < left:
                        left = ends_at - began
                    limit = batches.limit(left)
                elif ends_at is not None:
                    limit = batches.limit(ends_at - began)
                else:
                    limit = batches.size()
                batch = deliver_batch(limit)
                if not batch:
                    self.more = False
                    break
                if not txn.open:
                    txn.begin()
                slowest = 0.0
                with latching():
                    i, n = 0, len(batch)
                    while i < n:
                        if fast is not None:
                            # Plain entries and runs in Rust (workers.fastpath), up to the
                            # first that needs this frame, which is finished here.
                            try:
                                done, done_sent, calls, took, stop = fast.run(batch, i)
                            except BaseException:
                                # What it handled before it raised is delivered and sent.
                                done, done_sent, calls = fast.partial()
                                count += done
                                sent += done_sent
                                self.handler_batches += calls
                                self._batches_open += calls
                                raise
                            count += done
                            sent += done_sent
                            self.handler_batches += calls
                            self._batches_open += calls
                            if took > slowest:
                                slowest = took
                            if stop is None:
                                break
                            # ...plus the time it already spent on the entry handed back.
                            i, kind, payload, spent = stop
                        else:
                            kind, payload, spent = STOP_RECORD, None, 0.0
                        mark = clock() - spent
                        ch, position, timestamp_ms, key, value, headers, causes = batch[i]
                        topic, partition = by_channel[id(ch)]
                        run_max = batched.get(id(ch))
                        if run_max is None:
                            handled = 1
                        else:
                            # A run of this batch-handled channel's heads, one handler call;
                            # every send carries the frontier after the run's last delivery,
                            # a send without a timestamp that delivery's timestamp.
                            end = _run_end(batch, i, run_max)
                            handled = end - i
                            last = batch[end - 1]
                            timestamp_ms, causes = last[2], last[6]
                        if kind == STOP_RECORD:
                            if run_max is None:
                                sends, writes = run(topic, partition, position, timestamp_ms,
                                                    key, value, headers)
                            else:
                                # The frame counts its handler's call (the fast path counted
                                # the runs it called the handler for itself, in `calls`).
                                before = frame.batch_calls
                                try:
                                    sends, writes = frame.run_batch(topic, partition, [
                                        (e[1], e[2], e[3], e[4], e[5]) for e in batch[i:end]])
                                finally:
                                    made = frame.batch_calls - before
                                    self.handler_batches += made
                                    self._batches_open += made
                        elif kind == STOP_EFFECTS:
                            # A run's failure names its first delivery (position).
                            sends, writes = plan(payload, topic, partition, position,
                                                 timestamp_ms)
                        elif kind == STOP_RAISED:
                            raised(payload, topic, partition, position)
                        else:  # STOP_PRODUCE: planned, stamped, refused by produce()
                            refused, sends = payload
                            writes = ()
                            send(*refused)
                            sent += 1
                        if writes:
                            apply(writes)
                        if sends:
                            stamp = (CAUSES_HEADER, causes)
                            for out, k, v, h, ts in sends:
                                # A fresh list: a headers-aware serializer may keep the one
                                # it was given, and must not see the stamp appear in it.
                                stamped = [*h, stamp]
                                try:
                                    # (no typing.cast: a call per send; the stub types
                                    # header values as str | bytes | None, ours are bytes)
                                    produce(out, v, k, on_delivery=on_delivery, timestamp=ts,
                                            headers=stamped)  # type: ignore[arg-type]
                                except (BufferError, KafkaException):
                                    # Nothing was queued: the full path retries, or raises
                                    # the classified failure.
                                    send(out, k, v, stamped, ts)
                                sent += 1
                        count += handled
                        took = (clock() - mark) / handled
                        if took > slowest:
                            slowest = took
                        i += handled
                mark = clock()
                batches.observe(len(batch), mark - began, slowest)
                # A short batch: nothing else was deliverable, and handling a batch
                # feeds the engine nothing, so none is now.
                exhausted = len(batch) < limit
        finally:
            # The ledger counts produce calls per drain, not per record.
            txn.ledger.sent(sent)
            self.delivered += count
            self._delivered_open += count
        return count

    def commit(self, group_metadata: Any) -> bool:
        """Write the merged changelog records, send the read positions, commit.

        Returns:
            Whether a transaction was committed (``False`` when none was open).

        Raises:
            ParsleyFailClosedError: ``SUBSTRATE_MISCONFIGURED`` (a record over a
                size limit) or an engine refusal.
            SubstrateError: classified commit failure; the caller aborts (or stops).
        """
        txn = self.txn
        if not txn.open:
            return False
        deltas = self.engine.take_deltas()
        if deltas:
            txn.write_changelog(self._ordering_topic, self.task, deltas)
        for store, pending in self.stores.pending().items():
            txn.write_changelog(self._store_topics[store], self.task, pending.items())
        txn.commit(self._positions, group_metadata)
        self.delivered_committed += self._delivered_open
        self._delivered_open = 0
        self.handler_batches_committed += self._batches_open
        self._batches_open = 0
        self._positions = {}
        self.stores.committed()
        return True

    @property
    def pending_positions(self) -> Mapping[tuple[str, int], int]:
        """The read positions the open transaction will commit, ``(topic, partition) ->
        next offset to read``."""
        return self._positions

    def advance_positions(self, positions: Mapping[tuple[str, int], int]) -> None:
        """Raise the read positions the next commit sends (never lowers one).

        For a partition consumed to its end, the consumer's position past the
        trailing transaction markers and aborted records (``workers.offsets``,
        "Read positions"); the caller opens the transaction when none is.
        """
        for key, offset in positions.items():
            if offset > self._positions.get(key, -1):
                self._positions[key] = offset

    def touch(self) -> None:
        """Open a transaction so that engine deltas made outside a feed (an identity
        verdict applied from the punctuation) are committed with the next commit."""
        self.txn.begin()


def _run_end(batch: Sequence[tuple[Any, ...]], start: int, limit: int) -> int:
    """The end (exclusive) of the run of entries of ``batch[start]``'s channel from
    ``start``: consecutive entries of the same channel object, at most ``limit``."""
    ch = batch[start][0]
    end, stop = start + 1, min(len(batch), start + limit)
    while end < stop and batch[end][0] is ch:
        end += 1
    return end
