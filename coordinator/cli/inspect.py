"""``parsley-coordinator inspect``: a stopped process's ordering state, read from its changelog."""

from __future__ import annotations

import sys
from typing import Any

import click
import orjson

from coordinator.cli.common import (
    CONFIG_OPTION,
    PREFIX_OPTION,
    ExitCode,
    exit_on_config_problem,
    load_config,
    quiet_on_closed_pipe,
    start_local_broker,
)


def inspect_process(config: Any, process: str) -> dict[str, Any]:
    """Read ``<prefix>-<process>-__parsley.ordering-changelog`` into a report per task.

    Returns:
        Topic ids in Kafka's printed form (``kafka-topics --describe``).
        ``{"changelog", "tasks": [{"task", "records", "held": [{"topic_id",
        "topic", "partition", "count"}], "covered": [{"topic_id", "topic",
        "partition", "covered", "fed_to_end"}], "bindings": {name: id}}],
        "group_members": [str] | None}``: ``group_members`` describes each member
        of the process's consumer group ``<prefix>-<process>`` (empty: no worker is
        running; ``None``: the group could not be described), read before the
        changelog. Each ``held`` entry also carries its ``head`` and the head's
        ``blockers``, each classed against the cluster's offsets
        (:func:`coordinator.control.held_heads.held_heads`).

    Raises:
        ParsleyFailClosedError: ``UNKNOWN_ORDERING_STATE_FORMAT`` for state that
            cannot be trusted.
        StartError: the changelog does not exist or cannot be read.
    """
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient

    from coordinator.bootstrap import StartError, kafka_topic_id, read_ordering_state
    from coordinator.bootstrap.common import check_reachable, with_client_logger
    from coordinator.bootstrap.group import group_members
    from coordinator.control.held_heads import committed_offsets, held_heads
    from parsley.declarations import ordering_changelog
    from parsley.naming import application_id
    from workers.admin import describe_topic
    from workers.kafka_config import admin_config, restore_consumer_config

    name = ordering_changelog(config.application_id_prefix, process)
    admin = AdminClient(with_client_logger(
        admin_config(config.bootstrap_servers, config.kafka_properties)))
    check_reachable(admin, config.bootstrap_servers)
    info = describe_topic(admin, name)
    if info is None:
        raise StartError(f"the ordering changelog {name} does not exist")
    try:
        found = group_members(admin, application_id(config.application_id_prefix, process))
        members = None if found is None else [m.describe() for m in found]
    except StartError:
        members = None
    cfg = restore_consumer_config(config.bootstrap_servers, config.application_id_prefix,
                                  process, 0, config.kafka_properties)
    cfg["client.id"] = f"parsley-inspect-{process}"
    consumer = Consumer(with_client_logger(cfg))
    group = application_id(config.application_id_prefix, process)
    try:
        states = read_ordering_state(admin, consumer, name, info.partitions)
        committed = committed_offsets(admin, group) if any(
            s.inspector.held_channels() for s in states) else {}
        held = [held_heads(admin, consumer, name, s.task, s.inspector, committed)
                for s in states]
    finally:
        consumer.close()
    tasks = []
    for s, h in zip(states, held, strict=True):
        bindings = s.inspector.name_bindings()
        names = {v: k for k, v in bindings.items()}
        tasks.append({
            "task": s.task,
            "records": s.records,
            "held": h,
            "covered": [{"topic_id": kafka_topic_id(ch.topic_id),
                         "topic": names.get(ch.topic_id),
                         "partition": ch.partition, "covered": pos,
                         "fed_to_end": s.inspector.is_fed_to_end(pos)}
                        for ch, pos in s.inspector.covered_positions().items()],
            "bindings": {k: kafka_topic_id(v) for k, v in bindings.items()},
        })
    return {"changelog": name, "tasks": tasks, "group_members": members}


def _warn_if_running(config: Any, process: str, members: list[str] | None) -> None:
    """Warn on stderr that ``inspect`` may be reading state that moves under it."""
    from coordinator.bootstrap.group import session_timeout_ms
    from parsley.naming import application_id

    group = application_id(config.application_id_prefix, process)
    if members is None:
        click.echo(f"warning: could not describe consumer group '{group}', so whether "
                   f"process '{process}' is running is not known; if it runs, its ordering "
                   "state may move while this reads it", err=True)
    elif members:
        click.echo(f"warning: consumer group '{group}' has {len(members)} member(s) "
                   f"({'; '.join(members)}): process '{process}' may be running, and its "
                   "ordering state may move while this reads it (a stopped worker stays a "
                   "member until its session times out, session.timeout.ms "
                   f"{session_timeout_ms(config.kafka_properties)} ms). Stop it first "
                   "(parsley-coordinator stop) for a settled view", err=True)


@click.command("inspect")
@click.option("--process", "process", required=True, help="The process name.")
@click.option("--bootstrap-servers",
              help="Kafka bootstrap.servers. [required: here, --local-broker, in --config, "
                   "or as PARSLEY_BOOTSTRAP_SERVERS]")
@click.option("--local-broker", is_flag=True,
              help="Use the parsley-devbroker on this machine, of $PARSLEY_DEVBROKER_DIR "
                   "(default ${XDG_CACHE_HOME:-~/.cache}/parsley/devbroker).")
@CONFIG_OPTION
@PREFIX_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def command(process: str, bootstrap_servers: str | None, local_broker: bool,
            config_file: str | None, prefix: str | None, as_json: bool) -> None:
    """Read a stopped process's ordering state from its changelog.

    For each task (changelog partition): which channels hold messages and how
    many, each held head and the causes it waits for, classed as status classes
    them (behind, in open txn, not produced, no record: from the partitions'
    offsets now), how far each channel is covered (fed, or known never to arrive;
    "fed to end" for a deleted topic), and which topic id each name was
    bound to. Run it on a stopped process: a running one changes underneath,
    and a warning on stderr says so when the process's consumer group has
    members.
    """
    from coordinator.bootstrap import StartError
    from parsley.refusals import ParsleyFailClosedError
    from parsley.status import HoldClass

    if local_broker:
        bootstrap_servers = start_local_broker()
    config = load_config(config_file, bootstrap_servers=bootstrap_servers,
                          application_id_prefix=prefix)
    try:
        report = inspect_process(config, process)
    except ParsleyFailClosedError as exc:
        click.echo(f"{exc}", err=True)
        sys.exit(ExitCode.REFUSAL)
    except StartError as exc:
        click.echo(f"{exc}", err=True)
        sys.exit(ExitCode.FAILURE)
    except Exception as exc:
        exit_on_config_problem(exc, config, config_file)
        raise
    _warn_if_running(config, process, report["group_members"])
    with quiet_on_closed_pipe():
        if as_json:
            click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
            return
        click.echo(f"changelog {report['changelog']}")
        for t in report["tasks"]:
            click.echo(f"task {t['task']}: {t['records']} record(s)")
            for h in t["held"]:
                click.echo(f"  held     {h['topic'] or h['topic_id']}[{h['partition']}]: "
                           f"{h['count']} message(s), head {h['head']}  "
                           f"(topic id {h['topic_id']})")
                for b in h["blockers"] or ():
                    cls = "" if b["class"] is None else (
                        f" ({HoldClass(b['class']).label}, LSO {b['last_stable']} "
                        f"end {b['end']})")
                    settled = "-" if b["settled"] is None else b["settled"]
                    click.echo(f"    waits for {b['topic']}[{b['partition']}] needs "
                               f"{b['required']} settled {settled}{cls}")
                if h["blockers"] == []:
                    click.echo("    deliverable: goes on the next drain once running")
            for c in t["covered"]:
                pos = "fed to end" if c["fed_to_end"] else str(c["covered"])
                click.echo(f"  covered  {c['topic'] or c['topic_id']}[{c['partition']}] "
                           f"up to {pos}")
            for n, i in t["bindings"].items():
                click.echo(f"  binding  {n} -> {i}")
