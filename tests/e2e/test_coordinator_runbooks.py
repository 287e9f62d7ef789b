"""Every command in docs/runbooks.md, run in document order against the real broker.

The ``sh`` blocks of the runbooks are extracted, their placeholders filled in
for a relay process that ``parsley-coordinator run`` is running, and each
command is run: the Kafka tools through ``parsley-devbroker tool`` (the same
jars as the broker), ``parsley-coordinator`` through its module, ``rm -rf``
on the state directory. Each must exit 0. A transaction is left open on the
source partition first, for the runbook that finds and aborts one at its start
offset. The run ends with the reset: the ``parsley-coordinator reset`` commands
(a dry run that changes nothing, then the reset, which records its boundary),
then the same steps by hand, after which the
process's group and changelogs are gone. A meta-check: every
refusal reason has a runbook on the page.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from confluent_kafka import Producer

from devtools.kafka_support import QUIET
from parsley.declarations import ordering_changelog
from parsley.refusals import Reason
from workers.admin import describe_topic

RUNBOOKS = Path(__file__).resolve().parents[2] / "docs" / "runbooks.md"
CLI = [sys.executable, "-m", "coordinator.cli"]
DEVBROKER_TOOL = [sys.executable, "-c", "from devtools.devbroker_cli import main; main()", "tool"]
APP = '''
import os
from parsley import Channel, Effects, Process, Store
from parsley.serdes import BYTES

OUT = Channel(os.environ["RB_OUT"], BYTES, BYTES)


def handle(delivery, state):
    return Effects.builder().send(OUT, delivery.key, delivery.value).build()


processes = [Process("shipper").receives(Channel(os.environ["RB_SRC"], BYTES, BYTES), handle)
             .sends(OUT).stores(Store("inventory", BYTES, BYTES))]
'''


def runbook_commands(text: str) -> list[str]:
    """Commands of every ```sh block, continuation lines joined, in document order."""
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.strip() for line in joined.splitlines() if line.strip()]
    return commands


def test_every_reason_has_a_runbook() -> None:
    text = RUNBOOKS.read_text()
    missing = [r.name for r in Reason if r.name not in text]
    assert not missing, f"reasons without a runbook: {missing}"
    assert "Log the status" in text and "with Parsley.start(config, shipper) as parsley:" in text


@pytest.mark.slow
def test_every_runbook_command_runs_against_the_broker(
    kafka_bootstrap: str, kafka_admin: Any, create_topic: Any, tmp_path: Path
) -> None:
    src = create_topic(partitions=1)
    out = create_topic(partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(src.name, key=b"k", value=b"v", partition=0)
    assert producer.flush(30) == 0
    (tmp_path / "rbapp.py").write_text(APP)
    prefix = f"rb-{uuid.uuid4().hex[:8]}"
    state_dir = tmp_path / "state"
    app_id = f"{prefix}-shipper"
    env = dict(os.environ, RB_SRC=src.name, RB_OUT=out.name,
               PYTHONPATH=os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")]))
    values = {"<servers>": kafka_bootstrap, "<prefix>": prefix, "<process>": "shipper",
              "<app-id>": app_id, "<state.dir>": str(state_dir), "<topic>": src.name,
              "<partition>": "0", "<position>": "0", "<bytes>": "2097152",
              "<longer>": "604800000", "<app>": "rbapp:processes", "<start-offset>": "1"}
    run = subprocess.Popen([*CLI, "run", "rbapp:processes", "--bootstrap-servers",
                            kafka_bootstrap, "--prefix", prefix, "--state-dir", str(state_dir)],
                           cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ran: list[str] = []
    outputs: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 90
        while True:
            res = subprocess.run([*CLI, "status", "--json", "--prefix", prefix, "--state-dir",
                                  str(state_dir), "--timeout", "2"], cwd=tmp_path, env=env,
                                 capture_output=True, text=True)
            if res.returncode == 0 and \
                    orjson.loads(res.stdout)["processes"]["shipper"]["state"] == "RUNNING":
                break
            assert run.poll() is None, f"run exited: {run.communicate()[1]}"
            assert time.monotonic() < deadline, "the process never reported RUNNING"
            time.sleep(0.5)
        # A transaction left open on the source partition, for the runbook that finds and
        # aborts one at its start offset (offset 1, after the record at 0).
        hanging = Producer({"bootstrap.servers": kafka_bootstrap,
                            "transactional.id": f"{prefix}-open", **QUIET,
                            "transaction.timeout.ms": 600_000})
        hanging.init_transactions(30)
        hanging.begin_transaction()
        hanging.produce(src.name, key=b"k", value=b"open", partition=0)
        assert hanging.flush(30) == 0
        commands = runbook_commands(RUNBOOKS.read_text())
        assert len(commands) >= 20, commands
        for command in commands:
            if "<admin.properties>" in command:
                continue  # ACLs: this broker has no authorizer; tests/e2e/test_acls.py runs them
            for key, value in values.items():
                command = command.replace(key, value)
            assert "<" not in command, f"unfilled placeholder in: {command}"
            argv = shlex.split(command)
            if argv[0] == "rm":
                target = Path(argv[-1])
                assert target.is_relative_to(tmp_path), target
                shutil.rmtree(target, ignore_errors=True)
                ran.append(command)
                continue
            if argv[0].startswith("kafka-"):
                full = [*DEVBROKER_TOOL, *argv]
            elif argv[0] == "parsley-coordinator":
                full = [*CLI, *argv[1:]]
            elif argv[0] == "python":
                full = [sys.executable, *argv[1:]]
            else:
                raise AssertionError(f"unexpected command in the runbooks: {command}")
            retry_until = time.monotonic() + (45 if "--delete --group" in command else 0)
            while True:
                res = subprocess.run(full, cwd=tmp_path, env=env, capture_output=True,
                                     text=True, timeout=120)
                # kafka-consumer-groups reports a non-empty group on stderr with status 0.
                failed = res.returncode != 0 or "GroupNotEmpty" in res.stdout + res.stderr
                if not failed or time.monotonic() > retry_until:
                    break
                time.sleep(2)
            assert not failed, f"{command}\nexit {res.returncode}\n{res.stdout}\n{res.stderr}"
            if argv[:2] == ["parsley-coordinator", "reset"] and "--dry-run" not in argv:
                # The reset ran: the changelogs are gone before the manual steps run.
                assert describe_topic(kafka_admin, ordering_changelog(prefix, "shipper")) \
                    is None
            ran.append(command)
            outputs[command] = res.stdout
        run.communicate(timeout=60)
        assert run.returncode == 0, "run returns 0 after parsley-coordinator stop"
    finally:
        if run.poll() is None:
            run.terminate()
            run.communicate(timeout=60)
    assert any(c.startswith("parsley-coordinator inspect") for c in ran)
    resets = [c for c in ran if c.startswith("parsley-coordinator reset")]
    assert [("--dry-run" in c) for c in resets] == [True, False], resets
    assert "dry run: nothing changed" in outputs[resets[0]]
    assert "boundary recorded in" in outputs[resets[1]]
    assert describe_topic(kafka_admin, ordering_changelog(prefix, "shipper")) is None
    assert describe_topic(kafka_admin, f"{app_id}-inventory-changelog") is None
    assert not (state_dir / app_id).exists()


@pytest.mark.slow
def test_the_documented_causes_decoder_prints_each_cause(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    from coordinator.bootstrap import kafka_topic_id
    from parsley.engine.channel import ChannelId
    from parsley.wire import CAUSES_HEADER, encode_causes

    topic = create_topic(partitions=1)
    a, b = ChannelId(uuid.UUID(int=7), 0), ChannelId(uuid.UUID(int=9), 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **QUIET})
    producer.produce(topic.name, value=b"plain", partition=0)
    producer.produce(topic.name, value=b"caused", partition=0,
                     headers=[(CAUSES_HEADER, encode_causes({a: 5, b: 11}))])
    producer.produce(topic.name, value=b"bad", partition=0, headers=[(CAUSES_HEADER, b"\x01")])
    assert producer.flush(30) == 0
    # A record in a transaction: "txn" at 3, its commit marker at 4, "after" at 5.
    txn = Producer({"bootstrap.servers": kafka_bootstrap,
                    "transactional.id": f"runbook-{uuid.uuid4().hex[:8]}", **QUIET})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic.name, value=b"txn", partition=0)
    txn.commit_transaction(30)
    # The coordinator writes the marker after commit_transaction returns: wait for it
    # (log end 5) before the next record, so that it lands at 5.
    from confluent_kafka import Consumer, TopicPartition

    watcher = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "unused", **QUIET})
    deadline = time.monotonic() + 30
    while watcher.get_watermark_offsets(TopicPartition(topic.name, 0), timeout=10)[1] < 5:
        assert time.monotonic() < deadline, "the commit marker was not written"
        time.sleep(0.1)
    watcher.close()
    producer.produce(topic.name, value=b"after", partition=0)
    assert producer.flush(30) == 0
    [command] = [c for c in runbook_commands(RUNBOOKS.read_text()) if "decode_causes" in c]
    argv = shlex.split(command.replace("<servers>", kafka_bootstrap)
                       .replace("<topic>", topic.name).replace("<partition>", "0"))
    assert argv[0] == "python"

    def decode(position: int) -> Any:
        return subprocess.run([sys.executable, *[x.replace("<position>", str(position))
                                                 for x in argv[1:]]],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)

    plain, caused, bad, marker, beyond = decode(0), decode(1), decode(2), decode(4), decode(9)
    assert plain.returncode == 0 and plain.stdout.strip() == "no parsley.causes header"
    assert caused.returncode == 0, caused.stderr
    assert caused.stdout.splitlines() == [f"{kafka_topic_id(a.topic_id)}[0] 5",
                                          f"{kafka_topic_id(b.topic_id)}[2] 11"]
    assert bad.returncode == 1 and bad.stderr.startswith("UNDECODABLE_METADATA: "), bad.stderr
    # The one-liner's own errors are one line on stderr, never a traceback.
    for res in (bad, marker, beyond):
        assert "Traceback" not in res.stderr and res.stdout == "", (res.stdout, res.stderr)
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert marker.returncode == 1 and "no committed record at offset 4: a transaction " \
        "marker or an aborted record occupies it (the next committed record is at offset " \
        "5)" in marker.stderr, marker.stderr
    assert beyond.returncode == 1 and "offset 9" in beyond.stderr, beyond.stderr
