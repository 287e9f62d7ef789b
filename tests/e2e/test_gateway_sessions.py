"""The gateway example's load test: clients read their own writes through a lagging projection.

On the real broker, the projection (``examples/gateway/projection.py``) runs under
``Parsley.start``; the gateway (``examples/gateway/app.py``) is served by uvicorn on
127.0.0.1, with a view that applies each row ``LAG_MS`` after it arrives. Virtual clients
each keep one session and run post-then-read pairs: ``POST`` a comment, then ``GET`` its
thread with the token the post returned. A read *misses its own write* when it is served
(200 or 404) without the comment just posted.

* With tokens, no read misses its own write, and every read is served within the wait.
* The same gateway without tokens (``key=None``) serves at once, and its stale reads are
  counted: there must be some, or the lag is not exercising anything.

Sizes: ``PARSLEY_GATEWAY_PAIRS`` pairs per run (default 1,000) by
``PARSLEY_GATEWAY_CLIENTS`` concurrent clients (default 50). The figures are printed
(``pytest -s`` shows them). A second test reads a token the view cannot cover in time: a
503 naming the channel and offset it waits for, and a bad token is a 400.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvicorn
from confluent_kafka.admin import AdminClient

from coordinator import Parsley, ParsleyConfig
from examples.gateway.app import SESSION_HEADER, build_gateway, create_app
from examples.gateway.cluster import topic_ids
from examples.gateway.projection import Topics, build
from parsley.engine.channel import ChannelId
from parsley.session import CausalPast, TokenSigner

pytestmark = [pytest.mark.serial, pytest.mark.load]  # a load test: 50 clients, 1,000 pairs

PAIRS = int(os.environ.get("PARSLEY_GATEWAY_PAIRS", "1000"))
CLIENTS = int(os.environ.get("PARSLEY_GATEWAY_CLIENTS", "50"))
LAG_MS = 250
THREADS = 20
WAIT_S = 15.0  # a liveness bound on one read, far above the lag: never the thing measured
KEY = bytes(range(32))


@dataclass
class Figures:
    """What one run saw."""

    pairs: int = 0
    fresh: int = 0
    stale: int = 0
    refused: int = 0
    read_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def line(self, name: str) -> str:
        reads = sorted(self.read_ms)
        p95 = reads[int(0.95 * (len(reads) - 1))] if reads else 0.0
        return (f"{name}: {self.pairs} pairs in {self.wall_s:.1f} s "
                f"(gateway and clients {self.cpu_s:.1f} s CPU); reads with own write "
                f"{self.fresh}, missing own write (stale) {self.stale}, 503 {self.refused}; "
                f"read latency median {statistics.median(reads) if reads else 0:.0f} ms, "
                f"p95 {p95:.0f} ms")


async def _serve(app: Any) -> tuple[uvicorn.Server, asyncio.Task[None], str]:
    """uvicorn on a free loopback port, in this event loop; returns the base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False,
                                           timeout_keep_alive=30))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    deadline = time.monotonic() + 30
    while not server.started:
        assert not task.done(), "uvicorn stopped before it started"
        assert time.monotonic() < deadline, "uvicorn did not start in 30 s"
        await asyncio.sleep(0.02)
    host, port = sock.getsockname()
    return server, task, f"http://{host}:{port}"


async def _request(http: aiohttp.ClientSession, method: str, path: str,
                   headers: dict[str, str], body: Any = None) -> tuple[int, Any, Any]:
    """One request: (status, JSON body, response headers)."""
    async with http.request(method, path, headers=headers, json=body) as response:
        return response.status, await response.json(), response.headers


async def _client(http: aiohttp.ClientSession, pairs: range, sessions: bool,
                  figures: Figures) -> None:
    token: str | None = None
    for i in pairs:
        thread = f"t{i % THREADS}"
        headers = {SESSION_HEADER: token} if token else {}
        status, posted, answer = await _request(
            http, "POST", f"/threads/{thread}/comments", headers,
            {"author": f"client-{pairs.start}", "text": f"pair {i}"})
        assert status == 201, posted
        mine = posted["comment"]["id"]
        if sessions:
            token = answer[SESSION_HEADER]
            headers = {SESSION_HEADER: token}
        started = time.monotonic()
        status, read, answer = await _request(http, "GET", f"/threads/{thread}", headers)
        figures.read_ms.append((time.monotonic() - started) * 1000)
        figures.pairs += 1
        if status == 503:
            figures.refused += 1
            continue
        assert status in (200, 404), read
        if sessions:
            token = answer[SESSION_HEADER]
        seen = {c["id"] for c in read.get("comments", ())}
        if mine in seen:
            figures.fresh += 1
        else:
            figures.stale += 1


def _session(base: str, connections: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(base_url=base, connector=aiohttp.TCPConnector(limit=connections),
                                 timeout=aiohttp.ClientTimeout(total=60))


async def _load(app: Any, sessions: bool) -> Figures:
    server, task, base = await _serve(app)
    figures = Figures()
    try:
        async with _session(base, CLIENTS) as http:
            share = -(-PAIRS // CLIENTS)
            started, cpu = time.monotonic(), time.process_time()
            await asyncio.gather(*(
                _client(http, range(c * share, min(PAIRS, (c + 1) * share)), sessions, figures)
                for c in range(CLIENTS)))
            figures.wall_s = time.monotonic() - started
            figures.cpu_s = time.process_time() - cpu
    finally:
        server.should_exit = True
        await task
    return figures


def test_tokens_read_their_own_writes_where_plain_reads_go_stale(
    kafka_bootstrap: str, create_topic: Any, tmp_path: Path,
) -> None:
    topics = Topics(f"gw{uuid.uuid4().hex[:8]}")
    create_topic(topics.comments, partitions=1)
    create_topic(topics.threads, partitions=1)
    ids = topic_ids(AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0}),
                    [topics.comments, topics.threads])
    config = ParsleyConfig(kafka_bootstrap, f"gw-{uuid.uuid4().hex[:8]}",
                           state_dir=str(tmp_path))
    quiet = {"log_level": 0}
    with Parsley.start(config, *build(topics, ids)) as parsley:
        with_tokens = asyncio.run(_load(create_app(build_gateway(
            kafka_bootstrap, topics, ids, key=KEY, lag_s=LAG_MS / 1000, wait_s=WAIT_S,
            **quiet)), sessions=True))
        without = asyncio.run(_load(create_app(build_gateway(
            kafka_bootstrap, topics, ids, key=None, lag_s=LAG_MS / 1000, **quiet)),
            sessions=False))
        assert parsley.healthy(), parsley.status()
    print(f"\n{with_tokens.line('with tokens')}\n{without.line('without tokens')}")
    assert with_tokens.pairs == without.pairs == PAIRS
    assert with_tokens.stale == 0, f"reads missed their own write: {with_tokens.line('tokens')}"
    assert with_tokens.refused == 0, f"reads timed out: {with_tokens.line('tokens')}"
    assert with_tokens.fresh == PAIRS
    assert without.stale > 0, f"the lag never showed: {without.line('without tokens')}"


def test_a_read_the_view_cannot_cover_is_a_503_naming_what_it_waits_for(
    kafka_bootstrap: str, create_topic: Any,
) -> None:
    """No projection runs, so the view never covers the client's write: the read waits its
    bound and answers 503 with the comments channel and the offset it needs. A token under
    another key is a 400 naming the problem, never treated as no token."""
    topics = Topics(f"gw{uuid.uuid4().hex[:8]}")
    create_topic(topics.comments, partitions=1)
    create_topic(topics.threads, partitions=1)
    ids = topic_ids(AdminClient({"bootstrap.servers": kafka_bootstrap, "log_level": 0}),
                    [topics.comments, topics.threads])
    app = create_app(build_gateway(kafka_bootstrap, topics, ids, key=KEY, wait_s=0.5,
                                   log_level=0))
    foreign = TokenSigner(bytes(32), ttl_s=60).mint(
        CausalPast.of({ChannelId(ids[topics.comments], 0): 0}))

    Answer = tuple[int, Any, Any]

    async def scenario() -> tuple[Answer, Answer, Answer]:
        server, task, base = await _serve(app)
        try:
            async with _session(base, 1) as http:
                posted = await _request(http, "POST", "/threads/a/comments", {},
                                        {"author": "ann", "text": "hi"})
                read = await _request(http, "GET", "/threads/a",
                                      {SESSION_HEADER: posted[2][SESSION_HEADER]})
                bad = await _request(http, "GET", "/threads/a", {SESSION_HEADER: foreign})
                return posted, read, bad
        finally:
            server.should_exit = True
            await task

    posted, read, bad = asyncio.run(scenario())
    assert posted[0] == 201, posted
    offset = posted[1]["position"]["offset"]
    assert read[0] == 503, read
    assert read[2]["Retry-After"] == "1"
    assert read[1]["waiting_for"] == [{"topic": topics.comments, "partition": 0,
                                       "offset": offset, "applied_to": None}], read
    assert read[1]["waited_ms"] >= 500, read
    assert bad[0] == 400, bad
    assert bad[1]["problem"] == "tampered", bad
