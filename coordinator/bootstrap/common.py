"""What every bootstrap step shares: its errors, constants and refusal helper."""

from __future__ import annotations

import logging
from typing import Final

from confluent_kafka import KafkaError

from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "ADMIN_TIMEOUT_S",
    "ANSWER_SPACING_S",
    "BOOTSTRAP_CLIENT_PREFIX",
    "BOOTSTRAP_METADATA",
    "DEFAULT_GROUP_WINDOW_S",
    "STABLE_DEADLINE_S",
    "STABLE_RETRY_S",
    "TOPIC_ID_FLOOR",
    "UNKNOWN_ANSWERS",
    "UNKNOWN_CODES",
    "StartError",
    "StartRetryableError",
    "refuse",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

BOOTSTRAP_METADATA: Final = "parsley.bootstrap"
"""Commit metadata of every offset the bootstrap writes (facts §5, "Names on the cluster")."""
BOOTSTRAP_CLIENT_PREFIX: Final = "parsley-bootstrap-"
"""Client id prefix of the bootstrap's clients (facts §5)."""
UNKNOWN_ANSWERS: Final = 3
ANSWER_SPACING_S: Final = 0.5
ADMIN_TIMEOUT_S: Final = 30.0
STABLE_RETRY_S: Final = 0.2
STABLE_DEADLINE_S: Final = 5.0
DEFAULT_GROUP_WINDOW_S: Final = 12.0
"""How long a member in the group may stay before the bootstrap calls it a conflict:
2 x the workers' 6 s session timeout, so a worker of a previous execution has left."""

UNKNOWN_CODES: Final = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})
TOPIC_ID_FLOOR: Final = "3.7.0"
"""The broker version below which topics have no ids (seed 001, SUBSTRATE_MISCONFIGURED)."""


class StartError(RuntimeError):
    """A start prerequisite is missing, or the cluster could not be queried.

    Java's plain ``IllegalStateException`` at start (seed 001, "If start
    threw"): a declared topic does not exist, the changelog could not be read,
    positions could not be listed. Create the topic, restore connectivity or
    check the ACLs, then retry. Nothing is running after it.
    """


class StartRetryableError(StartError):
    """A broker's metadata view lagged, or a sibling was mid-start; the message ends
    "Retry this start." (seed 001, "If start threw")."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{detail.rstrip('. ')}. Retry this start.")


def refuse(reason: Reason, detail: str) -> ParsleyFailClosedError:
    """The refusal ``reason`` with ``detail`` (to be raised by the caller)."""
    return ParsleyFailClosedError(reason, detail)
