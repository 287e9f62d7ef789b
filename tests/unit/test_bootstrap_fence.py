"""The restart's fence of the previous workers' transactional ids never reports a fence
that did not happen (coordinator/bootstrap/fence.py; docs/operations.md, "Supervision")."""

from __future__ import annotations

import pytest

from coordinator.bootstrap.common import StartError
from coordinator.bootstrap.fence import fence_tasks
from coordinator.config import ParsleyConfig
from parsley import Channel, Effects, Process
from parsley.serdes import BYTES


def test_a_producer_that_cannot_be_built_fails_the_fence_naming_each_task() -> None:
    """A client the fence cannot even build (here an invalid ``linger.ms``) used to end its
    thread with the exception unseen and the fence logged as done; it is a failed fence."""
    out = Channel("fence-out", BYTES, BYTES)
    process = Process("fence").receives(
        Channel("fence-in", BYTES, BYTES),
        lambda delivery, state: Effects.send(out, delivery.key, delivery.value)).sends(out)
    config = ParsleyConfig("127.0.0.1:9", "fence", kafka_properties={"linger.ms": "soon"})
    with pytest.raises(StartError) as raised:
        fence_tasks(config, process, [0, 1], task_count=2)
    message = str(raised.value)
    assert "could not fence the transactional ids" in message, message
    assert "fence-fence-task-000" in message and "fence-fence-task-001" in message, message
    assert "Invalid value for configuration property" in message, message  # linger.ms
