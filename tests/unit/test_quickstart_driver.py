"""The README's quickstart test, run as the README prints it ("Test your handlers").

The code between the markers below is the README's block, verbatim;
``test_the_docs_print_this_test`` keeps it the same as the README's and
docs/testing.md's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

# --- README: Test your handlers ---
from examples.quickstart import PROCESSES
from parsley.testing import ParsleyTestDriver


def test_a_payment_waits_for_its_order():
    driver = ParsleyTestDriver(PROCESSES, partitions={"shop.orders": 2, "shop.payments": 2})
    driver.pause("shop.orders", process="ledger")        # ledger lags on the orders topic
    driver.pipe("shop.orders", {"id": "o1", "amount": 10}, key="customer-1")

    [payment] = driver.sent("checkout")                   # stamped with the order it answers
    assert payment.causes == {("shop.orders", 1): 0}      # customer-1 hashes to partition 1
    [held] = driver.held("ledger")                        # ledger holds the payment back
    assert (held.topic, held.blockers[0].topic) == ("shop.payments", "shop.orders")
    assert driver.read("shop.ledger") == []

    driver.resume("shop.orders", process="ledger")        # the order arrives: both deliver
    assert [r.value for r in driver.read("shop.ledger")] == ["paid o1"]
    assert driver.store("ledger", "orders-seen") == {"o1": {"id": "o1", "amount": 10}}
    assert driver.held("ledger") == []
# --- end of the README block ---


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("doc", "heading"), [
    ("README.md", "## Test your handlers"),
    ("docs/testing.md", "## A first test"),
])
def test_the_docs_print_this_test(doc: str, heading: str) -> None:
    section = (REPO / doc).read_text().split(heading, 1)[1]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, f"{doc} '{heading}' has no python block"
    source = Path(__file__).read_text()
    ours = source.split("# --- README: Test your handlers ---\n", 1)[1]
    ours = ours.split("# --- end of the README block ---", 1)[0]
    assert block.group(1) == ours
