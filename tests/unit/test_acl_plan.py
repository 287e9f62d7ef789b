"""The rights a process needs, without a broker: the command, the docs' table, the refusal.

docs/operations.md, "ACLs": the table and ``parsley-coordinator acls`` must list the same
rights; an authorization error is a ``SUBSTRATE_MISCONFIGURED`` refusal naming the
resource, the operation and the grant (workers/authorization.py). The broker-side proof
is tests/e2e/test_acls.py.
"""

from __future__ import annotations

import pickle
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaError, KafkaException

from coordinator.cli import cli
from coordinator.cli.grants import process_grants, reset_grants
from parsley.refusals import Reason
from tests import acl_app
from tests.delivered import DeliveredRecord
from workers.authorization import Grant, NotAuthorized, principal_of
from workers.kafka_errors import ErrorKind, classify, stop_kind, to_exception
from workers.ledger import DeliveryLedger
from workers.protocol import StopKind

OPERATIONS_DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
_FLAGS = {"--topic": "Topic", "--group": "Group", "--transactional-id": "TransactionalId"}

Row = tuple[str, str, bool, frozenset[str]]
"""(resource type, name, prefixed, operations)."""


def _table() -> list[dict[str, str]]:
    text = OPERATIONS_DOC.read_text()
    body = text.split("<!-- acls -->", 1)[1].split("<!-- /acls -->", 1)[0]
    lines = [line for line in body.strip().splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in line.strip("|").split("|")), strict=True))
            for line in lines[2:]]


def _documented(when: set[str], prefix: str, process_name: str, received: list[str],
                sent: list[str], stores: list[str]) -> set[Row]:
    rows: set[Row] = set()
    for row in _table():
        if row["When"].strip("`") not in when:
            continue
        cell = row["Name"]
        if cell == "each received topic":
            names = received
        elif cell == "each sent topic":
            names = sent
        else:
            names = []
            for template in re.findall(r"`([^`]+)`", cell):
                filled = template.replace("<prefix>", prefix).replace("<process>", process_name)
                names += [filled.replace("<store>", s) for s in stores] if "<store>" in filled \
                    else [filled]
        ops = frozenset(o.strip() for o in row["Operations"].split(","))
        rows |= {(row["Resource"], n, row["Pattern"] == "prefixed", ops) for n in names}
    return rows


def _printed(*extra: str, monkeypatch: pytest.MonkeyPatch) -> set[Row]:
    monkeypatch.setenv(acl_app.ENV_IN, "orders")
    monkeypatch.setenv(acl_app.ENV_OUT, "orders-relayed")
    result = CliRunner().invoke(cli, ["acls", "tests.acl_app:processes", "--prefix", "shop",
                                      "--principal", "User:alice", *extra])
    assert result.exit_code == 0, result.output
    rows: set[Row] = set()
    for line in result.output.splitlines():
        if line.startswith("#"):
            continue
        words = shlex.split(line)
        assert words[:2] == ["kafka-acls", "--bootstrap-server"] and "--add" in words
        assert words[words.index("--allow-principal") + 1] == "User:alice"
        ops = frozenset(words[i + 1] for i, w in enumerate(words) if w == "--operation")
        prefixed = "--resource-pattern-type" in words
        rows |= {(_FLAGS[w], words[i + 1], prefixed, ops)
                 for i, w in enumerate(words) if w in _FLAGS}
    return rows


@pytest.mark.parametrize(("extra", "when"), [
    ((), {"always"}),
    (("--join",), {"always", "run --join"}),
    (("--reset",), {"reset"}),
])
def test_the_docs_table_and_the_command_list_the_same_rights(
    extra: tuple[str, ...], when: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    documented = _documented(when, "shop", acl_app.NAME, ["orders"], ["orders-relayed"],
                             ["counts"])
    assert documented, "the docs' ACL table was not found"
    assert _printed(*extra, monkeypatch=monkeypatch) == documented


def test_no_listed_right_implies_another() -> None:
    """Read and Write imply Describe (and nothing else listed): none is listed beside them."""
    process = acl_app.relay("orders", "out")
    for g in [*process_grants("shop", process, join=True), *reset_grants("shop", process)]:
        assert "Describe" not in g.operations, g


def test_acls_refuses_a_principal_that_is_not_a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(acl_app.ENV_IN, "orders")
    monkeypatch.setenv(acl_app.ENV_OUT, "out")
    result = CliRunner().invoke(cli, ["acls", "tests.acl_app:processes", "--prefix", "shop",
                                      "--principal", "alice"])
    assert result.exit_code == 2 and "--principal must be User:NAME" in result.output


# -- the refusal ---------------------------------------------------------------------------

CODES = [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
         KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         KafkaError.CLUSTER_AUTHORIZATION_FAILED]


@pytest.mark.parametrize("code", CODES)
def test_an_authorization_error_is_a_refusal_never_a_retry(code: int) -> None:
    # As librdkafka flags it inside a transaction: abortable (and so, before, retried).
    err = KafkaError(code, "Broker: authorization failed", txn_requires_abort=True)
    verdict = classify(KafkaException(err))
    assert (verdict.kind, verdict.reason) == (ErrorKind.REFUSAL, Reason.SUBSTRATE_MISCONFIGURED)
    assert stop_kind(verdict) is StopKind.REFUSAL
    assert isinstance(to_exception(err, "x"), NotAuthorized)


def test_the_refusal_names_resource_operation_and_the_command() -> None:
    err = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "Topic authorization failed")
    exc = to_exception(err, "reading changelog c[0]", grant=Grant("Topic", "c", ("Read",)))
    assert isinstance(exc, NotAuthorized)
    done = exc.completed("shop-relay", "User:alice", "k1:9093")
    assert done.detail.startswith("not authorized: User:alice lacks Read on Topic 'c' "
                                  "(TOPIC_AUTHORIZATION_FAILED, reading changelog c[0]: "
                                  "Topic authorization failed). ")
    assert "kafka-acls --bootstrap-server k1:9093 --add --allow-principal User:alice " \
           "--operation Read --topic c." in done.detail
    again = pickle.loads(pickle.dumps(done))  # a refusal crosses processes
    assert (again.detail, again.reason) == (done.detail, Reason.SUBSTRATE_MISCONFIGURED)


def test_a_group_or_transactional_id_is_named_from_the_application_id() -> None:
    for code, expect in [
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "Read on Group 'shop-relay'"),
        (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
         "Write on TransactionalId prefix 'shop-relay-task-'"),
    ]:
        # A Topic grant given for a call that met another resource's refusal is not used.
        exc = to_exception(KafkaError(code, "x"), "ctx", grant=Grant("Topic", "t", ("Read",)))
        assert isinstance(exc, NotAuthorized)
        detail = exc.completed("shop-relay").detail
        assert expect in detail, detail
    assert "--transactional-id shop-relay-task- --resource-pattern-type prefixed" in detail


def test_principal_from_sasl_username() -> None:
    assert principal_of({"sasl.username": "alice"}) == "User:alice"
    assert principal_of({"producer.sasl.username": "bob"}) == "User:bob"
    assert principal_of({"security.protocol": "SSL"}) is None


def test_records_purged_by_a_failed_transaction_report_its_cause() -> None:
    """A partition the principal may not write fails the transaction when added; its
    records (and others) are only purged: the transaction's error is the cause."""
    cause = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED,
                       "Failed to add partition(s) to transaction", txn_requires_abort=True)
    ledger = DeliveryLedger(lambda: cause)
    for topic in ("out", "changelog", "out"):
        ledger.sent()
        ledger.on_delivery(KafkaError(KafkaError._PURGE_QUEUE, "Purged in queue"),
                           DeliveredRecord(topic))  # type: ignore[arg-type]
    with pytest.raises(NotAuthorized) as raised:
        ledger.check("committing")
    assert raised.value.candidates == ("out", "changelog")
    assert "Write on one of Topic 'out', 'changelog'" in raised.value.detail
    named = raised.value.completed(name="changelog")
    assert "lacks Write on Topic 'changelog'" in named.detail

    no_cause = DeliveryLedger(lambda: None)
    no_cause.sent()
    no_cause.on_delivery(KafkaError(KafkaError._PURGE_QUEUE, "Purged"), DeliveredRecord("out"))  # type: ignore[arg-type]
    with pytest.raises(Exception, match="_PURGE_QUEUE"):
        no_cause.check("committing")
