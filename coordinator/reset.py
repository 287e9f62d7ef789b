"""``parsley-coordinator reset``: the runbooks' reset of a process, in its order, as one command.

A reset discards a process's causal past and starts a new causal lifetime at a
boundary the operator chooses (docs/runbooks.md, "Resetting a process"). Done
by hand it is several commands whose order matters; this module does them in
the one order that fails closed at every step:

1. refuse while the coordinator serving the prefix answers on its control
   endpoint with the process among its processes, or while any member of the
   process's consumer group ``<prefix>-<process>`` stays alive past a bounded
   wait (a stopped worker's static membership expires after its session
   timeout), each member named;
2. read the boundary: the group's committed offsets, each received
   partition's log start and end, the ordering state's held and covered
   positions; compute the chosen read positions (earliest, latest, an offset,
   or the first offset at or after a time: KIP-396's ``ListOffsets`` by
   timestamp) and refuse an offset outside ``[log start, log end]``;
3. delete the ordering changelog and every store changelog of the process
   (docs/operations.md, "Names on the cluster") and wait, bounded, until the
   cluster no longer describes them;
4. delete the group (its committed offsets), then commit the chosen positions
   with the AdminClient (KIP-396 ``AlterConsumerGroupOffsets``) under the commit
   metadata ``parsley.bootstrap``, and read them back;
5. remove this machine's local state ``<state_dir>/<app-id>``;
6. write the boundary record ``<state_dir>/resets/<app-id>-<UTC time>.json`` and
   return it for printing.

Why this order: a failure after step 3 leaves offsets without ordering records,
which the next start refuses as ``ORDERING_STATE_LOST`` (docs/failing-closed.md)
until the reset is run again; a failure after the group's deletion leaves a
process with no state and no positions, which starts at its declared initial
positions. No interruption can leave old ordering state beside new positions.

Why the metadata: the bootstrap adopts a committed position over an absent
changelog only when it wrote it itself (metadata ``parsley.bootstrap``;
``workers.positions.lost_positions``). The first start after a reset therefore
starts each received partition at the chosen position, and the engine raises
each channel's coverage to ``position - 1`` (``ProcessEngine.start``): positions
before the boundary count as settled causes, never waited for (docs/model.md,
"The session floor: replays and feed order"). ``kafka-consumer-groups
--reset-offsets`` writes no metadata, which is why it is only shown, with
``--dry-run``, as the preview of the positions.

The pure part (targets, the choice of positions, the plan's text and its Kafka
commands, the record) is :mod:`coordinator.reset_plan`; this module holds the calls
to Kafka and the control endpoint, and the subcommand.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import click
import orjson
from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec  # type: ignore[attr-defined]

from coordinator.bootstrap.changelog import read_ordering_state
from coordinator.bootstrap.clients import answer, new_admin
from coordinator.bootstrap.common import (
    ADMIN_TIMEOUT_S,
    BOOTSTRAP_METADATA,
    StartError,
    check_reachable,
    with_client_logger,
)
from coordinator.bootstrap.group import group_members, leave_window_s
from coordinator.bootstrap.positions import committed_positions, list_offsets
from coordinator.bootstrap.resolve import resolve_topics
from coordinator.cli_help import PlainDefaultOption
from coordinator.config import ParsleyConfig
from coordinator.reset_plan import (
    PartitionBoundary,
    ResetPlan,
    ResetRefused,
    Target,
    choose_positions,
    iso_utc,
    members_refusal,
    parse_target,
)
from parsley.declarations import Process, application_id, ordering_changelog, store_changelog

__all__ = [
    "DELETE_TIMEOUT_S",
    "PartitionBoundary",
    "ResetPlan",
    "ResetRefused",
    "Target",
    "choose_positions",
    "command",
    "coordinator_serving",
    "default_wait_s",
    "execute_reset",
    "members_refusal",
    "open_admin",
    "parse_target",
    "plan_reset",
    "wait_for_no_members",
]

log = logging.getLogger("parsley.coordinator.reset")

DELETE_TIMEOUT_S: Final = 60.0
"""Default bound on a changelog's deletion, s: from the delete request until two
describes 0.5 s apart answer that the topic does not exist."""

RECORDS_DIR: Final = "resets"
"""Under the state dir: where each reset's boundary record is written."""


# ------------------------------------------------------------------ Kafka and the endpoint


def coordinator_serving(config: ParsleyConfig, processes: Iterable[str],
                        timeout_s: float = 2.5) -> str | None:
    """The control endpoint of a coordinator serving any of ``processes`` under
    ``config``'s prefix and state dir, or ``None`` when none answers within ``timeout_s``.

    A coordinator that answers with none of the processes among its own is not one
    (another application under the same prefix)."""
    from coordinator.status_socket import (
        NoReplyError,
        default_endpoint,
        endpoint_file,
        listening,
        request,
    )

    record = endpoint_file(config)
    endpoint = record.read_text().strip() if record.exists() else ""
    endpoint = endpoint or default_endpoint(config)
    if listening(endpoint) is False:  # nothing accepts there: known at once
        return None
    try:
        reply = request(endpoint, {"op": "status"}, timeout_s=timeout_s)
    except NoReplyError:
        return None
    running = (reply.get("status") or {}).get("processes") or {}
    wanted = set(processes)
    if isinstance(running, dict) and running and not wanted.intersection(running):
        return None
    return endpoint


def wait_for_no_members(admin: AdminClient, group: str, window_s: float, *,
                        bootstrap_servers: str, poll_s: float = 0.5,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic) -> None:
    """Return once ``group`` has no member; wait at most ``window_s`` s (a stopped
    worker's static membership lasts its session timeout), logging the wait.

    Raises:
        ResetRefused: members still there after ``window_s`` (:func:`members_refusal`).
        StartError: the group could not be described, or its coordinator never answered.
    """
    start = clock()
    announced = False
    while True:
        present = group_members(admin, group)
        now = clock()
        if present == []:
            return
        if present and not announced:
            log.info("waiting up to %g s for the members of group %s to leave: [%s]",
                     window_s, group, "; ".join(sorted(m.describe() for m in present)))
            announced = True
        if now - start >= window_s:
            if present is None:
                raise StartError(f"the coordinator of group '{group}' did not answer a "
                                 f"describe within {window_s:g} s; retry")
            raise members_refusal(group, present, round(now - start, 1), bootstrap_servers)
        sleep(poll_s)


def _held_and_covered(config: ParsleyConfig, admin: AdminClient, process: Process,
                      topic_ids: Mapping[str, Any], partitions: int | None
                      ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int], str]:
    """``({(topic, p): held count}, {(topic, p): covered}, what was read)`` from the
    ordering changelog. State the bootstrap refuses (``UNKNOWN_ORDERING_STATE_FORMAT``,
    a refusal that asks for a reset) is reported as unreadable, never raised: the reset
    is its remedy."""
    from confluent_kafka import Consumer

    from coordinator.bootstrap.common import StartRetryableError
    from parsley.refusals import ParsleyFailClosedError
    from workers.kafka_config import restore_consumer_config

    if partitions is None:
        return {}, {}, "absent"
    cfg = restore_consumer_config(config.bootstrap_servers, config.application_id_prefix,
                                  process.name, 0, config.kafka_properties)
    cfg["client.id"] = f"parsley-reset-{process.name}"
    consumer = Consumer(with_client_logger(cfg))
    try:
        states = read_ordering_state(admin, consumer,
                                     ordering_changelog(config.application_id_prefix,
                                                        process.name), partitions)
    except (ParsleyFailClosedError, StartRetryableError) as exc:
        log.warning("%s: the ordering state is unreadable, so the record has no held or "
                    "covered positions: %s", process.name, exc)
        return {}, {}, f"unreadable: {exc}"
    finally:
        consumer.close()
    by_id = {v: k for k, v in topic_ids.items()}
    held: dict[tuple[str, int], int] = {}
    covered: dict[tuple[str, int], int] = {}
    for s in states:
        for ch, n in s.inspector.held_channels().items():
            if ch.topic_id in by_id:
                held[(by_id[ch.topic_id], ch.partition)] = n
        for ch, pos in s.inspector.covered_positions().items():
            if ch.topic_id in by_id:
                covered[(by_id[ch.topic_id], ch.partition)] = pos
    return held, covered, f"read ({partitions} partition(s))"


def _by_time(admin: AdminClient, tps: Sequence[TopicPartition],
             timestamp_ms: int) -> dict[tuple[str, int], int]:
    """ListOffsets by timestamp (KIP-396): the first offset whose record time is at or
    after ``timestamp_ms`` per partition, ``-1`` where none is."""
    spec = OffsetSpec.for_timestamp(timestamp_ms)
    try:
        futures = admin.list_offsets({TopicPartition(t.topic, t.partition): spec for t in tps},
                                     isolation_level=IsolationLevel.READ_COMMITTED,
                                     request_timeout=ADMIN_TIMEOUT_S)
        return {(tp.topic, tp.partition): int(answer(f, f"listing the offsets of "
                                                         f"{tp.topic}-{tp.partition} at "
                                                         f"{timestamp_ms} ms").offset)
                for tp, f in futures.items()}
    except KafkaException as exc:
        raise StartError(f"could not list the offsets at {timestamp_ms} ms: {exc}") from exc


def plan_reset(config: ParsleyConfig, process: Process, target: Target,
               admin: AdminClient) -> ResetPlan:
    """Read the boundary of ``process`` and choose its positions; changes nothing.

    Raises:
        ResetRefused: the target cannot be applied (:func:`choose_positions`).
        StartError: a received topic does not exist, or the cluster could not be queried.
    """
    from workers.changelog import describe_topic
    from workers.kafka_errors import SubstrateError

    prefix = config.application_id_prefix
    group = application_id(prefix, process.name)
    topics = resolve_topics(admin, process.received_topics)
    tps = [TopicPartition(t, p) for t in process.received_topics
           for p in range(topics[t].partitions)]
    names = [ordering_changelog(prefix, process.name),
             *(store_changelog(prefix, process.name, s.name) for s in process.declared_stores)]
    try:
        infos = {n: describe_topic(admin, n) for n in names}
    except SubstrateError as exc:
        raise StartError(f"could not describe the changelogs of '{process.name}': {exc}") from exc
    ordering = infos[names[0]]
    held, covered, state = _held_and_covered(config, admin, process,
                                      {t: r.topic_id for t, r in topics.items()},
                                      None if ordering is None else ordering.partitions)
    committed = committed_positions(admin, group, tps, time.sleep)
    start = list_offsets(admin, tps, latest=False)
    end = list_offsets(admin, tps, latest=True)
    bounds = {k: (start[k], end[k]) for k in start}
    by_time = _by_time(admin, tps, target.timestamp_ms) \
        if target.mode == "datetime" and target.timestamp_ms is not None else None
    chosen = choose_positions(target, bounds, by_time)
    parts = tuple(PartitionBoundary(
        t.topic, t.partition,
        committed[(t.topic, t.partition)][0] if (t.topic, t.partition) in committed else None,
        committed[(t.topic, t.partition)][1] if (t.topic, t.partition) in committed else None,
        start[(t.topic, t.partition)], end[(t.topic, t.partition)],
        covered.get((t.topic, t.partition)), held.get((t.topic, t.partition), 0),
        chosen[(t.topic, t.partition)]) for t in tps)
    return ResetPlan(process.name, prefix, config.bootstrap_servers, target, parts, names[0],
                     {n: i is not None for n, i in infos.items()},
                     Path(config.state_dir) / group, int(time.time() * 1000), state,
                     _last_status(config, process.name))


def _last_status(config: ParsleyConfig, process: str) -> dict[str, Any] | None:
    """The process's status in the last report ``run`` kept (docs/operations.md, "Status
    after exit"), with the exit's time and code; ``None`` when there is none."""
    from coordinator.last_status import last_status_file, read_last_report

    try:
        report = read_last_report(last_status_file(config.state_dir,
                                                   config.application_id_prefix))
    except OSError:
        return None
    if report is None or process not in report.processes:
        return None
    return {"exited_at": report.exited_at, "exit": report.exit_name,
            "exit_code": report.exit_code, **report.processes[process].to_json()}


def _delete_topics(admin: AdminClient, names: Sequence[str], timeout_s: float) -> None:
    """Delete ``names`` and wait until two describes 0.5 s apart answer "unknown" for
    each, at most ``timeout_s`` s in all (a topic being deleted cannot be created again,
    so the next start's creation waits on this).

    Raises:
        StartError: a deletion refused (ACLs: Delete on the topic) or not done in time.
    """
    from workers.changelog import describe_topic

    if not names:
        return
    deadline = time.monotonic() + timeout_s
    for name, future in admin.delete_topics(list(names),
                                            request_timeout=min(timeout_s, ADMIN_TIMEOUT_S)
                                            ).items():
        try:
            answer(future, f"deleting topic {name}", min(timeout_s, ADMIN_TIMEOUT_S))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise StartError(f"could not delete topic {name}: {exc}; a reset needs Delete on "
                             "the process's changelogs (docs/runbooks.md)") from exc
    pending = list(names)
    gone_once: set[str] = set()
    while pending:
        for name in list(pending):
            if describe_topic(admin, name, timeout_s=5.0) is None:
                if name in gone_once:
                    pending.remove(name)
                gone_once.add(name)
            else:
                gone_once.discard(name)
        if not pending:
            return
        if time.monotonic() >= deadline:
            raise StartError(f"topics {pending} were still described {timeout_s:g} s after "
                             "their deletion; run the reset again once they are gone")
        time.sleep(0.5)


def _delete_group(admin: AdminClient, group: str) -> None:
    """Delete ``group`` (its committed offsets); an absent group is already deleted.

    Raises:
        StartError: a member joined meanwhile (``NON_EMPTY_GROUP``), the deletion was
            refused otherwise (ACLs: Delete on the group), or no answer came.
    """
    try:
        answer(admin.delete_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)[group],
               f"deleting group '{group}'")
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        code = err.code() if isinstance(err, KafkaError) else None
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            return
        if code == KafkaError.NON_EMPTY_GROUP:
            raise StartError(f"a member joined group '{group}' during the reset, after its "
                             "changelogs were deleted: stop it and run the reset again") from exc
        raise StartError(f"could not delete group '{group}': {exc}; a reset needs Delete on "
                         "the group (docs/runbooks.md)") from exc


def _commit_positions(admin: AdminClient, group: str,
                      positions: Mapping[tuple[str, int], int]) -> None:
    """Commit ``positions`` to ``group`` with the metadata ``parsley.bootstrap``
    (AlterConsumerGroupOffsets, KIP-396), then read them back.

    Raises:
        StartError: a member joined meanwhile, the commit failed, or what is read back
            differs.
    """
    tps = [TopicPartition(t, p, o, metadata=BOOTSTRAP_METADATA)
           for (t, p), o in sorted(positions.items())]
    try:
        result = answer(admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=ADMIN_TIMEOUT_S)[group],
            f"committing the reset positions of group '{group}'")
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() in (
                KafkaError.UNKNOWN_MEMBER_ID, KafkaError.REBALANCE_IN_PROGRESS,
                KafkaError.ILLEGAL_GENERATION):
            raise StartError(f"a member joined group '{group}' during the reset, after its "
                             "changelogs were deleted: stop it and run the reset again") from exc
        raise StartError(f"could not commit the reset positions of group '{group}': "
                         f"{exc}") from exc
    errors = [tp for tp in result.topic_partitions if tp.error is not None]
    if errors:
        raise StartError(f"could not commit the reset positions of group '{group}': "
                         f"{[(e.topic, e.partition, str(e.error)) for e in errors]}")
    back = committed_positions(admin, group, [TopicPartition(t, p) for t, p in positions],
                               time.sleep)
    wrong = {k: back.get(k) for k, o in positions.items()
             if back.get(k) != (o, BOOTSTRAP_METADATA)}
    if wrong:
        raise StartError(f"group '{group}' reads back {wrong} after the reset committed "
                         f"{dict(positions)}; run the reset again")


def execute_reset(plan: ResetPlan, admin: AdminClient, *,
                  delete_timeout_s: float = DELETE_TIMEOUT_S) -> Path:
    """Carry out ``plan`` in the module's order and write its boundary record.

    Returns:
        The record's path, ``<state_dir>/resets/<app-id>-<UTC time>.json``.

    Raises:
        StartError: a deletion or the commit failed, or a member joined the group
            during the reset (the message says to run the reset again; until then the
            next start refuses ``ORDERING_STATE_LOST`` or starts at its declared positions).
        OSError: the local state or the record could not be written.
    """
    existing = [n for n, e in plan.changelogs.items() if e]
    log.info("%s: deleting %s", plan.group, existing or "no changelog (none exists)")
    _delete_topics(admin, list(plan.changelogs), delete_timeout_s)
    _delete_group(admin, plan.group)
    _commit_positions(admin, plan.group, plan.positions)
    log.info("%s: committed %s with metadata %s", plan.group,
             [f"{t}-{p}@{o}" for (t, p), o in sorted(plan.positions.items())],
             BOOTSTRAP_METADATA)
    if plan.local_state.exists():
        shutil.rmtree(plan.local_state)
    records = plan.local_state.parent / RECORDS_DIR
    records.mkdir(mode=0o700, parents=True, exist_ok=True)
    stamp = dt.datetime.fromtimestamp(plan.read_at_ms / 1000, tz=dt.UTC).strftime(
        "%Y%m%dT%H%M%S.%fZ")
    path = records / f"{plan.group}-{stamp}.json"
    record = {**plan.record(), "done_at": iso_utc(int(time.time() * 1000))}
    path.write_bytes(orjson.dumps(record, option=orjson.OPT_INDENT_2))
    return path


def open_admin(config: ParsleyConfig) -> AdminClient:
    """A new AdminClient for the reset, after checking the cluster answers.

    Raises:
        StartError: the cluster is unreachable.
    """
    admin = new_admin(config)
    check_reachable(admin, config.bootstrap_servers)
    return admin


def default_wait_s(config: ParsleyConfig) -> float:
    """How long the reset waits for members to leave by default, s: twice the workers'
    ``session.timeout.ms``, as a start does
    (:func:`~coordinator.bootstrap.group.leave_window_s`)."""
    return leave_window_s(config.kafka_properties)


# ------------------------------------------------------------------ the subcommand


def _default_state_dir() -> str:
    from coordinator.state_dir import default_state_dir

    return default_state_dir()


@click.command("reset", short_help="Reset processes of APP to a new causal boundary.")
@click.argument("app")
@click.option("--process", "process_names", multiple=True,
              help="A process to reset (repeatable). Default: every process APP declares.")
@click.option("--to-earliest", is_flag=True, help="Start at each partition's log start.")
@click.option("--to-latest", is_flag=True,
              help="Start at each partition's end: everything retained is skipped.")
@click.option("--to-offset", multiple=True, metavar="N|TOPIC:PARTITION=N",
              help="Start at offset N on every received partition, or per partition "
                   "(repeatable); each must lie in [log start, log end].")
@click.option("--to-datetime", metavar="ISO8601",
              help="Start at the first record at or after this time (UTC unless the time "
                   "gives an offset); the log end where none is.")
@click.option("--dry-run", is_flag=True,
              help="Print the plan and the Kafka commands it stands for; change nothing.")
@click.option("--yes", "-y", "assume_yes", is_flag=True,
              help="Do not ask for confirmation (required when stdin is not a terminal).")
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=None,
              show_default="2 x session.timeout.ms",
              help="Seconds to wait for the group's members to leave before refusing.",
              cls=PlainDefaultOption)
@click.option("--delete-timeout", type=click.FloatRange(min=1), default=DELETE_TIMEOUT_S,
              show_default=True, help="Seconds to wait for the changelogs' deletion.")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True, help="Use the parsley-devbroker on this machine.")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="TOML settings file (see docs/operations.md).")
@click.option("--prefix", "prefix",
              help="application_id_prefix. [required: here, in --config, or as "
                   "PARSLEY_APPLICATION_ID_PREFIX]")
@click.option("--state-dir", "state_dir", show_default=_default_state_dir(),
              help="Root of local state and sockets, as given to run (also state_dir in "
                   "--config, PARSLEY_STATE_DIR): its control socket, local state and the "
                   "reset records under resets/.",
                   cls=PlainDefaultOption)
def command(app: str, process_names: tuple[str, ...], to_earliest: bool, to_latest: bool,
            to_offset: tuple[str, ...], to_datetime: str | None, dry_run: bool,
            assume_yes: bool, wait_s: float | None, delete_timeout: float,
            bootstrap_servers: str | None, local_broker: bool, config_file: str | None,
            prefix: str | None, state_dir: str | None) -> None:
    """Reset processes of APP (module:attribute, required) to a new causal boundary.

    In order: refuse while the coordinator or any member of the process's group is
    alive; record the boundary (committed offsets, log start and end, what the
    ordering state covered and held); delete the ordering and store changelogs;
    replace the group's offsets with the chosen positions (committed as the
    bootstrap's own, so the next start adopts them); remove local state; write the
    record under <state-dir>/resets/ and print it. Exit status: 0 done (or dry
    run), 2 usage, 3 refused (nothing changed), 4 the cluster could not be queried
    or a step failed (run the reset again). See docs/runbooks.md, "Resetting a process".
    """
    import sys

    from coordinator import cli as _cli

    try:
        target = parse_target(to_earliest=to_earliest, to_latest=to_latest,
                              to_offset=to_offset, to_datetime=to_datetime)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not dry_run and not assume_yes and not sys.stdin.isatty():
        raise click.UsageError("reset deletes the process's changelogs and offsets; stdin is "
                               "not a terminal, so nothing can confirm it: pass --yes to "
                               "reset, or --dry-run to print the plan")
    if bootstrap_servers and local_broker:
        raise click.UsageError("give --bootstrap-servers or --local-broker, not both")
    declared = _cli.load_app(app)
    by_name = {p.name: p for p in declared}
    unknown = [n for n in process_names if n not in by_name]
    if unknown:
        raise click.UsageError(f"{app} declares no process {unknown}; it declares "
                               f"{sorted(by_name)}")
    processes = [by_name[n] for n in dict.fromkeys(process_names)] if process_names \
        else declared
    if local_broker:
        bootstrap_servers = _cli._local_broker()
    config = _cli._load_config(config_file, bootstrap_servers=bootstrap_servers,
                               application_id_prefix=prefix, state_dir=state_dir)
    from coordinator.state_dir import StateDirError, check_state_dir

    try:
        check_state_dir(config.state_dir)  # the local state and the record are written there
    except StateDirError as exc:
        raise click.UsageError(str(exc)) from exc
    from parsley.refusals import ParsleyFailClosedError

    done: list[str] = []
    try:
        window = default_wait_s(config) if wait_s is None else wait_s
        names = [p.name for p in processes]
        deadline = time.monotonic() + (0 if dry_run else window)
        while (endpoint := coordinator_serving(config, names)) is not None \
                and time.monotonic() < deadline:
            time.sleep(0.5)  # a coordinator just asked to stop closes its endpoint as it exits
        if endpoint is not None:
            refusal = (f"a coordinator serving {names} answers at {endpoint}; stop it first "
                       f"(parsley-coordinator stop --prefix {config.application_id_prefix} "
                       f"--state-dir {config.state_dir})")
            if not dry_run:
                raise ResetRefused(refusal)
            click.echo(f"(refused now: {refusal})")
        admin = open_admin(config)
        plans = []
        for p in processes:
            group = application_id(config.application_id_prefix, p.name)
            if not dry_run:
                wait_for_no_members(admin, group, window,
                                    bootstrap_servers=config.bootstrap_servers)
            plan = plan_reset(config, p, target, admin)
            plans.append(plan)
            click.echo("\n".join(plan.lines()))
            if dry_run:
                members = group_members(admin, group) or []
                if members:
                    click.echo(f"  (refused now: group {group} has live members "
                               f"[{'; '.join(sorted(m.describe() for m in members))}])")
                click.echo("  the Kafka commands it stands for (positions shown with "
                           "--dry-run: kafka-consumer-groups cannot commit them with the "
                           f"metadata {BOOTSTRAP_METADATA} the next start requires):")
                click.echo("\n".join(f"    {c}" for c in plan.kafka_commands()))
        if dry_run:
            click.echo("dry run: nothing changed")
            return
        asked = not assume_yes
        if asked and not click.confirm(
                f"reset {[p.process for p in plans]}? their causal past is discarded"):
            click.echo("not confirmed: nothing changed", err=True)
            sys.exit(_cli.ExitCode.REFUSAL)
        for i, plan in enumerate(plans):
            # Alive again since the plan was read (a coordinator started while a person
            # read the prompt)? Refuse before the first deletion; re-read the boundary
            # after a prompt, so the record is what was done.
            endpoint = coordinator_serving(config, [plan.process])
            if endpoint is not None:
                raise ResetRefused(f"a coordinator serving '{plan.process}' answers at "
                                   f"{endpoint}; stop it first")
            wait_for_no_members(admin, plan.group, 0,
                                bootstrap_servers=config.bootstrap_servers)
            if asked:
                plan = plan_reset(config, processes[i], target, admin)
            path = execute_reset(plan, admin, delete_timeout_s=delete_timeout)
            done.append(plan.process)
            click.echo(f"reset {plan.process}: boundary recorded in {path}")
            click.echo(orjson.dumps(plan.record(), option=orjson.OPT_INDENT_2).decode())
    except ResetRefused as exc:
        click.echo(f"reset refused after resetting {done} (the others are unchanged): {exc}"
                   if done else f"reset refused, nothing changed: {exc}", err=True)
        sys.exit(_cli.ExitCode.REFUSAL)
    except (StartError, ParsleyFailClosedError) as exc:
        click.echo(f"reset failed: {exc}" + (f" (reset of {done} done)" if done else ""),
                   err=True)
        sys.exit(_cli.ExitCode.FAILURE)
    except KafkaException as exc:
        problem = _cli._kafka_config_problem(exc, config, config_file)
        if problem is None:
            raise
        click.echo(f"wrong configuration: {problem}", err=True)
        sys.exit(_cli.ExitCode.USAGE)
