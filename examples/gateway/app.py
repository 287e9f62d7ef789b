"""The gateway's HTTP API (Starlette): post a comment, read a thread, your own writes included.

* ``POST /threads/{thread}/comments``, JSON ``{"author", "text"}``: produces the comment
  to the comments topic, stamped with the client's session token as its
  ``parsley.causes``, waits for the acknowledgement, and answers ``201`` with the comment,
  its coordinate and the token with that coordinate merged in (``503`` when the broker
  did not acknowledge it).
* ``GET /threads/{thread}``: serves the thread only once the view's recorded past covers
  the client's token, waiting up to ``wait_s``; then ``503`` with ``Retry-After`` and
  what it waits for. Serving merges the view's past into the token.

The token travels in the ``Parsley-Session`` header both ways; a request without one
starts a session. A bad token is ``400``, never treated as no token. With ``signer`` set
to ``None`` the gateway runs without sessions: reads are served at once, whatever the
view has applied (the contrast the load test counts stale reads on). docs/session.md.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

import orjson
from confluent_kafka import KafkaException
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from examples.gateway.producer import AsyncProducer
from examples.gateway.projection import Topics
from examples.gateway.view import ThreadView
from parsley.session import CausalPast, Coverage, InvalidToken, TokenSigner, WriteTier

__all__ = ["SESSION_HEADER", "Gateway", "build_gateway", "create_app"]

SESSION_HEADER: Final = "Parsley-Session"
"""The request and response header carrying the session token."""

MAX_THREAD_CHARS: Final = 200
MAX_AUTHOR_CHARS: Final = 100
MAX_TEXT_CHARS: Final = 10_000


@dataclass
class Gateway:
    """What the routes share.

    Attributes:
        topics: the comments and threads topics.
        write: topic ids of the comments topic, for stamping and acknowledgements.
        signer: mints and opens tokens; ``None`` runs the gateway without sessions.
        view: the replica of the read model (started by the app's lifespan).
        wait_s: how long a read waits for the view to cover its token, s.
        producer_factory: builds the producer inside the app's event loop.
    """

    topics: Topics
    write: WriteTier
    signer: TokenSigner | None
    view: ThreadView
    wait_s: float
    producer_factory: Callable[[], AsyncProducer]
    producer: AsyncProducer | None = None


def build_gateway(bootstrap_servers: str, topics: Topics, topic_ids: Mapping[str, UUID], *,
                  key: bytes | None, ttl_s: float = 3600.0, lag_s: float = 0.0,
                  wait_s: float = 5.0, **kafka: Any) -> Gateway:
    """A gateway over ``topics`` (one partition each: docs/session.md, "Partitions").

    Args:
        bootstrap_servers: ``host:port[,...]``.
        topics: the comments and threads topics, both existing.
        topic_ids: their Kafka topic ids, resolved at startup.
        key: the token signing key (>= 32 bytes), or ``None`` to run without sessions.
        ttl_s: a token's lifetime after it was last minted, s; well short of retention.
        lag_s: the view's deliberate lag, s (0 for none).
        wait_s: how long a read waits for the view to cover its token, s.
        kafka: more librdkafka properties for the producer and the view's consumer.

    Raises:
        ValueError: a key shorter than 32 bytes, or a topic id missing.
    """
    write = WriteTier({topics.comments: topic_ids[topics.comments]})
    # A token may name only the comments topic's partition: anything else is refused
    # before it is stamped on a record (docs/session.md, "Tokens").
    signer = None if key is None else TokenSigner(
        key, ttl_s=ttl_s, channels={write.channel(topics.comments, 0)})
    view = ThreadView(bootstrap_servers, topics.threads, 1, lag_s=lag_s, **kafka)
    return Gateway(topics, write, signer, view, wait_s,
                   lambda: AsyncProducer(bootstrap_servers, **kafka))


def _problem(status: int, error: str, **more: Any) -> JSONResponse:
    return JSONResponse({"error": error, **more}, status_code=status)


def create_app(gateway: Gateway) -> Starlette:
    """The ASGI app over ``gateway``; its lifespan starts and stops the view and producer."""
    names = {topic_id: name for name, topic_id in gateway.write.topic_ids.items()}

    def session_of(request: Request) -> CausalPast | JSONResponse:
        """The request's token opened, ``none()`` without one, or a 400 response."""
        assert gateway.signer is not None
        token = request.headers.get(SESSION_HEADER)
        if token is None:
            return CausalPast.none()
        try:
            return gateway.signer.open(token)
        except InvalidToken as exc:
            return _problem(400, "invalid session token", problem=exc.problem.value,
                            detail=str(exc), remedy=f"drop the {SESSION_HEADER} header to "
                            "start a new session")

    def with_token(response: Response, past: CausalPast) -> Response:
        if gateway.signer is not None:
            response.headers[SESSION_HEADER] = gateway.signer.mint(past)
        return response

    def waiting_for(coverage: Coverage) -> list[dict[str, Any]]:
        return [{"topic": names.get(gap.channel.topic_id, str(gap.channel.topic_id)),
                 "partition": gap.channel.partition, "offset": gap.required,
                 "applied_to": gap.settled} for gap in coverage.gaps]

    async def post_comment(request: Request) -> Response:
        thread = request.path_params["thread"]
        if len(thread) > MAX_THREAD_CHARS:
            return _problem(400, f"a thread name is at most {MAX_THREAD_CHARS} characters")
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _problem(400, "the body must be JSON: {\"author\": ..., \"text\": ...}")
        author = body.get("author") if isinstance(body, dict) else None
        text = body.get("text") if isinstance(body, dict) else None
        if not (isinstance(author, str) and 0 < len(author) <= MAX_AUTHOR_CHARS
                and isinstance(text, str) and 0 < len(text) <= MAX_TEXT_CHARS):
            return _problem(400, f"author (1..{MAX_AUTHOR_CHARS} characters) and text "
                            f"(1..{MAX_TEXT_CHARS}) are required strings")
        token = CausalPast.none()
        if gateway.signer is not None:
            opened = session_of(request)
            if isinstance(opened, JSONResponse):
                return opened
            token = opened
        comment = {"id": uuid.uuid4().hex, "author": author, "text": text}
        assert gateway.producer is not None
        try:
            topic, partition, offset = await gateway.producer.produce(
                gateway.topics.comments, thread.encode(), orjson.dumps(comment),
                gateway.write.stamp(token))
        except (KafkaException, RuntimeError) as exc:  # not written: the token stays as it was
            return _problem(503, "the comment could not be written", detail=str(exc))
        token = gateway.write.acknowledged(token, topic, partition, offset)
        return with_token(JSONResponse({
            "thread": thread, "comment": comment,
            "position": {"topic": topic, "partition": partition, "offset": offset}},
            status_code=201), token)

    async def get_thread(request: Request) -> Response:
        thread = request.path_params["thread"]
        view = gateway.view
        if gateway.signer is None:
            comments = view.comments(thread)
            if comments is None:
                return _problem(404, "no such thread")
            return JSONResponse({"thread": thread, "comments": list(comments)})
        opened = session_of(request)
        if isinstance(opened, JSONResponse):
            return opened
        token = opened
        started = time.monotonic()
        coverage = None if view.failure else await view.covering(token, gateway.wait_s)
        if coverage is None or view.failure is not None:
            return _problem(503, "the read model's replica stopped",
                            detail=repr(view.failure))
        if not coverage.covers:
            waited_ms = round((time.monotonic() - started) * 1000)
            response = _problem(
                503, "the read model has not caught up with this session yet",
                waiting_for=waiting_for(coverage), waited_ms=waited_ms)
            response.headers["Retry-After"] = "1"
            return response
        comments = view.comments(thread)  # same loop turn as the coverage: one snapshot
        served = token.merge(view.past)
        if comments is None:
            return with_token(_problem(404, "no such thread"), served)
        return with_token(JSONResponse({"thread": thread, "comments": list(comments)}),
                          served)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        gateway.producer = gateway.producer_factory()
        reader = asyncio.create_task(gateway.view.run(), name="gateway-view")
        try:
            yield
        finally:
            gateway.view.stop()
            await asyncio.gather(reader, return_exceptions=True)
            gateway.producer.close()

    return Starlette(routes=[
        Route("/threads/{thread}/comments", post_comment, methods=["POST"]),
        Route("/threads/{thread}", get_thread, methods=["GET"]),
    ], lifespan=lifespan)
