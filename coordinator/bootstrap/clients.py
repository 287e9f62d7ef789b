"""Fresh Kafka clients for each bootstrap attempt, and admin answers bounded by the coordinator.

A client that lived through a broker outage can stay wedged after the broker is back:
every request it sends times out while a new client answers at once. So the
bootstrap never keeps a client between attempts: each start and each restart
attempt builds its own (:func:`new_admin`) and drops it when done, and every admin
answer is awaited with the coordinator's own deadline (:func:`answer`), never only
the client's ``request_timeout`` (docs/operations.md, "Broker outage").
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Final

from confluent_kafka.admin import AdminClient

from coordinator.bootstrap.common import ADMIN_TIMEOUT_S, StartError, with_client_logger
from coordinator.config import ParsleyConfig
from workers.kafka_config import admin_config

__all__ = ["ANSWER_MARGIN_S", "answer", "new_admin"]

ANSWER_MARGIN_S: Final = 5.0
"""s the coordinator waits for an admin answer beyond the request's own timeout
before it stops trusting the client."""


def new_admin(config: ParsleyConfig) -> AdminClient:
    """A new AdminClient on ``config``'s servers and properties (``admin.`` prefix applies).

    AdminClient has no ``close``: it is destroyed with its last reference, so a
    caller drops it when its attempt ends.

    Raises:
        ValueError: a user property Parsley owns.
    """
    return AdminClient(with_client_logger(
        admin_config(config.bootstrap_servers, config.kafka_properties)))


def answer(future: Any, what: str, timeout_s: float = ADMIN_TIMEOUT_S) -> Any:
    """``future.result()`` within ``timeout_s + ANSWER_MARGIN_S`` seconds.

    Args:
        future: a future an AdminClient call returned (a ``concurrent.futures.Future``).
        what: what was asked, for the message ("listing the committed positions
            of group 'g'").
        timeout_s: the ``request_timeout`` the call was made with, s.

    Returns:
        The future's result.

    Raises:
        KafkaException: the error the broker or client answered (unchanged).
        StartError: no answer within the bound ("... no answer within N s ...");
            the next attempt builds a fresh client.
    """
    bound = timeout_s + ANSWER_MARGIN_S
    try:
        return future.result(timeout=bound)
    except concurrent.futures.TimeoutError as exc:
        raise StartError(f"{what}: no answer within {bound:g} s (the client may be wedged "
                         "after a broker outage; the next attempt uses a new one)") from exc
