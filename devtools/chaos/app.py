"""The chaos pipeline, loaded by ``parsley-coordinator run devtools.chaos.app:processes``.

One process, ``chaos``, receives two input topics of two partitions each, so it
runs as two tasks (task ``p`` receives partition ``p`` of each):

* ``A``: plain records;
* ``B``: records whose ``parsley.causes`` header names an ``A`` record of the
  same partition, so each ``B`` record must be delivered after its cause.

Every delivery is relayed to the output topic (one partition) as
``<topic>|<partition>|<offset>|<n>``, where ``n`` counts the task's deliveries
from that topic in its store ``counts``. Each task's sends land in the output in
its delivery order, so the output alone shows what each task delivered, in what
order, and whether its store saw each delivery exactly once (``n`` runs 1, 2, 3...).

The topic names come from the environment, because the coordinator imports
this module by name (docs/operations.md, "Chaos test and soak"):
``PARSLEY_CHAOS_TOPIC_A``, ``PARSLEY_CHAOS_TOPIC_B``, ``PARSLEY_CHAOS_TOPIC_OUT``.
"""

from __future__ import annotations

import os
from typing import Any

from parsley import Channel, Effects, Process, Store
from parsley.serdes import BYTES, JSON, STRING

PROCESS_NAME = "chaos"
"""The process name; its application id is ``<prefix>-chaos``."""

ENV_A = "PARSLEY_CHAOS_TOPIC_A"
ENV_B = "PARSLEY_CHAOS_TOPIC_B"
ENV_OUT = "PARSLEY_CHAOS_TOPIC_OUT"


def relay_value(topic: str, partition: int, offset: int, n: int) -> bytes:
    """The output value for one delivery: ``b"<topic>|<partition>|<offset>|<n>"``."""
    return f"{topic}|{partition}|{offset}|{n}".encode()


def parse_relay_value(value: bytes) -> tuple[str, int, int, int]:
    """Inverse of :func:`relay_value`: ``(topic, partition, offset, n)``.

    Raises:
        ValueError: not four ``|``-separated fields with integers in the last three.
    """
    topic, partition, offset, n = value.decode().rsplit("|", 3)
    return topic, int(partition), int(offset), int(n)


def pipeline(a: str, b: str, out: str) -> Process:
    """The ``chaos`` process over input topics ``a`` and ``b``, relaying to ``out``."""
    out_ch = Channel(out, BYTES, BYTES)
    counts = Store("counts", STRING, JSON)

    def handle(delivery: Any, state: Any) -> Effects:
        n = (state.get(counts, delivery.topic) or 0) + 1
        value = relay_value(delivery.topic, delivery.partition, delivery.offset, n)
        return (Effects.builder()
                .put(counts, delivery.topic, n)
                .send(out_ch, delivery.key, value)
                .build())

    return (Process(PROCESS_NAME)
            .receives(Channel(a, BYTES, BYTES), handle)
            .receives(Channel(b, BYTES, BYTES), handle)
            .sends(out_ch)
            .stores(counts))


def processes() -> list[Process]:
    """The processes to run, with topic names from the environment.

    Raises:
        KeyError: a ``PARSLEY_CHAOS_TOPIC_*`` variable is not set.
    """
    return [pipeline(os.environ[ENV_A], os.environ[ENV_B], os.environ[ENV_OUT])]
