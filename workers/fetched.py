"""Fetched records: those carrying a consumer error split from the records to feed.

``consumer.consume()`` returns records and error events in one list. The worker
handles every error event (``Worker._consumer_error``) before it feeds the batch's
records to the engine; :func:`split_errors` separates the two in one call. With the
native core (``parsley._native.split_errors``) the per-record ``error()`` calls are
made from Rust; otherwise by :func:`split_errors_py`, the reference. Both return the
same lists (``tests/unit/test_fetched.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parsley.native import NATIVE

__all__ = ["split_errors", "split_errors_py"]


def split_errors_py(records: list[Any]) -> tuple[list[Any], list[Any]]:
    """``(good, errors)``: the records whose ``error()`` is ``None``, and the others, each
    in fetch order; ``good`` is ``records`` itself when none has an error.

    Args:
        records: what ``Consumer.consume()`` returned (``confluent_kafka.Message``).

    Raises:
        AttributeError: an element has no ``error()`` method (the native twin also raises
            ``TypeError`` when ``records`` is not a list).
    """
    errors = [m for m in records if m.error() is not None]
    if not errors:
        return records, errors
    return [m for m in records if m.error() is None], errors


split_errors: Callable[[list[Any]], tuple[list[Any], list[Any]]] = (
    NATIVE.split_errors if NATIVE is not None else split_errors_py)
"""The engine's choice of :func:`split_errors_py` or its native twin (same contract)."""
