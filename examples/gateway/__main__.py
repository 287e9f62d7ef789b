"""``python -m examples.gateway``: the projection and the HTTP gateway in one command.

Creates ``<topics>.comments`` and ``<topics>.threads`` (one partition each) when missing,
resolves their topic ids, starts the projection (``Parsley.start``) and serves the gateway
with uvicorn until Ctrl-C. The signing key is ``$PARSLEY_GATEWAY_KEY`` (64 hex digits),
else a random one: tokens then do not outlive the process. docs/session.md, "The gateway
example".
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from examples.gateway.app import build_gateway, create_app
from examples.gateway.cluster import ensure_topics, topic_ids
from examples.gateway.projection import Topics, build

KEY_ENV = "PARSLEY_GATEWAY_KEY"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m examples.gateway",
        description="A comments service that reads its own writes: a Parsley projection "
                    "behind an HTTP gateway with session tokens (docs/session.md).")
    parser.add_argument("--bootstrap-servers", required=True, help="Kafka host:port[,...]")
    parser.add_argument("--topics", default="gateway",
                        help="topic base name: <base>.comments, <base>.threads (default gateway)")
    parser.add_argument("--prefix", default="gateway",
                        help="Parsley application id prefix (default gateway)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="Parsley's local state dir (default: Parsley's own default)")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    parser.add_argument("--ttl-s", type=float, default=3600.0,
                        help="token lifetime after its last mint, s; keep it well short of "
                             "the topics' retention (default 3600)")
    parser.add_argument("--wait-s", type=float, default=5.0,
                        help="how long a read waits for the projection, s (default 5)")
    parser.add_argument("--view-lag-ms", type=float, default=0.0,
                        help="delay every row before the gateway's view applies it, ms: a "
                             "deliberately lagging read model (default 0)")
    parser.add_argument("--no-sessions", action="store_true",
                        help="serve reads at once, without tokens: stale reads come back")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the projection and the gateway until interrupted; returns the exit code."""
    args = _parser().parse_args(argv)
    key: bytes | None = None
    if not args.no_sessions:
        hex_key = os.environ.get(KEY_ENV)
        if hex_key:
            key = bytes.fromhex(hex_key)
        else:
            key = secrets.token_bytes(32)
            print(f"gateway: no ${KEY_ENV}; signing with a random key, so tokens do not "
                  "outlive this process", file=sys.stderr)
    topics = Topics(args.topics)
    admin = AdminClient({"bootstrap.servers": args.bootstrap_servers})
    ensure_topics(admin, [topics.comments, topics.threads])
    ids = topic_ids(admin, [topics.comments, topics.threads])
    config = ParsleyConfig(args.bootstrap_servers, args.prefix)
    if args.state_dir is not None:
        config = ParsleyConfig(args.bootstrap_servers, args.prefix, state_dir=str(args.state_dir))
    with Parsley.start(config, *build(topics, ids)):
        gateway = build_gateway(args.bootstrap_servers, topics, ids, key=key, ttl_s=args.ttl_s,
                                lag_s=args.view_lag_ms / 1000, wait_s=args.wait_s)
        uvicorn.run(create_app(gateway), host=args.host, port=args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
