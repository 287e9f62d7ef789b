"""The identity check at task initialisation (docs/model.md, "Pruning").

Every topic id the task's state names and has a name for is checked by describing that
name (confluent-kafka describes topics by name) and comparing ids. An id never bound to a
name is never judged dead. A topic that does not answer with its own id is corroborated:
three answers 500 ms apart under one 10 s deadline; three non-alive answers mean dead —
**recreated** if any resolved the name to another id, else **deleted**. A denied
describe counts as alive. A check that cannot be made leaves the ids *pending*; the
worker asks again from the status punctuation with :class:`Backoff` (one status
interval, doubling, capped at one minute).

Names of ids bound to none are learned while alive (:meth:`IdentityChecker.learn_names`,
as Java's ``AdminTopicIdentitySource``). While a task runs, its received topics are checked
every :data:`RECEIVED_CHECK_INTERVAL_S` (:class:`workers.guards.DeletionGuard`;
docs/architecture.md, "The worker", "Received-topic identity"). The pure core is
:func:`judge`, :class:`Backoff` and :func:`settled_detail`; :class:`IdentityChecker`
judges, over the admin queries of :mod:`workers.admin`.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final
from uuid import UUID

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from parsley import refusal_shapes as shapes
from parsley.engine.channel import ChannelId, describe_channel
from parsley.engine.engine import ProcessEngine
from parsley.engine.identity import DELETION_REMEDY, TopicVerdict
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.admin import list_topics, topic_ids
from workers.calls import CallStalled
from workers.kafka_errors import topic_authorization_failed, unknown_topic

__all__ = [
    "ANSWERS_NEEDED",
    "RECEIVED_CHECK_INTERVAL_S",
    "Answer",
    "Backoff",
    "IdentityChecker",
    "IdentityResult",
    "apply_received_verdicts",
    "judge",
    "settled_detail",
    "unread_on_deleted",
]

log = logging.getLogger("parsley.worker.identity")

ANSWERS_NEEDED: Final = 3
"""Consistent non-alive answers that make a topic dead (docs/model.md, "Pruning")."""
ANSWER_SPACING_S: Final = 0.5
"""Seconds between corroborating answers (docs/model.md, "Pruning")."""
CHECK_DEADLINE_S: Final = 10.0
"""One deadline for a topic's corroboration, s (docs/model.md, "Pruning")."""
RETRY_CAP_S: Final = 60.0
"""Identity retry backoff cap, s (docs/model.md, "Pruning"; Java's ``IDENTITY_RETRY_CAP``)."""
DESCRIBE_BATCH: Final = 500
"""Topic names per describe request while learning names."""
RECEIVED_CHECK_INTERVAL_S: Final = 10.0
"""How often a running task checks its received topics' identities, s. With the
corroboration (three answers 500 ms apart) a deletion is judged within about 12 s, well
inside the minute docs/failing-closed.md promises."""

_RUNBOOK: Final = "docs/runbooks.md, CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES"


def settled_detail(verdicts: Mapping[UUID, TopicVerdict],
                   channels: Mapping[str, ChannelId]) -> str | None:
    """The stop's detail when received topics were deleted with nothing held, or ``None``
    (pure; docs/failing-closed.md, "A received topic deleted while the process runs")."""
    gone = [name for name in sorted(channels)
            if verdicts.get(channels[name].topic_id) is TopicVerdict.DELETED]
    if not gone:
        return None
    named = ", ".join(describe_channel(channels[n], {channels[n].topic_id: n}) for n in gone)
    return (f"received {named} was deleted while the process ran; nothing was held on "
            "it, so its channel settled to its end and what waited on it was delivered and "
            "committed. The process cannot run with a received topic missing: remove the "
            "channel from the declaration and restart (a start refuses a missing received "
            "topic); a topic recreated under its name is refused CHANNEL_IDENTITY_CHANGED "
            f"and needs a reset ({_RUNBOOK}).")


def unread_on_deleted(
    verdicts: Mapping[UUID, TopicVerdict],
    channels: Mapping[str, ChannelId],
    read_ends: Mapping[tuple[str, int], int],
    covered: Callable[[ChannelId], int | None],
    floors: Mapping[tuple[str, int], int] | None = None,
) -> ParsleyFailClosedError | None:
    """The refusal for a deleted received topic the task read past what its state covers.

    A record the task read whose read was never committed (its transaction aborted, or
    was still open when the topic was deleted) is not in the committed state the task
    rebuilds from, and the topic it would be read again from is gone: it stays
    undelivered, so the deletion lost it, whether or not the rebuilt state holds
    anything on the channel (pure; docs/failing-closed.md, "A received topic deleted
    while the process runs").

    Args:
        verdicts: topic id -> verdict (pending ids omitted).
        channels: received topic name -> the task's channel on it.
        read_ends: ``(topic, partition)`` -> the offset past the last record the task
            fed from it in this process's life (``TaskStep.read_ends``), offsets.
        covered: the engine's coverage of a channel (``ProcessEngine.covered``): the
            highest position fed or known never to arrive, in the state as it stands.
        floors: ``(topic, partition)`` -> the highest committed read position a start
            of this process's life began from (offsets): nothing below it was read
            and left uncommitted, whatever the state's coverage says.

    Returns:
        ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES`` for the first such channel (in
        name order), naming the offsets read and not covered, or ``None``.
    """
    for name in sorted(channels):
        ch = channels[name]
        if verdicts.get(ch.topic_id) is not TopicVerdict.DELETED:
            continue
        end = read_ends.get((name, ch.partition))
        if end is None:
            continue
        done = covered(ch)
        first = max(0 if done is None else done + 1, (floors or {}).get((name, ch.partition), 0))
        if end <= first:
            continue
        return ParsleyFailClosedError(
            Reason.CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES,
            f"{shapes.channel_deleted_with_undelivered_messages(end - first, ch)} At most "
            f"that many: offsets {first} to {end - 1} of "
            f"{shapes.coordinates(ch, {ch.topic_id: name})} were read but their read was "
            "never committed (transaction markers among them count too). " + DELETION_REMEDY)
    return None


def apply_received_verdicts(
    engine: ProcessEngine,
    verdicts: Mapping[UUID, TopicVerdict],
    channels: Mapping[str, ChannelId],
    read_ends: Mapping[tuple[str, int], int] | None = None,
    floors: Mapping[tuple[str, int], int] | None = None,
) -> str | None:
    """Apply an identity check's verdicts to ``engine``; name the settled deletions.

    Args:
        engine: the task's engine.
        verdicts: topic id -> verdict (pending ids omitted).
        channels: received topic name -> the task's channel on it.
        read_ends, floors: what the task has read and where its starts began, as for
            :func:`unread_on_deleted`; ``None`` when it has read nothing.

    Returns:
        :func:`settled_detail` for received topics deleted with nothing held (their
        channels are now settled to their end), or ``None``.

    Raises:
        ParsleyFailClosedError: the engine's ``CHANNEL_DELETED_WITH_UNDELIVERED_MESSAGES``
            for a deleted received topic with held messages ("<n> received message(s)
            from topic '<name>' partition <p> (topic id <id>) remain undelivered ..."),
            ``CHANNEL_IDENTITY_CHANGED`` for a recreated one; then
            :func:`unread_on_deleted`'s refusal for one the task read past its state's
            coverage (records whose read was never committed).
    """
    # Judged before the engine settles the channel to its end (which covers everything).
    unread = unread_on_deleted(verdicts, channels, read_ends or {}, engine.covered, floors)
    engine.apply_identity(verdicts)
    if unread is not None:
        raise unread
    return settled_detail(verdicts, channels)


class Answer(enum.Enum):
    """One describe-by-name answer about a topic id."""

    SAME = "SAME"
    """The name resolves to the id: alive."""
    UNKNOWN = "UNKNOWN"
    """The broker does not know the name."""
    ELSEWHERE = "ELSEWHERE"
    """The name resolves to another id."""
    DENIED = "DENIED"
    """Describe was not authorized: treated as alive, never dead."""


def judge(answers: Sequence[Answer]) -> TopicVerdict | None:
    """The verdict from the answers gathered so far (docs/model.md, "Pruning").

    Returns:
        ``ALIVE`` as soon as one answer is SAME or DENIED; ``RECREATED`` or
        ``DELETED`` after :data:`ANSWERS_NEEDED` non-alive answers (recreated if
        any resolved the name elsewhere); ``None`` while undecided.
    """
    if any(a in (Answer.SAME, Answer.DENIED) for a in answers):
        return TopicVerdict.ALIVE
    if len(answers) < ANSWERS_NEEDED:
        return None
    if Answer.ELSEWHERE in answers:
        return TopicVerdict.RECREATED
    return TopicVerdict.DELETED


@dataclass
class Backoff:
    """When to ask a pending identity question again: ``first_s``, doubling, capped at ``cap_s``.

    Source: docs/model.md, "Pruning" ("starts at 1 s, doubles, and is capped at 1 min"); the
    Python backoff starts at one status interval (1 s).
    """

    first_s: float = 1.0
    cap_s: float = RETRY_CAP_S
    _delay: float = field(default=0.0, init=False)
    _due: float = field(default=0.0, init=False)

    def failed(self, now: float) -> None:
        """Record a failed attempt at monotonic time ``now`` (s)."""
        self._delay = self.first_s if self._delay == 0.0 else min(self._delay * 2, self.cap_s)
        self._due = now + self._delay

    def due(self, now: float) -> bool:
        """Whether the next attempt is due at ``now``."""
        return now >= self._due

    @property
    def delay_s(self) -> float:
        """The current delay, s (0 before any failure)."""
        return self._delay


@dataclass(frozen=True, slots=True)
class IdentityResult:
    """What one check found.

    Attributes:
        verdicts: topic id -> verdict for every id answered.
        pending: topic name -> id for the ids whose check could not be made.
    """

    verdicts: Mapping[UUID, TopicVerdict]
    pending: Mapping[str, UUID]


class _Unanswered(Exception):
    pass


class IdentityChecker:
    """Describes topics by name to judge the ids a task's state names.

    Args:
        admin: an AdminClient.
        deadline_s: the one deadline of a check, s (docs/model.md, "Pruning": 10 s).
        sleep: ``time.sleep`` (tests pass a fake).
        now: monotonic clock, s.
    """

    def __init__(
        self,
        admin: AdminClient,
        *,
        deadline_s: float = CHECK_DEADLINE_S,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._admin = admin
        self._deadline_s = deadline_s
        self._sleep = sleep
        self._now = now

    def _describe(self, names: Sequence[str], timeout_s: float) -> dict[str, UUID | Answer]:
        """One answer per name (:func:`workers.admin.topic_ids`): the id it resolves to,
        UNKNOWN or DENIED.

        Raises:
            _Unanswered: any other failure (no answer for these names).
        """
        out: dict[str, UUID | Answer] = {}
        for name, found in topic_ids(self._admin, names, timeout_s):
            if isinstance(found, UUID):
                out[name] = found
                continue
            err = found.args[0] if found.args else None
            kafka_err = err if isinstance(err, KafkaError) else None  # not a timeout's text
            if unknown_topic(kafka_err):
                out[name] = Answer.UNKNOWN
            elif topic_authorization_failed(kafka_err):
                out[name] = Answer.DENIED
            else:
                raise _Unanswered(str(err if err is not None else found)) from found
        return out

    def learn_names(self, topic_ids: Collection[UUID],
                    bound: Collection[str] = ()) -> dict[str, UUID]:
        """The current names of those of ``topic_ids`` that are alive.

        Lists the cluster's topics, then describes the names not in ``bound`` (and not
        internal, ``__`` prefixed) in batches of :data:`DESCRIBE_BATCH`, until every
        id is found or the one deadline (``deadline_s``) passes.

        Args:
            topic_ids: ids with no name bound (``ProcessEngine.unnamed_topic_ids``).
            bound: names already bound; never described again.

        Returns:
            name -> id for every id found alive; empty when the cluster does not
            answer (logged at INFO: the ids stay unnamed and are looked for again at
            the next initialisation; their entries linger, costing header bytes only).
        """
        wanted = set(topic_ids)
        if not wanted:
            return {}
        deadline = self._now() + self._deadline_s
        try:
            listed = list_topics(self._admin, self._deadline_s)
        except (KafkaException, CallStalled) as exc:
            log.info("topic names of %d upstream topic id(s) could not be learned (%s); "
                     "looking again at the next initialisation", len(wanted), exc)
            return {}
        skip = set(bound)
        names = sorted(n for n in listed.topics if n not in skip and not n.startswith("__"))
        found: dict[str, UUID] = {}
        for start in range(0, len(names), DESCRIBE_BATCH):
            remaining = deadline - self._now()
            if not wanted or remaining <= 0:
                break
            try:
                answers = self._describe(names[start:start + DESCRIBE_BATCH], remaining)
            except _Unanswered as exc:
                log.info("topic names of %d upstream topic id(s) could not be learned (%s); "
                         "looking again at the next initialisation", len(wanted), exc)
                break
            for name, answer in answers.items():
                if isinstance(answer, UUID) and answer in wanted:
                    found[name] = answer
                    wanted.discard(answer)
        return found

    @staticmethod
    def _answer(found: UUID | Answer, topic_id: UUID) -> Answer:
        if isinstance(found, Answer):
            return found
        return Answer.SAME if found == topic_id else Answer.ELSEWHERE

    def check(self, bindings: Mapping[str, UUID]) -> IdentityResult:
        """Judge every ``name -> id`` binding.

        Args:
            bindings: the topic names the state binds, with the ids it binds them to
                (only ids the state names; an id with no name is not passed).

        Returns:
            The verdicts, and what stays pending. Logs the lines of docs/model.md, "Pruning":
            ``describe denied for topic '<name>' (<id>); treating as denied, not dead``,
            ``topic identity could not be checked (<error>); continuing on the
            identities resolved at start, and asking again from the status
            punctuation`` and ``topic identity could not be corroborated for
            [<names>]; asking again``.
        """
        if not bindings:
            return IdentityResult({}, {})
        names = sorted(bindings)
        try:
            first = self._describe(names, self._deadline_s)
        except _Unanswered as exc:
            log.warning(
                "topic identity could not be checked (%s); continuing on the identities "
                "resolved at start, and asking again from the status punctuation", exc)
            return IdentityResult({}, dict(bindings))
        verdicts: dict[UUID, TopicVerdict] = {}
        answers: dict[str, list[Answer]] = {}
        for name in names:
            answer = self._answer(first[name], bindings[name])
            if answer is Answer.DENIED:
                log.warning("describe denied for topic '%s' (%s); treating as denied, not dead",
                            name, bindings[name])
            verdict = judge([answer])
            if verdict is not None:
                verdicts[bindings[name]] = verdict
            else:
                answers[name] = [answer]
        deadline = self._now() + self._deadline_s
        pending: dict[str, UUID] = {}
        while answers:
            remaining = deadline - self._now()
            if remaining <= ANSWER_SPACING_S:
                pending.update({n: bindings[n] for n in answers})
                break
            self._sleep(ANSWER_SPACING_S)
            try:
                found = self._describe(sorted(answers), deadline - self._now())
            except _Unanswered:
                pending.update({n: bindings[n] for n in answers})
                break
            for name in sorted(answers):
                answer = self._answer(found[name], bindings[name])
                if answer is Answer.DENIED:
                    log.warning(
                        "describe denied for topic '%s' (%s); treating as denied, not dead",
                        name, bindings[name])
                answers[name].append(answer)
                verdict = judge(answers[name])
                if verdict is not None:
                    verdicts[bindings[name]] = verdict
                    del answers[name]
        if pending:
            log.warning("topic identity could not be corroborated for [%s]; asking again",
                        ", ".join(sorted(pending)))
        return IdentityResult(verdicts, pending)
