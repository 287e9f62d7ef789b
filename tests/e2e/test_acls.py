"""A process on a broker that enforces ACLs has exactly the rights docs/operations.md lists.

On the session's ``sasl_ssl`` broker (TLS, SCRAM, ``StandardAuthorizer``, no ACL meaning no
access), a SCRAM user is granted what ``parsley-coordinator acls`` prints, by running the
printed ``kafka-acls`` commands as the operator would. With exactly those rights the relay
of ``tests/acl_app.py`` runs clean. Then each right is revoked in turn: the next start is
refused, or the running process stops, ``SUBSTRATE_MISCONFIGURED`` naming the resource, the
operation and the ``kafka-acls`` command that grants it, within a bound (never a hang); the
right granted again, a restart relays every input so far exactly once (never a loss). Create
on the changelogs is needed only while they do not exist, so a fresh process plays those two.

None of this could run before ``parsley-devbroker up --security sasl_ssl``; on the previous
code a revoked Write on a changelog stopped with a bare ``_PURGE_QUEUE``, Write on the
transactional ids with a FATAL stop naming no grant, and the start refusals named
Describe where the process needs Read or Write.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from confluent_kafka import KafkaException, Producer, TopicCollection
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from coordinator import Parsley, ParsleyConfig
from coordinator.cli import cli
from coordinator.cli.grants import process_grants
from devtools.dev_cluster import DevCluster
from devtools.kafka_support import unique_name
from devtools.worker_support import read_committed
from parsley import Reason
from parsley.declarations import ordering_changelog, store_changelog
from parsley.refusals import ParsleyFailClosedError
from tests import acl_app
from workers.authorization import Grant
from workers.checkpoint import CHECKPOINT_FILE

pytestmark = pytest.mark.broker

STOP_BOUND_S = 60.0
"""A revoked right stops the start or the process within this (no hang), s."""
RELAY_BOUND_S = 90.0
SESSION_MS = 1500
"""The workers' session timeout: each restart waits for the previous members to leave."""
GROUP_WINDOW_S = 10.0
"""A start's wait for a crashed member's session to expire, s: several ``SESSION_MS`` (the
tests share the machine with the parallel phase's other workers)."""
ACL_APPLIED_BOUND_S = 15.0
"""An ACL change is seen by the broker's authorizer within this, s."""

_TYPES = {"Topic": ResourceType.TOPIC, "Group": ResourceType.GROUP,
          "TransactionalId": ResourceType.TRANSACTIONAL_ID}


def _filter(binding: AclBinding) -> AclBindingFilter:
    """The filter that matches exactly ``binding``."""
    return AclBindingFilter(binding.restype, binding.name, binding.resource_pattern_type,
                            binding.principal, binding.host, binding.operation,
                            binding.permission_type)


def _operation(name: str) -> AclOperation:
    return AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def _binding(grant: Grant, op: str, principal: str) -> AclBinding:
    pattern = ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL
    return AclBinding(_TYPES[grant.resource], grant.name, pattern, principal, "*",
                      _operation(op), AclPermissionType.ALLOW)


@dataclass
class World:
    """The secured broker, the user, the relay's topics and every input produced so far."""

    broker: DevCluster
    user: str
    client: dict[str, str]
    source: str
    out: str
    prefix: str
    state_dir: Path
    produced: list[bytes] = field(default_factory=list)

    @property
    def principal(self) -> str:
        return f"User:{self.user}"

    def config(self, prefix: str | None = None) -> ParsleyConfig:
        return ParsleyConfig(self.broker.bootstrap, prefix or self.prefix,
                             state_dir=str(self.state_dir), status_interval_ms=300,
                             kafka_properties={**self.client,
                                               "consumer.session.timeout.ms": SESSION_MS})

    def produce(self, count: int) -> None:
        producer = Producer(self.broker.config())
        for _ in range(count):
            value = f"v{len(self.produced)}".encode()
            producer.produce(self.source, key=b"k", value=value)
            self.produced.append(value)
        assert producer.flush(30) == 0

    def acl(self, grant: Grant, op: str, *, add: bool) -> None:
        admin = self.broker.admin()
        binding = _binding(grant, op, self.principal)
        if add:
            futures = admin.create_acls([binding], request_timeout=15)
        else:
            futures = admin.delete_acls([_filter(binding)], request_timeout=15)
        for future in futures.values():
            result = future.result(timeout=20)
            assert add or result, f"no ACL {binding} to revoke"
        # The authorizer applies it from the metadata log, a moment after the answer: wait
        # until the broker describes it so (no fixed sleep: a loaded machine is slower).
        query = _filter(binding)
        deadline = time.monotonic() + ACL_APPLIED_BOUND_S
        while bool(admin.describe_acls(query, request_timeout=15).result(timeout=20)) != add:
            assert time.monotonic() < deadline, \
                f"{binding} not {'granted' if add else 'revoked'} {ACL_APPLIED_BOUND_S:g} s on"
            time.sleep(0.1)

    def relayed(self, out: str | None = None) -> list[bytes]:
        return [r.value for r in read_committed(self.broker.bootstrap, out or self.out,
                                                client=self.broker.client)]


def _assert_exactly_once(values: list[bytes], produced: list[bytes]) -> None:
    inputs = sorted(v.rsplit(b"|", 1)[0] for v in values)
    assert inputs == sorted(produced), "every input relayed exactly once"
    counts = sorted(int(v.rsplit(b"|", 1)[1]) for v in values)
    assert counts == list(range(1, len(produced) + 1)), "the store counted each delivery once"


def _run_until_relayed(world: World, out: str | None = None, prefix: str | None = None,
                       process: Any = None) -> float:
    """Start, wait until every input is relayed, close cleanly; return the seconds taken."""
    started = time.monotonic()
    process = process or acl_app.relay(world.source, world.out)
    with Parsley.start(world.config(prefix), process, group_window_s=GROUP_WINDOW_S) as parsley:
        deadline = time.monotonic() + RELAY_BOUND_S
        while len(world.relayed(out)) < len(world.produced):
            assert parsley.healthy(), parsley.status()[acl_app.NAME].failure_detail
            assert time.monotonic() < deadline, "not every input relayed in time"
            time.sleep(0.3)
        report = parsley.close(deadline_s=20)
        assert report.clean, report.summary()
    return time.monotonic() - started


def _refused(world: World, prefix: str | None = None, process: Any = None
             ) -> tuple[str, str, float]:
    """Start expecting a refusal: ``(where: "start" | "running", detail, seconds)``."""
    started = time.monotonic()
    process = process or acl_app.relay(world.source, world.out)
    try:
        parsley = Parsley.start(world.config(prefix), process, group_window_s=GROUP_WINDOW_S)
    except ParsleyFailClosedError as exc:
        assert exc.reason is Reason.SUBSTRATE_MISCONFIGURED, exc
        return "start", exc.detail, time.monotonic() - started
    with parsley:
        assert parsley.await_stopped(timeout=STOP_BOUND_S), \
            f"still running {STOP_BOUND_S:g} s after the right was revoked (a hang)"
        status = parsley.status()[acl_app.NAME]
        assert status.refusal_reason is Reason.SUBSTRATE_MISCONFIGURED, status
        return "running", status.failure_detail or "", time.monotonic() - started


def _names_the_grant(detail: str, grant: Grant, op: str, principal: str) -> None:
    kind = f"{grant.resource} prefix" if grant.prefixed else grant.resource
    assert f"lacks {op} on {kind} '{grant.name}'" in detail, detail
    flag = {"Topic": "--topic", "Group": "--group",
            "TransactionalId": "--transactional-id"}[grant.resource]
    assert f"--allow-principal {principal} --operation {op} {flag} {grant.name}" in detail, \
        detail


@pytest.fixture(scope="module")
def world(secured_broker: DevCluster, tmp_path_factory: pytest.TempPathFactory,
          monkeypatch_module: pytest.MonkeyPatch) -> Iterator[World]:
    """A user granted exactly what ``parsley-coordinator acls`` prints, by running it."""
    admin = secured_broker.admin()
    source, out = unique_name("acl-in", "acls"), unique_name("acl-out", "acls")
    for future in admin.create_topics([NewTopic(source, 1, 1), NewTopic(out, 1, 1)],
                                      request_timeout=30).values():
        future.result(timeout=35)
    user = f"relay-{uuid.uuid4().hex[:6]}"
    client = secured_broker.create_user(user)
    w = World(secured_broker, user, client, source, out, f"acl-{uuid.uuid4().hex[:6]}",
              tmp_path_factory.mktemp("acl-state"))
    monkeypatch_module.setenv(acl_app.ENV_IN, source)
    monkeypatch_module.setenv(acl_app.ENV_OUT, out)
    printed = CliRunner().invoke(cli, [
        "acls", "tests.acl_app:processes", "--prefix", w.prefix, "--principal", w.principal,
        "--bootstrap-servers", secured_broker.bootstrap,
        "--command-config", str(secured_broker.data_dir / "admin.properties")])
    assert printed.exit_code == 0, printed.output
    lines = [line for line in printed.output.splitlines() if line.startswith("kafka-acls ")]
    assert len(lines) == 5, printed.output
    _run_printed(lines)
    _await_acls_settled(secured_broker, w.principal)
    yield w


def _await_acls_settled(broker: DevCluster, principal: str) -> None:
    """Wait until the broker describes the same non-empty ACLs of ``principal`` twice, 0.5 s
    apart (its authorizer applies new ACLs from the metadata log after the answer)."""
    admin = broker.admin()
    query = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
                             AclOperation.ANY, AclPermissionType.ANY)
    deadline = time.monotonic() + ACL_APPLIED_BOUND_S
    seen = -1
    while True:
        count = len(admin.describe_acls(query, request_timeout=15).result(timeout=20))
        if count and count == seen:
            return
        assert time.monotonic() < deadline, f"the ACLs of {principal} did not settle"
        seen = count
        time.sleep(0.5)


def _run_printed(lines: list[str]) -> None:
    """Run printed ``kafka-acls`` command lines with the pinned jars, all at once."""
    runs = [subprocess.Popen([sys.executable, "-m", "devtools.devbroker_cli", "tool",
                              *shlex.split(line)], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True) for line in lines]
    for line, run in zip(lines, runs, strict=True):
        output, _ = run.communicate(timeout=120)
        assert run.returncode == 0, f"{line}\n{output}"


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def clean_run(world: World) -> float:
    """The relay run once with exactly the listed rights: its state exists afterwards."""
    world.produce(5)
    return _run_until_relayed(world)


@pytest.mark.slow
def test_exactly_the_listed_acls_run_the_relay_clean(world: World, clean_run: float) -> None:
    _assert_exactly_once(world.relayed(), world.produced)
    assert clean_run < RELAY_BOUND_S


CASES = [
    ("received", "Read"), ("sent", "Write"),
    ("ordering", "Read"), ("ordering", "Write"), ("ordering", "DescribeConfigs"),
    ("store", "Read"), ("store", "Write"), ("store", "DescribeConfigs"),
    ("group", "Read"), ("transactional", "Write"),
]
"""Every listed right but Create, by what it is on; Create: the fresh process below."""


def _grant(world: World, what: str, prefix: str | None = None) -> Grant:
    prefix = prefix or world.prefix
    by_name = {g.name: g for g in process_grants(prefix, acl_app.relay(world.source, world.out))}
    name = {"received": world.source, "sent": world.out,
            "ordering": ordering_changelog(prefix, acl_app.NAME),
            "store": store_changelog(prefix, acl_app.NAME, "counts"),
            "group": f"{prefix}-{acl_app.NAME}",
            "transactional": f"{prefix}-{acl_app.NAME}-task-"}[what]
    return by_name[name]


@pytest.mark.slow
def test_the_cases_are_every_listed_acl(world: World) -> None:
    listed = {(g.name, op) for g in process_grants(world.prefix, acl_app.relay(
        world.source, world.out)) for op in g.operations}
    played = {(_grant(world, what).name, op) for what, op in CASES}
    creates = {(_grant(world, what).name, "Create") for what in ("ordering", "store")}
    assert played | creates == listed
    assert len(listed) == 12


@pytest.mark.slow
@pytest.mark.parametrize(("what", "op"), CASES, ids=[f"{w}-{o}" for w, o in CASES])
def test_a_revoked_acl_stops_naming_its_grant_and_granted_again_nothing_is_lost(
    world: World, clean_run: float, what: str, op: str
) -> None:
    grant = _grant(world, what)
    assert op in grant.operations
    world.acl(grant, op, add=False)
    try:
        world.produce(3)
        if (what, op) == ("store", "Read"):
            # After a clean stop a restart trusts the local stores and reads no store
            # changelog (workers/checkpoint.py): play the restart after a crash, which does.
            for checkpoint in world.state_dir.rglob(CHECKPOINT_FILE):
                checkpoint.unlink()
        where, detail, took = _refused(world)
        print(f"{what} {op}: {where} refusal in {took:.1f} s")
        assert took < STOP_BOUND_S
        _names_the_grant(detail, grant, op, world.principal)
    finally:
        world.acl(grant, op, add=True)
    _run_until_relayed(world)
    _assert_exactly_once(world.relayed(), world.produced)


@pytest.mark.slow
def test_without_create_the_first_start_refuses_naming_each_changelog(
    world: World, clean_run: float
) -> None:
    fresh = f"{world.prefix}-new"
    out = unique_name("acl-out-new", "acls")
    admin = world.broker.admin()
    admin.create_topics([NewTopic(out, 1, 1)], request_timeout=30)[out].result(timeout=35)
    process = acl_app.relay(world.source, out)
    grants = process_grants(fresh, process)
    for g in grants:
        for op in g.operations:
            if not (op == "Create" and g.resource == "Topic"):
                world.acl(g, op, add=True)
    ordering = next(g for g in grants if g.name == ordering_changelog(fresh, acl_app.NAME))
    store = next(g for g in grants if g.name == store_changelog(fresh, acl_app.NAME, "counts"))
    # Without Create on either: the ordering changelog, created first, is refused.
    where, detail, took = _refused(world, fresh, process)
    assert where == "start" and took < STOP_BOUND_S
    _names_the_grant(detail, ordering, "Create", world.principal)
    world.acl(ordering, "Create", add=True)
    where, detail, took = _refused(world, fresh, process)
    assert where == "start" and took < STOP_BOUND_S
    _names_the_grant(detail, store, "Create", world.principal)
    world.acl(store, "Create", add=True)
    _run_until_relayed(world, out, fresh, process)
    _assert_exactly_once(world.relayed(out), world.produced)


@pytest.mark.slow
def test_a_reset_runs_with_the_process_rights_and_the_listed_reset_rights(
    world: World, clean_run: float, tmp_path: Path
) -> None:
    """``acls --reset`` prints what a reset needs besides the process's rights: granted by
    running it, ``parsley-coordinator reset`` of the stopped relay runs as that user."""
    printed = CliRunner().invoke(cli, [
        "acls", "tests.acl_app:processes", "--prefix", world.prefix, "--reset",
        "--principal", world.principal, "--bootstrap-servers", world.broker.bootstrap,
        "--command-config", str(world.broker.data_dir / "admin.properties")])
    assert printed.exit_code == 0, printed.output
    _run_printed([line for line in printed.output.splitlines() if line.startswith("kafka-")])
    settings = tmp_path / "reset.toml"
    settings.write_text("[kafka_properties]\n" + "".join(
        f'"{k}" = "{v}"\n' for k, v in world.client.items()))
    reset = CliRunner().invoke(cli, [
        "reset", "tests.acl_app:processes", "--to-latest", "--yes", "--config", str(settings),
        "--bootstrap-servers", world.broker.bootstrap, "--prefix", world.prefix,
        "--state-dir", str(world.state_dir)])
    assert reset.exit_code == 0, reset.output
    assert f"reset {acl_app.NAME}: boundary recorded" in reset.output
    admin = world.broker.admin()
    gone = admin.describe_topics(TopicCollection([ordering_changelog(world.prefix,
                                                                     acl_app.NAME)]))
    with pytest.raises(KafkaException, match="UNKNOWN_TOPIC"):
        next(iter(gone.values())).result(timeout=20)


@pytest.mark.slow
def test_the_runbook_s_acl_commands_run_as_written(world: World, clean_run: float) -> None:
    """docs/runbooks.md's ``SUBSTRATE_MISCONFIGURED`` block for a refused right (the commands
    with ``--command-config <admin.properties>``; tests/e2e/test_coordinator_runbooks.py runs
    every other runbook command on the plaintext broker, which has no authorizer) runs against
    this broker as written, and the listing shows the rights the first command printed."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "runbooks.md").read_text()
    commands = [line.strip() for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S)
                for line in re.sub(r"\\\n\s*", " ", block).splitlines()
                if "<admin.properties>" in line]
    assert [c.split()[0] for c in commands] == ["parsley-coordinator", "kafka-acls"], commands
    values = {"<app>": "tests.acl_app:processes", "<prefix>": world.prefix,
              "<name>": world.user, "<servers>": world.broker.bootstrap,
              "<admin.properties>": str(world.broker.data_dir / "admin.properties")}
    filled = []
    for command in commands:
        for key, value in values.items():
            command = command.replace(key, value)
        assert "<" not in command, f"unfilled placeholder in: {command}"
        filled.append(shlex.split(command))
    printed = CliRunner().invoke(cli, filled[0][1:])
    assert printed.exit_code == 0, printed.output
    listing = subprocess.run([sys.executable, "-m", "devtools.devbroker_cli", "tool",
                              *filled[1]], capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stdout + listing.stderr
    for grant in process_grants(world.prefix, acl_app.relay(world.source, world.out)):
        assert grant.name in listing.stdout, (grant.name, listing.stdout)
