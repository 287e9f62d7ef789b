"""Bootstrap step 3 (pre-commit): an empty group, then the bootstrap consumer commits.

A member that stays past a window is the group-protocol conflict of seed 001
(``SUBSTRATE_MISCONFIGURED``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    BOOTSTRAP_CLIENT_PREFIX,
    StartError,
    refuse,
    with_client_logger,
)
from coordinator.config import ParsleyConfig
from parsley.refusals import Reason

__all__ = ["await_empty_group", "bootstrap_consumer", "members"]


def members(admin: AdminClient, group: str) -> list[Any]:
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group]
        return list(desc.result().members or [])
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.GROUP_ID_NOT_FOUND:
            return []
        raise StartError(f"could not describe group '{group}': {exc}") from exc


def await_empty_group(
    admin: AdminClient, group: str, window_s: float, sleep: Callable[[float], None]
) -> None:
    """Wait until the group has no member; one that stays past the window is a conflict."""
    deadline = time.monotonic() + window_s
    while True:
        present = members(admin, group)
        if not present:
            return
        if time.monotonic() >= deadline:
            names = sorted(f"{m.client_id} ({m.member_id})" for m in present)
            raise refuse(
                Reason.SUBSTRATE_MISCONFIGURED,
                f"the group join has been refused as a protocol conflict for longer than "
                f"{window_s:g} s, so a member speaking another group protocol persists in "
                f"group '{group}': {names}. Something is in the consumer group under this "
                "application id that is not this process: a consumer configured with the "
                "application id as its group.id, or another instance's bootstrap member "
                f"that never left. List them with kafka-consumer-groups --describe --group "
                f"{group} --members, remove the foreign consumer, then restart.",
            )
        sleep(min(0.5, max(0.05, deadline - time.monotonic())))


def bootstrap_consumer(config: ParsleyConfig, group: str) -> Consumer:
    # workers.kafka has no public name for its client-prefix rules; the private one is
    # imported so the bootstrap consumer reads user properties exactly as workers do.
    from workers.kafka import _select

    props = _select(dict(config.kafka_properties), "consumer")
    props.update({
        "bootstrap.servers": config.bootstrap_servers,
        "group.id": group,
        "client.id": f"{BOOTSTRAP_CLIENT_PREFIX}{group}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "error",
        "allow.auto.create.topics": False,
        "isolation.level": "read_committed",
    })
    return Consumer(with_client_logger(props))
