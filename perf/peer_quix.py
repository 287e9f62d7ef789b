"""The Quix Streams peer relay: ``dataframe(in).to_topic(out)``, exactly once (docs/performance.md).

Run by :mod:`perf.peers` with the Python of its own environment (a venv where Quix Streams
and the confluent-kafka it pins are installed), never imported by the project: it imports
only Quix Streams and the standard library. Keys, values and headers are bytes, relayed as
they are. Prints ``ready`` once the application is built; the benchmark's warm-up record
proves the consumer was assigned. SIGTERM stops it cleanly (Quix commits and exits).

Usage: ``python peer_quix.py --bootstrap-servers H:P --input IN --output OUT --group G
--commit-interval-s 0.1 --batch 500 --state-dir DIR``.
"""

from __future__ import annotations

import argparse
import logging


def main() -> None:
    """Parse the arguments and run the relay until SIGTERM."""
    from quixstreams import Application  # type: ignore[import-not-found]

    ap = argparse.ArgumentParser(prog="peer_quix.py", description=__doc__)
    ap.add_argument("--bootstrap-servers", required=True)
    ap.add_argument("--input", required=True)
    ap.add_argument("--output", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--commit-interval-s", type=float, default=5.0)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--state-dir", required=True)
    a = ap.parse_args()
    app = Application(
        broker_address=a.bootstrap_servers, consumer_group=a.group,
        auto_offset_reset="earliest", commit_interval=a.commit_interval_s,
        processing_guarantee="exactly-once", state_dir=a.state_dir,
        loglevel=logging.WARNING, auto_create_topics=False, use_changelog_topics=False,
        consumer_extra_config={"session.timeout.ms": 45_000, "heartbeat.interval.ms": 3_000},
    )
    source = app.topic(a.input, key_deserializer="bytes", value_deserializer="bytes")
    sink = app.topic(a.output, key_serializer="bytes", value_serializer="bytes")
    app.dataframe(source).to_topic(sink)
    print("ready", flush=True)
    app.run()


if __name__ == "__main__":
    main()
