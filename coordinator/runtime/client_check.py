"""Per-process client properties librdkafka refuses, found before the start runs anything.

librdkafka checks a client's configuration when the client is built
(``fetch.max.bytes must be >= message.max.bytes``, an unknown name). A property given
for one process (``Process(..., kafka_properties=...)``, ``[process_kafka_properties.<p>]``)
reaches only that process's workers, so without this check it would surface as the
workers' SUBSTRATE stop after the bootstrap. :func:`check_process_clients` builds each
worker client of such a process once, without ``bootstrap.servers`` (nothing connects),
and turns a refusal into a ``ValueError`` naming the process (docs/operations.md,
"Configuration").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any, Final

from confluent_kafka import Consumer, KafkaException, Producer

from coordinator.config import ParsleyConfig
from parsley.declarations import Process
from workers.kafka_config import (
    admin_config,
    consumer_config,
    producer_config,
    restore_consumer_config,
)

__all__ = ["check_process_clients"]

_QUIET: Final = logging.getLogger("parsley.coordinator.client-check")
"""Where the throwaway clients' librdkafka lines go: nowhere (no broker is configured)."""
_QUIET.addHandler(logging.NullHandler())
_QUIET.propagate = False


def _refusal(props: dict[str, Any], process: str) -> str | None:
    """librdkafka's refusal of the worker clients built from ``props``, or ``None``."""
    builders: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("consumer", lambda: consumer_config("unused:0", "p", process, 0, props)),
        ("restore consumer", lambda: restore_consumer_config("unused:0", "p", process, 0,
                                                             props)),
        ("producer", lambda: producer_config("unused:0", "p", process, 0, props)),
        ("admin client", lambda: admin_config("unused:0", props)),
    ]
    for what, build in builders:
        conf = build()
        conf.pop("bootstrap.servers", None)
        conf["logger"] = _QUIET
        try:
            if what == "producer" or what == "admin client":
                Producer(conf)  # an AdminClient is a producer handle underneath
            else:
                Consumer(conf).close()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else exc
            text = err.str() if hasattr(err, "str") else str(err)
            return f"its {what}: {text}"
    return None


def check_process_clients(config: ParsleyConfig, processes: Iterable[Process]) -> None:
    """Refuse, before the start, per-process properties librdkafka does not accept.

    Only processes with properties of their own are checked, and a refusal that the
    coordinator's properties alone already cause is left to the start's own message.

    Raises:
        ValueError: ``kafka properties of process 'p' were refused by librdkafka (its
            consumer: ...); check Process(..., kafka_properties=...) and
            [process_kafka_properties.p]``.
    """
    for process in processes:
        if not process.kafka_properties and \
                process.name not in config.process_kafka_properties:
            continue
        merged = config.kafka_properties_for(process)
        refusal = _refusal(merged, process.name)
        if refusal is None or _refusal(dict(config.kafka_properties), process.name):
            continue
        raise ValueError(
            f"kafka properties of process '{process.name}' were refused by librdkafka "
            f"({refusal}); check Process(..., kafka_properties=...) and "
            f"[process_kafka_properties.{process.name}]")
