"""Authorization failures: the ACL a refused call lacked, and the grant that fixes it.

A call the cluster's authorizer refuses answers ``TOPIC_AUTHORIZATION_FAILED``,
``GROUP_AUTHORIZATION_FAILED``, ``TRANSACTIONAL_ID_AUTHORIZATION_FAILED`` or
``CLUSTER_AUTHORIZATION_FAILED`` (:data:`AUTHORIZATION_CODES`). It recurs identically on
every retry and every restart until an operator grants the right, so it is a refusal,
``SUBSTRATE_MISCONFIGURED`` (:class:`NotAuthorized`), never a retry, an abort or a recovery
in place; its detail opens with ``not authorized: <principal> lacks <operation> on
<resource> '<name>'`` (docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``, "Not authorized") and
gives the ``kafka-acls`` command that grants it. The rights a process needs:
docs/operations.md, "ACLs" (and ``parsley-coordinator acls``, which prints them).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError

from parsley.refusals import ParsleyFailClosedError, Reason

__all__ = [
    "AUTHORIZATION_CODES",
    "Grant",
    "NotAuthorized",
    "default_grant",
    "kafka_acls",
    "lacking_topic",
    "principal_of",
]

AUTHORIZATION_CODES: Final = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "Topic",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "Group",
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "TransactionalId",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Cluster",
}
"""Kafka's authorization error codes -> the ACL resource type each concerns."""

_FLAGS: Final = {"Topic": "--topic", "Group": "--group", "TransactionalId": "--transactional-id",
                 "Cluster": "--cluster"}
PRINCIPAL_PLACEHOLDER: Final = "User:<name>"
SERVERS_PLACEHOLDER: Final = "<servers>"
ACLS_HINT: Final = ("Every grant a process needs: parsley-coordinator acls APP --prefix P "
                    "--principal User:NAME (docs/operations.md, \"ACLs\").")


@dataclass(frozen=True, slots=True)
class Grant:
    """One ACL to grant: operations on a resource, for a principal given later.

    Attributes:
        resource: ``Topic``, ``Group``, ``TransactionalId`` or ``Cluster`` (kafka-acls'
            resource types).
        name: the resource name (a prefix when ``prefixed``); ``None`` while not known
            where the failure was met (:meth:`NotAuthorized.completed` fills the group
            and transactional id of a task from its application id).
        operations: kafka-acls operation names (``Read``, ``Write``, ``Create``,
            ``Describe``, ``DescribeConfigs``, ``Delete``, ...), in order.
        prefixed: the name is a prefix (``--resource-pattern-type prefixed``).
    """

    resource: str
    name: str | None
    operations: tuple[str, ...]
    prefixed: bool = False

    def text(self) -> str:
        """``Write on Topic 'orders'`` (``... on TransactionalId prefix 'p-x-task-'``)."""
        ops = " and ".join(self.operations)
        if self.resource == "Cluster":
            return f"{ops} on the Cluster"
        kind = f"{self.resource} prefix" if self.prefixed else self.resource
        return f"{ops} on {kind} '{self.name if self.name is not None else '?'}'"

    def kafka_acls(self, principal: str | None = None, bootstrap: str | None = None,
                   command_config: str | None = None, *, remove: bool = False) -> str:
        """The ``kafka-acls`` command that adds (or removes) this grant
        (:func:`kafka_acls`)."""
        return kafka_acls(self.resource, [self.name if self.name is not None else "<name>"],
                          self.operations, principal, bootstrap, command_config,
                          prefixed=self.prefixed, remove=remove)


def kafka_acls(resource: str, names: Sequence[str], operations: Sequence[str],
               principal: str | None = None, bootstrap: str | None = None,
               command_config: str | None = None, *, prefixed: bool = False,
               remove: bool = False) -> str:
    """A ``kafka-acls`` command line granting (or with ``remove`` revoking) ``operations``
    on every resource in ``names`` of type ``resource`` to ``principal``.

    Args:
        resource: ``Topic``, ``Group``, ``TransactionalId`` or ``Cluster``.
        names: the resource names (prefixes when ``prefixed``; ignored for the Cluster).
        operations: kafka-acls operation names.
        principal: ``User:<name>``; default a placeholder.
        bootstrap: ``--bootstrap-server``; default a placeholder.
        command_config: the admin client's properties file (``--command-config``),
            or None to leave the option out.
        prefixed: ``--resource-pattern-type prefixed``.
        remove: ``--remove --force`` instead of ``--add``.
    """
    parts = ["kafka-acls", "--bootstrap-server", bootstrap or SERVERS_PLACEHOLDER]
    if command_config:
        parts += ["--command-config", command_config]
    parts += ["--remove", "--force"] if remove else ["--add"]
    parts += ["--allow-principal", principal or PRINCIPAL_PLACEHOLDER]
    for op in operations:
        parts += ["--operation", op]
    if resource == "Cluster":
        parts.append("--cluster")
    for name in names:
        parts += [_FLAGS[resource], name]
    if prefixed:
        parts += ["--resource-pattern-type", "prefixed"]
    return " ".join(parts)


def principal_of(properties: Mapping[str, Any] | None) -> str | None:
    """``User:<sasl.username>`` from client properties (also ``consumer.``/``producer.``/
    ``admin.``-prefixed), or None when they name no SASL user (the principal then comes
    from a certificate or Kerberos, and only the operator knows it)."""
    props = dict(properties or {})
    for key in ("sasl.username", "admin.sasl.username", "consumer.sasl.username",
                "producer.sasl.username"):
        if props.get(key):
            return f"User:{props[key]}"
    return None


def lacking_topic(admin: Any, topics: tuple[str, ...], operations: tuple[str, ...],
                  timeout_s: float = 10.0) -> str | None:
    """The first of ``topics`` on which the admin client's principal lacks one of
    ``operations`` (``describe_topics`` with the authorized operations; a topic it may not
    even describe lacks them all), or None when none can be told (no answer in time).
    """
    from confluent_kafka import KafkaException, TopicCollection

    try:
        futures = admin.describe_topics(TopicCollection(list(topics)),
                                        include_authorized_operations=True,
                                        request_timeout=timeout_s)
    except KafkaException:
        return None
    wanted = {re.sub(r"(?<!^)(?=[A-Z])", "_", op).upper() for op in operations}
    for topic in topics:
        try:
            desc = futures[topic].result(timeout=timeout_s + 5.0)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "code", lambda: None)() \
                    == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                return topic
            continue
        except Exception:  # no answer in time: this one cannot be told
            continue
        allowed = {op.name for op in (desc.authorized_operations or [])}
        if not wanted <= allowed:
            return topic
    return None


def default_grant(code: int) -> Grant:
    """The grant an authorization code points at when the call site names nothing:
    Read on the task's group, Write on its transactional ids (a prefix), an unnamed
    topic, or the cluster."""
    resource = AUTHORIZATION_CODES[code]
    if resource == "Group":
        return Grant("Group", None, ("Read",))
    if resource == "TransactionalId":
        return Grant("TransactionalId", None, ("Write",), prefixed=True)
    if resource == "Cluster":
        return Grant("Cluster", "kafka-cluster", ("<operation>",))
    return Grant("Topic", None, ("<operation>",))


class NotAuthorized(ParsleyFailClosedError):
    """``SUBSTRATE_MISCONFIGURED``: the cluster's ACLs refused a call; the detail names the
    resource, the operation and the grant (docs/runbooks.md, ``SUBSTRATE_MISCONFIGURED``,
    "Not authorized").

    Attributes:
        code_name: the Kafka error's name (``TOPIC_AUTHORIZATION_FAILED``).
        text: the error's own text.
        context: what was being done (``committing the task's transaction``).
        grant: the right that was missing.
        principal: ``User:<name>`` when known.
        bootstrap: the cluster's ``bootstrap.servers`` when known.
        candidates: when ``grant`` names no resource, the ones it may be (a transaction's
            topics: librdkafka does not say which partition it could not add).
    """

    def __init__(self, code_name: str, text: str, context: str, grant: Grant,
                 principal: str | None = None, bootstrap: str | None = None,
                 candidates: tuple[str, ...] = ()) -> None:
        self.code_name, self.text, self.context = code_name, text, context
        self.grant, self.principal, self.bootstrap = grant, principal, bootstrap
        self.candidates = candidates
        who = principal or "this process's principal"
        where = f", {context}" if context else ""
        lacks = grant.text()
        if grant.name is None and candidates:
            lacks = f"{' and '.join(grant.operations)} on one of Topic " + ", ".join(
                f"'{c}'" for c in candidates)
        super().__init__(
            Reason.SUBSTRATE_MISCONFIGURED,
            f"not authorized: {who} lacks {lacks} ({code_name}{where}: {text}). "
            f"Grant it, then restart: {grant.kafka_acls(principal, bootstrap)}. {ACLS_HINT}")

    def __reduce__(self) -> Any:
        return (type(self), (self.code_name, self.text, self.context, self.grant,
                             self.principal, self.bootstrap, self.candidates))

    def completed(self, app_id: str | None = None, principal: str | None = None,
                  bootstrap: str | None = None, name: str | None = None) -> NotAuthorized:
        """This refusal with what its raiser did not know: the resource ``name`` (one of
        the candidates, found missing since), else the group (``app_id``) or the task's
        transactional ids (prefix ``<app_id>-task-``) when unnamed, the principal and the
        servers (each kept when already known)."""
        grant = self.grant
        if grant.name is None and name is not None:
            grant = dataclasses.replace(grant, name=name)
        elif grant.name is None and app_id is not None:
            if grant.resource == "Group":
                grant = dataclasses.replace(grant, name=app_id)
            elif grant.resource == "TransactionalId":
                grant = dataclasses.replace(grant, name=f"{app_id}-task-")
        return NotAuthorized(self.code_name, self.text, self.context, grant,
                             self.principal or principal, self.bootstrap or bootstrap,
                             () if grant.name is not None else self.candidates)
