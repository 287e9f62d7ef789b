"""Restore benchmark: a task restarted with 10^5 held messages of 1 KiB (docs/performance.md).

Procedure, on a real broker:

1. a relay process receives topics A, B and C (one partition each); the load
   generator writes ``held`` records of ``value_bytes`` on B, each naming A@0 as a
   cause (plus 15 channels not received), while A stays empty, so every one is held;
2. one worker runs until its status reports all of them held, then stops cleanly
   (SIGTERM: it commits, so the held bodies are in the ordering changelog);
3. a probe record with no cause is written on C, and the task is respawned with a
   fresh state directory (so it restores everything from the changelog, as on a new
   machine); then that task is stopped cleanly, a second probe written, and the task
   respawned over the same state directory (its checkpoint trusted: no changelog read).
   Figures: seconds from the spawn until the status says RUNNING (restore
   done), seconds until the probe is read from the output (it processes again: the
   reader's own read time, its group joined before the spawn), and
   the worker's resident memory while it holds them all (peak over the first
   seconds after the restart, and at the end).

Run alone: ``python -m perf.restore --bootstrap-servers HOST:PORT [--held 100000]``.
Prints figures; asserts nothing about time.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from typing import Any

from confluent_kafka.admin import AdminClient

from perf import load
from perf.load import now_us
from perf.measure import OutputReader, WorkerSampler
from perf.runs import OUTPUT_CONFIG, Loader, ParsleyRelay, create_topics, delete_topics

__all__ = ["restore_benchmark"]


def _say(msg: str) -> None:
    print(f"[perf {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def restore_benchmark(bootstrap: str, admin: AdminClient, held: int, value_bytes: int,
                      workdir: str, timeout_s: float = 600.0,
                      profile_path: str | None = None,
                      worker_patches: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run the restore benchmark; returns its figures.

    ``profile_path``: run the restarted worker under pyinstrument and write its
    profile there (``perf.profile_worker.profiled_run``). ``worker_patches``: apply
    these :data:`perf.patches.PATCHES` in the restarted worker.

    Returns:
        ``{"held", "value_bytes", "hold_seconds", "rss_holding_bytes",
        "seconds_to_running", "seconds_to_process", "rss_bytes", "restore_records",
        "clean_restart_seconds_to_running", "clean_restart_seconds_to_process",
        "clean_restart_checkpoint", "clean_restart_restore_records", "clean_restart_held"}``;
        seconds are wall-clock, RSS in bytes.

    Raises:
        RuntimeError: a phase did not finish within ``timeout_s``.
    """
    from parsley.engine.channel import ChannelId

    tag = f"perf-{uuid.uuid4().hex[:8]}-restore"
    a, b, c, out = f"{tag}-a", f"{tag}-b", f"{tag}-c", f"{tag}-out"
    create_topics(admin, [(a, 1, {}), (b, 1, {}), (c, 1, {}), (out, 1, OUTPUT_CONFIG)])
    relay = ParsleyRelay(bootstrap, [a, b, c], out, tag, 100,
                         tempfile.mkdtemp(prefix="state-", dir=workdir))
    _say(f"restore: writing {held} records of {value_bytes} B on B, each waiting for A@0")
    relay.start(120.0)
    try:
        loader = Loader(bootstrap, value_bytes, True, relay.topic_ids)
        cause = (ChannelId(relay.topic_ids[a], 0), 0)
        for i in range(held):
            loader._produce(b, 0, i, load.make_value(load.HELD, i, value_bytes),
                            load.frontier_header(i, loader.unreceived, extra=cause))
        loader.flush()
        t0 = time.monotonic()
        pid = relay.pids()[0]
        holding = relay.collector.wait_for(
            lambda m: m.get("pid") == pid and (m.get("held_total") or 0) >= held, timeout_s,
            fail_on_stop=True)
        hold_s = time.monotonic() - t0
        _say(f"restore: {held} held after {hold_s:.1f} s; rss {holding.get('rss_bytes')}")
        relay.stop_workers()
        probe_seq = held
        loader.plain(c, 1, probe_seq)
        loader.flush()
        sampler = WorkerSampler([])
        reader = OutputReader(bootstrap, [out], sampler)
        if not reader.wait_assigned(timeout_s):
            raise RuntimeError("the output reader was given no partition")
        _say("restore: respawning the task with a fresh state directory")
        spawned_us = now_us()
        fresh = tempfile.mkdtemp(prefix="state-", dir=workdir)
        if profile_path:
            from perf.profile_worker import profiled_run

            running_s = relay.spawn(timeout_s, fresh, target=profiled_run,
                                    extra_args=(profile_path,))
        elif worker_patches:
            from perf.patches import patched_run

            running_s = relay.spawn(timeout_s, fresh, target=patched_run,
                                    extra_args=(worker_patches,))
        else:
            running_s = relay.spawn(timeout_s, fresh)
        sampler.pids = relay.pids()
        if not reader.read_until(1, timeout_s):
            raise RuntimeError("the probe was not relayed after the restart")
        # When the reader read it, not when this thread saw that: relay.spawn returns
        # only once a status report says RUNNING, which can come later.
        process_s = (reader.records[0].read_us - spawned_us) / 1e6
        time.sleep(2.0)  # a status interval or two: RSS settles, status reports the restore
        sampler.sample()
        statuses = relay.last_status()
        # A clean stop and a restart over the same state directory: its checkpoint lets
        # the restarted task trust its local stores (docs/model.md, "When the local stores
        # are trusted").
        _say("restore: a clean stop, then a restart over the same state directory")
        relay.stop_workers()
        loader.plain(c, 1, probe_seq + 1)
        loader.flush()
        spawned_us = now_us()
        clean_running_s = relay.spawn(timeout_s, fresh)
        if not reader.read_until(2, timeout_s):
            raise RuntimeError("the second probe was not relayed after the clean restart")
        clean_process_s = (reader.records[1].read_us - spawned_us) / 1e6
        time.sleep(1.0)
        clean = relay.last_status()
        reader.close()
    finally:
        relay.stop()
        delete_topics(admin, [a, b, c, out], tag)
    st = statuses[0] if statuses else {}
    restore = st.get("restore") or {}
    after_clean = (clean[0].get("restore") if clean else None) or {}
    return {
        "held": held,
        "value_bytes": value_bytes,
        "hold_seconds": round(hold_s, 2),
        "rss_holding_bytes": holding.get("rss_bytes"),
        "seconds_to_running": round(running_s, 2),
        "seconds_to_process": round(process_s, 2),
        "rss_bytes": max(sampler.peak_rss.values()) if sampler.peak_rss else st.get("rss_bytes"),
        "held_after_restart": st.get("held_total"),
        "restore_records": restore.get("records") if isinstance(restore, dict) else None,
        "clean_restart_seconds_to_running": round(clean_running_s, 2),
        "clean_restart_seconds_to_process": round(clean_process_s, 2),
        "clean_restart_checkpoint": after_clean.get("checkpoint"),
        "clean_restart_restore_records": after_clean.get("records"),
        "clean_restart_held": clean[0].get("held_total") if clean else None,
        "worker_patches": list(worker_patches),
    }


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (see the module docstring)."""
    ap = argparse.ArgumentParser(prog="python -m perf.restore", description=__doc__)
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--held", type=int, default=100_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--worker-patch", action="append", default=[], metavar="NAME",
                    help="apply a candidate fix from perf/patches.py in the restarted worker")
    ap.add_argument("--profile", metavar="FILE",
                    help="profile the restarted worker with pyinstrument into FILE")
    a = ap.parse_args(argv)
    admin = AdminClient({"bootstrap.servers": a.bootstrap_servers})
    with tempfile.TemporaryDirectory(prefix="parsley-perf-") as workdir:
        result = restore_benchmark(a.bootstrap_servers, admin, a.held, a.value_bytes, workdir,
                                   profile_path=a.profile,
                                   worker_patches=tuple(a.worker_patch))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
