"""``TaskTransaction.commit`` when confluent-kafka's ``flush`` loses a callback's exception
(``SystemError: ... returned NULL without setting an exception``): the first failed
delivery the ledger holds is what the commit raises, classified."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError

from workers.kafka_errors import ErrorKind, SubstrateError
from workers.transaction import TaskTransaction


class _Msg:
    def topic(self) -> str:
        return "out"

    def partition(self) -> int:
        return 0


class _Producer:
    """A producer whose flush serves one failed delivery report, then loses the error."""

    def __init__(self, err: KafkaError | None) -> None:
        self.err = err
        self.on_delivery: Any = None

    def begin_transaction(self) -> None:
        pass

    def produce(self, *args: Any, **kwargs: Any) -> None:
        pass

    def send_offsets_to_transaction(self, *args: Any) -> None:
        pass

    def poll(self, timeout: float = 0) -> int:
        return 0

    def __len__(self) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        if self.err is not None:
            self.on_delivery(self.err, _Msg())
        raise SystemError("<method 'flush' of 'cimpl.Producer' objects> returned NULL "
                          "without setting an exception")


def _commit(err: KafkaError | None) -> SubstrateError:
    producer = _Producer(err)
    txn = TaskTransaction(producer)  # type: ignore[arg-type]
    producer.on_delivery = txn.ledger.on_delivery
    txn.begin()
    txn.ledger.sent(1)
    with pytest.raises(SubstrateError) as info:
        txn.commit({("in", 0): 5}, object())
    return info.value


def test_a_lost_flush_error_is_the_fence_the_ledger_saw() -> None:
    fenced = KafkaError(KafkaError._FENCED, "fenced by a newer instance", fatal=True)
    assert _commit(fenced).kind is ErrorKind.FENCED


def test_a_lost_flush_error_without_a_failed_delivery_aborts() -> None:
    error = _commit(None)
    assert error.kind is ErrorKind.ABORTABLE and "returned NULL" in error.detail
