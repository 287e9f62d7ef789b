"""Quickstart: a payment is never handled before the order it pays for.

Two processes, declared with the public API only:

* ``checkout`` receives ``<prefix>.orders`` and, for each order, sends a payment
  to ``<prefix>.payments`` (same key, so the same partition index).
* ``ledger`` receives both topics. Parsley stamps every payment with the order
  it was caused by (the ``parsley.causes`` header), so ``ledger`` handles a
  payment only after it has handled that order, even when it reads the
  payments topic faster or starts late. It records each order in a store and
  sends ``paid <order>`` to ``<prefix>.ledger``; a payment whose order it had
  not seen would send ``VIOLATION <order>`` (it never happens: a payment
  whose order is on another partition is refused, see below).

Orders must be produced keyed, with the ``murmur2_random`` partitioner (the
Java client's default, and what Parsley's producers use), so that a payment
lands on its order's partition index; an unkeyed order's payment may not, and
``ledger`` then stops with ``CROSS_PARTITION_CAUSE`` rather than print
``VIOLATION`` (README, docs/runbooks.md).

Run it (after ``parsley-devbroker up`` and creating the three topics with the
same partition count)::

    parsley-coordinator run examples.quickstart:PROCESSES \\
        --bootstrap-servers 127.0.0.1:<port> --prefix quickstart
"""

from __future__ import annotations

from parsley import Channel, Delivery, Effects, Process, State, Store
from parsley.serdes import JSON, STRING

__all__ = ["PROCESSES", "build"]


def build(prefix: str = "shop") -> list[Process]:
    """The ``checkout`` and ``ledger`` processes over ``<prefix>.orders|payments|ledger``.

    Args:
        prefix: topic name prefix; the three topics must exist before the start,
            with the same partition count for orders and payments.

    Returns:
        ``[checkout, ledger]``, ready for ``parsley-coordinator run`` or ``Parsley.start``.
    """
    orders = Channel(f"{prefix}.orders", STRING, JSON)
    payments = Channel(f"{prefix}.payments", STRING, JSON)
    ledger_out = Channel(f"{prefix}.ledger", STRING, STRING)
    seen = Store("orders-seen", STRING, JSON)

    def pay(delivery: Delivery, state: State) -> Effects:
        order = delivery.value
        payment = {"order": order["id"], "amount": order["amount"]}
        return Effects.send(payments, delivery.key, payment)

    def record_order(delivery: Delivery, state: State) -> Effects:
        return Effects.builder().put(seen, delivery.value["id"], delivery.value).build()

    def settle(delivery: Delivery, state: State) -> Effects:
        order_id = delivery.value["order"]
        verdict = "paid" if state.get(seen, order_id) is not None else "VIOLATION"
        return Effects.send(ledger_out, delivery.key, f"{verdict} {order_id}")

    checkout = Process("checkout").receives(orders, pay).sends(payments)
    ledger = (
        Process("ledger")
        .receives(orders, record_order)
        .receives(payments, settle)
        .sends(ledger_out)
        .stores(seen)
    )
    return [checkout, ledger]


PROCESSES = build()
