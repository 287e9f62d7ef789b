"""What every bootstrap step shares: its errors, constants and refusal helpers."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

from coordinator.config import ParsleyConfig
from parsley.declarations import Process, application_id
from parsley.refusals import ParsleyFailClosedError, Reason
from workers.authorization import AUTHORIZATION_CODES, Grant, NotAuthorized, principal_of
from workers.client_log import RepeatFilter
from workers.kafka_config import TRANSACTION_TIMEOUT_MS
from workers.kafka_errors import kafka_error_of, unreachable

__all__ = [
    "ADMIN_TIMEOUT_S",
    "ANSWER_SPACING_S",
    "BOOTSTRAP_CLIENT_PREFIX",
    "BOOTSTRAP_METADATA",
    "BROKER_ABORT_CHECK_S",
    "KAFKA_CLIENT_LOG",
    "REACH_TIMEOUT_S",
    "STABLE_DEADLINE_S",
    "STABLE_RETRY_S",
    "TOPIC_ID_FLOOR",
    "UNKNOWN_ANSWERS",
    "RepeatFilter",
    "StartError",
    "StartRetryableError",
    "check_reachable",
    "naming_the_group",
    "naming_the_principal",
    "not_authorized",
    "refuse",
    "unreachable_message",
    "with_client_logger",
]

log = logging.getLogger("parsley.coordinator.bootstrap")

BOOTSTRAP_METADATA: Final = "parsley.bootstrap"
"""Commit metadata of every offset the bootstrap writes (docs/operations.md, "Names on the
cluster")."""
BOOTSTRAP_CLIENT_PREFIX: Final = "parsley-bootstrap-"
"""Client id prefix of the bootstrap's clients (docs/operations.md, "Names on the cluster")."""
UNKNOWN_ANSWERS: Final = 3
ANSWER_SPACING_S: Final = 0.5
ADMIN_TIMEOUT_S: Final = 30.0
STABLE_RETRY_S: Final = 0.2
BROKER_ABORT_CHECK_S: Final = 10.0
"""The broker's default ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, s:
how often it aborts transactions past their ``transaction.timeout.ms``."""
STABLE_DEADLINE_S: Final = TRANSACTION_TIMEOUT_MS / 1000 + BROKER_ABORT_CHECK_S + 5.0
"""How long a start waits for the group's committed positions to be stable, s (25 s).

A worker of a coordinator that died (``kill -9``) can leave a transaction open that
carries read positions; the broker answers ``UNSTABLE_OFFSET_COMMIT`` for them until it
aborts that transaction, at most ``transaction.timeout.ms`` (:data:`TRANSACTION_TIMEOUT_MS`)
plus one abort check (:data:`BROKER_ABORT_CHECK_S`) later; a start inside that window waits
it out, with a log line, instead of failing (KIP-447: ``require_stable``)."""

TOPIC_ID_FLOOR: Final = "3.7.0"
"""The broker version below which topics have no ids (docs/runbooks.md, SUBSTRATE_MISCONFIGURED)."""


REACH_TIMEOUT_S: Final = 10.0
"""How long the first metadata request may take before the start says the cluster
cannot be reached, s (fail fast instead of the 30 s admin timeout)."""


KAFKA_CLIENT_LOG: Final = logging.getLogger("parsley.coordinator.kafka")
"""Where the coordinator's own Kafka clients (admin, bootstrap and inspect consumers)
log: librdkafka's lines through Python logging, repeats held by :class:`RepeatFilter`."""
KAFKA_CLIENT_LOG.addFilter(RepeatFilter())


def with_client_logger(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with ``logger`` set to :data:`KAFKA_CLIENT_LOG` (unless the caller set one).

    A consumer's lines arrive from its ``poll``; an admin client's from its
    calls and ``poll``.
    """
    config.setdefault("logger", KAFKA_CLIENT_LOG)
    return config


def unreachable_message(bootstrap_servers: str, code: str) -> str:
    """The message for a cluster no broker of which answered (code: a librdkafka name,
    or the probe's refusals)."""
    return (f"could not reach the Kafka cluster at {bootstrap_servers} ({code}); check the "
            "address and that the brokers are up, then retry")


def check_reachable(admin: Any, bootstrap_servers: str,
                    timeout_s: float = REACH_TIMEOUT_S) -> None:
    """Fail fast when no broker answers a metadata request within ``timeout_s``.

    First a bare TCP connect to each bootstrap server
    (:func:`coordinator.bootstrap.probe.probe_refusals`): when every one refuses (or
    does not resolve), the start fails at once instead of after ``timeout_s``.

    Raises:
        StartError: :func:`unreachable_message` when every server refused the
            connection (the refusals in parentheses) or when no broker answered
            (:func:`workers.kafka_errors.unreachable`: the address or the brokers, not ACLs);
            other failures name their error.
    """
    from confluent_kafka import KafkaException

    from coordinator.bootstrap.probe import probe_refusals

    refusals = probe_refusals(bootstrap_servers)
    if refusals is not None:
        raise StartError(unreachable_message(bootstrap_servers, "; ".join(refusals)))
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        if unreachable(exc):
            err = kafka_error_of(exc)
            said = err.name() if err is not None else str(exc)
            raise StartError(unreachable_message(bootstrap_servers, said)) from exc
        raise StartError(f"could not read the cluster's metadata at {bootstrap_servers} "
                         f"({exc}); check the address and the ACLs, then retry") from exc
    finally:
        admin.poll(0)  # hands librdkafka's queued lines to KAFKA_CLIENT_LOG


class StartError(RuntimeError):
    """A start prerequisite is missing, or the cluster could not be queried.

    Java's plain ``IllegalStateException`` at start (docs/runbooks.md, "If
    `start` raised"): a declared topic does not exist, the changelog could not be read,
    positions could not be listed. Create the topic, restore connectivity or
    check the ACLs, then retry. Nothing is running after it.
    """


class StartRetryableError(StartError):
    """A broker's metadata view lagged, or a sibling was mid-start; the message ends
    "Retry this start." (docs/runbooks.md, "If `start` raised")."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"{detail.rstrip('. ')}. Retry this start.")


def refuse(reason: Reason, detail: str) -> ParsleyFailClosedError:
    """The refusal ``reason`` with ``detail`` (to be raised by the caller)."""
    return ParsleyFailClosedError(reason, detail)


def not_authorized(exc: BaseException | Any, context: str, grant: Grant,
                   candidates: tuple[str, ...] = ()) -> NotAuthorized | None:
    """The refusal for ``exc`` (a ``KafkaException`` or ``KafkaError``) when the cluster's
    ACLs refused the call, naming ``grant`` (``SUBSTRATE_MISCONFIGURED``:
    :mod:`workers.authorization`); ``None`` for any other error."""
    err = kafka_error_of(exc)
    if err is None or err.code() not in AUTHORIZATION_CODES:
        return None
    return NotAuthorized(str(err.name()), str(err.str()), context, grant, candidates=candidates)


_P = ParamSpec("_P")
_R = TypeVar("_R")
_Config = TypeVar("_Config")


def naming_the_principal(
    step: Callable[Concatenate[_Config, _P], _R]
) -> Callable[Concatenate[_Config, _P], _R]:
    """Decorate a bootstrap step taking the ``ParsleyConfig`` first: a
    :class:`~workers.authorization.NotAuthorized` it raises is completed with the
    principal (``sasl.username`` of the ``kafka_properties``) and the servers, so its
    ``kafka-acls`` command is the one to run."""

    def named(config: _Config, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return step(config, *args, **kwargs)
        except NotAuthorized as exc:
            raise exc.completed(principal=principal_of(getattr(config, "kafka_properties", {})),
                                bootstrap=getattr(config, "bootstrap_servers", None)) from exc

    functools.update_wrapper(named, step)
    return named


def naming_the_group(
    step: Callable[Concatenate[ParsleyConfig, Process, _P], _R]
) -> Callable[Concatenate[ParsleyConfig, Process, _P], _R]:
    """Decorate a bootstrap step taking the ``ParsleyConfig`` and a ``Process`` first: a
    :class:`~workers.authorization.NotAuthorized` it raises for an unnamed group (a
    changelog reader's ``FindCoordinator``) names the process's group."""

    def named(config: ParsleyConfig, process: Process, /, *args: _P.args,
              **kwargs: _P.kwargs) -> _R:
        try:
            return step(config, process, *args, **kwargs)
        except NotAuthorized as exc:
            raise exc.completed(application_id(config.application_id_prefix,
                                               process.name)) from exc

    functools.update_wrapper(named, step)
    return named
