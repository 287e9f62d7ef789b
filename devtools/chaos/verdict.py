"""The chaos run's verdict, computed from what an independent reader saw (pure).

Inputs: every committed record of the input topics (channel, offset and the
causes its ``parsley.causes`` header names), and the output topic's committed
records in offset order, each naming the delivery it relays
(``devtools.chaos.app.relay_value``). Nothing comes from the product's status.

Clauses (docs/model.md: exactly once, in causal order):

* lost: an input record with no output record;
* duplicated: an output record beyond the first for the same input record;
* causal violations: a task delivered a record before a cause on a channel it
  receives (the named record came later, or never), or delivered a channel out of
  offset order (a channel's earlier record is a cause of its later ones);
* state violations: the task's ``counts`` store did not see each delivery once
  (the ``n`` in a task's output for one topic is not 1, 2, 3, ... in order);
* foreign: an output record naming no committed input record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Channel = tuple[str, int]
"""``(topic, partition)``."""

EXAMPLES = 5
"""How many examples of each clause a verdict keeps."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One committed input record: its channel, offset, and the causes it names.

    ``causes`` maps a channel ``(topic, partition)`` to the offset of the named record.
    """

    channel: Channel
    offset: int
    causes: Mapping[Channel, int]


@dataclass(frozen=True, slots=True)
class OutputRecord:
    """One committed output record: the delivery it relays and the store's count ``n``."""

    channel: Channel
    offset: int
    n: int


@dataclass
class Verdict:
    """Counts per clause, with up to :data:`EXAMPLES` examples each.

    Attributes:
        inputs: committed input records; outputs: committed output records.
        lost, duplicated, causal, state, foreign: violation counts.
        examples: clause name -> example descriptions.
    """

    inputs: int = 0
    outputs: int = 0
    lost: int = 0
    duplicated: int = 0
    causal: int = 0
    state: int = 0
    foreign: int = 0
    examples: dict[str, list[str]] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """No violation of any clause, and at least one record went through."""
        return self.inputs > 0 and not (self.lost or self.duplicated or self.causal
                                        or self.state or self.foreign)

    def note(self, clause: str, text: str) -> None:
        """Count one violation of ``clause`` and keep ``text`` as an example."""
        setattr(self, clause, getattr(self, clause) + 1)
        kept = self.examples.setdefault(clause, [])
        if len(kept) < EXAMPLES:
            kept.append(text)

    def summary(self) -> str:
        """One line: the counts, then the examples."""
        head = (f"{'CLEAN' if self.clean else 'BAD'}: {self.inputs} input records, "
                f"{self.outputs} output records; lost {self.lost}, duplicated "
                f"{self.duplicated}, causal violations {self.causal}, state violations "
                f"{self.state}, foreign {self.foreign}")
        tails = [f"{k}: {'; '.join(v)}" for k, v in sorted(self.examples.items())]
        return "\n".join([head, *tails])


def _name(ch: Channel, offset: int) -> str:
    return f"{ch[0]}[{ch[1]}]@{offset}"


def judge(inputs: Iterable[InputRecord], outputs: Sequence[OutputRecord],
          received: Mapping[int, Iterable[str]]) -> Verdict:
    """Judge a run.

    Args:
        inputs: every committed input record.
        outputs: the output topic's committed records, in offset order.
        received: task (= partition) -> the topics it receives; a cause on a channel
            ``(topic, p)`` counts for task ``p`` only when ``topic`` is received.

    Returns:
        The :class:`Verdict`.
    """
    verdict = Verdict()
    known: dict[tuple[Channel, int], InputRecord] = {}
    for rec in inputs:
        known[(rec.channel, rec.offset)] = rec
    verdict.inputs = len(known)
    verdict.outputs = len(outputs)
    seen: set[tuple[Channel, int]] = set()
    delivered_upto: dict[Channel, int] = {}  # highest offset delivered so far per channel
    delivered: set[tuple[Channel, int]] = set()
    counts: dict[Channel, int] = {}  # (topic, task) -> deliveries seen so far
    receives = {task: set(topics) for task, topics in received.items()}
    for out in outputs:
        key = (out.channel, out.offset)
        rec = known.get(key)
        if rec is None:
            verdict.note("foreign", f"output names {_name(*key)}, no committed input record")
            continue
        if key in seen:
            verdict.note("duplicated", f"{_name(*key)} relayed again")
        seen.add(key)
        _topic, task = out.channel
        expected_n = counts.get(out.channel, 0) + 1
        counts[out.channel] = expected_n
        if out.n != expected_n:
            verdict.note("state", f"task {task}: {_name(*key)} carried count {out.n}, "
                                  f"expected {expected_n}")
            counts[out.channel] = out.n
        before = delivered_upto.get(out.channel, -1)
        if out.offset < before and key not in delivered:
            verdict.note("causal", f"{_name(*key)} delivered after {_name(out.channel, before)}"
                                   " (channel out of order)")
        for cause_ch, cause_off in rec.causes.items():
            if cause_ch[1] != task or cause_ch[0] not in receives.get(task, set()):
                continue
            if (cause_ch, cause_off) not in delivered:
                verdict.note("causal", f"{_name(*key)} delivered before its cause "
                                       f"{_name(cause_ch, cause_off)}")
        delivered.add(key)
        delivered_upto[out.channel] = max(before, out.offset)
    for key in known:
        if key not in seen:
            verdict.note("lost", f"{_name(*key)} never relayed")
    return verdict
