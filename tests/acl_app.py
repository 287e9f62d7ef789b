"""The relay the ACL tests run (``tests/e2e/test_acls.py``), loadable by name.

``parsley-coordinator acls tests.acl_app:processes`` imports it: the topic names come from
``PARSLEY_ACL_IN`` and ``PARSLEY_ACL_OUT`` when :func:`processes` is called. The process,
``relay``, receives the input topic, counts its deliveries in its store ``counts`` and
relays each as ``<input value>|<n>`` (``n`` the count), so an output that shows a value
twice, or a count twice, is a duplicate.
"""

from __future__ import annotations

import os
from typing import Any

from parsley import Channel, Effects, Process, Store
from parsley.serdes import BYTES, JSON, STRING

NAME = "relay"
ENV_IN = "PARSLEY_ACL_IN"
ENV_OUT = "PARSLEY_ACL_OUT"


def relay(source: str, out_name: str) -> Process:
    """The ``relay`` process from ``source`` to ``out_name``."""
    out = Channel(out_name, BYTES, BYTES)
    counts = Store("counts", STRING, JSON)

    def handle(delivery: Any, state: Any) -> Effects:
        n = (state.get(counts, "n") or 0) + 1
        return (Effects.builder().put(counts, "n", n)
                .send(out, delivery.key, delivery.value + b"|%d" % n).build())

    return Process(NAME).receives(Channel(source, BYTES, BYTES), handle).sends(out).stores(counts)


def processes() -> list[Process]:
    """The relay over the topics the environment names."""
    return [relay(os.environ[ENV_IN], os.environ[ENV_OUT])]
