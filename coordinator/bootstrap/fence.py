"""Bootstrap on a restart: fence the tasks' transactional ids before the changelog is read.

A worker that died with its transaction open (killed, or crashed) leaves it open until the
broker aborts it, up to ``transaction.timeout.ms`` plus one abort check later (25 s): a
``read_committed`` read of the ordering changelog waits behind it meanwhile. A restart
through the bootstrap, which runs only once every worker of the process was seen to exit
(docs/operations.md, "Supervision"), calls ``init_transactions`` with each task's
transactional id first: that fences the dead worker's producer and aborts its transaction
at once (KIP-98), as a worker's own start does before its restore (docs/operations.md,
"The task timeout"). Never at a first start, nor with ``--join``: a live worker of
another coordinator, or one of this coordinator's spawned for a task just gained, may own
the ids.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection
from typing import Any, Final

from confluent_kafka import KafkaException, Producer

from coordinator.bootstrap.common import StartError, not_authorized, with_client_logger
from coordinator.config import ParsleyConfig
from parsley.declarations import Process, application_id, transactional_id
from workers.authorization import Grant
from workers.calls import CallStalled, call
from workers.kafka_config import producer_config

__all__ = ["FENCE_TIMEOUT_S", "fence_tasks"]

log = logging.getLogger("parsley.coordinator.bootstrap")

FENCE_TIMEOUT_S: Final = 30.0
"""The ``init_transactions`` timeout of each fence, s (its bound: the worker's 35 s)."""


def fence_tasks(config: ParsleyConfig, process: Process, tasks: Collection[int],
                task_count: int) -> None:
    """``init_transactions`` with the transactional id of each of ``tasks``, in parallel.

    Args:
        config: the configuration (servers, client properties).
        process: the declaration.
        tasks: the task indexes whose previous workers have all exited.
        task_count: ``W``, for the ids' zero padding.

    Raises:
        NotAuthorized: the principal may not write the transactional ids
            (``SUBSTRATE_MISCONFIGURED``, naming the grant: docs/operations.md, "ACLs").
        StartError: a fence failed otherwise or did not return within its bound (the
            restart attempt fails and is retried with backoff).
    """
    failures: dict[int, str] = {}
    refused: list[KafkaException] = []
    props = config.kafka_properties_for(process)

    def fence(task: int) -> None:
        cfg: dict[str, Any] = producer_config(
            config.bootstrap_servers, config.application_id_prefix, process.name, task, props,
            task_count=task_count)
        try:
            producer = Producer(with_client_logger(cfg))
            call("init_transactions", producer.init_transactions, FENCE_TIMEOUT_S)
        except (KafkaException, CallStalled) as exc:
            failures[task] = str(exc)
            if isinstance(exc, KafkaException):
                refused.append(exc)
        except Exception as exc:  # a fence that did not happen is never told as done
            failures[task] = f"{type(exc).__name__}: {exc}"

    threads = [threading.Thread(target=fence, args=(t,), name=f"parsley-fence-{t}", daemon=True)
               for t in sorted(tasks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    app_id = application_id(config.application_id_prefix, process.name)
    for exc in refused:
        refusal = not_authorized(exc, "fencing the previous workers' transactional ids",
                                 Grant("TransactionalId", f"{app_id}-task-", ("Write",),
                                       prefixed=True))
        if refusal is not None:
            raise refusal from exc
    if failures:
        names = {t: transactional_id(config.application_id_prefix, process.name, t, task_count)
                 for t in failures}
        raise StartError(f"could not fence the transactional ids of the process's previous "
                         f"workers before reading its state: "
                         f"{ {names[t]: why for t, why in sorted(failures.items())} }")
    log.info("%s-%s: fenced the transactional ids of task(s) %s before reading the changelog",
             config.application_id_prefix, process.name, sorted(tasks))
