"""Declarations: channels, stores, processes, and the effects a handler returns.

A *process* receives one or more channels (a declared topic with its serdes), runs a handler
per received channel, and may send to declared channels and read and write declared stores;
README.md, "Write your own process" shows one end to end (``Process``, ``Topic``, ``Store``,
``Handler``, ``Delivery``, ``State``, ``Effects``).

Every declaration is an immutable value (a frozen dataclass); each builder step returns a new
``Process``. Declarations pickle with ``dill``, the ``multiprocess`` package's pickler,
closures included, so the coordinator can hand them to a spawned worker. Names on the cluster
are composed here (docs/operations.md, "Names on the cluster"). :func:`validate_declarations`
is the check the coordinator runs at start (docs/architecture.md, "The bootstrap").

The names live by responsibility: :mod:`parsley.channels` (Channel, Store, InitialPosition),
:mod:`parsley.effects` (Delivery, State, Send, Write, Effects, EffectsBuilder, Handler,
BatchHandler, RefusalLatch), :mod:`parsley.process` (Process, Input) and
:mod:`parsley.naming` (cluster names, task width, validate_declarations). This module
re-exports every name, so each existing import path keeps working.
"""

from __future__ import annotations

from parsley.channels import (
    EARLIEST,
    LATEST,
    RESERVED_NAME_PREFIX,
    Channel,
    InitialPosition,
    Store,
    same_store,
)
from parsley.effects import (
    BatchHandler,
    Delivery,
    Effects,
    EffectsBuilder,
    Handler,
    RefusalLatch,
    Send,
    State,
    Write,
)
from parsley.naming import (
    TASK_ID_MIN_DIGITS,
    application_id,
    group_instance_id,
    ordering_changelog,
    store_changelog,
    task_width,
    transactional_id,
    validate_declarations,
)
from parsley.process import Input, Process

__all__ = [
    "EARLIEST",
    "LATEST",
    "RESERVED_NAME_PREFIX",
    "TASK_ID_MIN_DIGITS",
    "BatchHandler",
    "Channel",
    "Delivery",
    "Effects",
    "EffectsBuilder",
    "Handler",
    "InitialPosition",
    "Input",
    "Process",
    "RefusalLatch",
    "Send",
    "State",
    "Store",
    "Write",
    "application_id",
    "group_instance_id",
    "ordering_changelog",
    "same_store",
    "store_changelog",
    "task_width",
    "transactional_id",
    "validate_declarations",
]
