"""The coordinator's control socket: status and stop requests over ZeroMQ, one reply each.

A ``REP`` socket served by one thread. Every request gets exactly one reply, and every reply
carries an :class:`Outcome` (docs/operations.md, "The control socket": classified by a
kind, never by message text), a malformed request included. The serving loop survives
anything one request does. Endpoints (:func:`resolve_endpoint`): an ``ipc://`` path under
the state dir by default; ``tcp`` only when asked, on 127.0.0.1 unless a host is given; the
bound endpoint is written to :func:`endpoint_file` so that ``parsley-coordinator status``
finds it. The requests, the replies and how serving recovers are in docs/architecture.md,
"The coordinator", "The control socket".
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import orjson
import zmq

from coordinator.config import ParsleyConfig
from coordinator.control.auth import secure_client, secure_server

__all__ = [
    "OPERATIONS",
    "BadRequest",
    "ControlServer",
    "NoReplyError",
    "Outcome",
    "default_endpoint",
    "endpoint_file",
    "listening",
    "request",
    "resolve_endpoint",
]

log = logging.getLogger("parsley.coordinator.control")

OPERATIONS: Final = ("ping", "status", "stop")
_MAX_REQUEST_BYTES: Final = 65_536


class Outcome(enum.Enum):
    """The kind of every reply."""

    OK = "OK"
    """The operation ran; its result is in the reply."""
    MALFORMED_REQUEST = "MALFORMED_REQUEST"
    """Not a JSON object with a string ``op`` (or too large, or a bad argument)."""
    UNKNOWN_OPERATION = "UNKNOWN_OPERATION"
    """``op`` names no operation; the reply lists the known ones."""
    FAILED = "FAILED"
    """The operation raised, or its result could not be encoded; ``error`` says what."""


class BadRequest(ValueError):
    """Raised by a handler that rejects the request's arguments -> ``MALFORMED_REQUEST``.

    Any other exception a handler raises (a ``ValueError`` of its own
    included) is a ``FAILED`` reply: the request was well formed, the
    operation failed.
    """


class NoReplyError(TimeoutError):
    """No reply within the caller's deadline (the coordinator is gone or busy)."""


def endpoint_file(config: ParsleyConfig) -> Path:
    """``<state_dir>/<prefix>.coordinator.endpoint``: where a running coordinator
    records its control endpoint."""
    return Path(config.state_dir) / f"{config.application_id_prefix}.coordinator.endpoint"


def default_endpoint(config: ParsleyConfig) -> str:
    """``ipc://<state_dir>/<prefix>.coordinator.ipc``."""
    return f"ipc://{Path(config.state_dir) / (config.application_id_prefix + '.coordinator.ipc')}"


MAX_IPC_PATH_BYTES: Final = 107
"""The longest ``ipc://`` path ZeroMQ binds, bytes: ``sockaddr_un.sun_path`` (108 on
Linux) less its terminating NUL; ZeroMQ refuses a longer one with ``ENAMETOOLONG``."""


def check_ipc_length(endpoint: str) -> None:
    """Refuse an ``ipc://`` endpoint whose path ZeroMQ cannot bind (pure).

    Raises:
        ValueError: the path is longer than :data:`MAX_IPC_PATH_BYTES`; the message
            names it and the remedies (a shorter state dir or prefix, ``--listen tcp``).
    """
    if not endpoint.startswith("ipc://"):
        return
    size = len(endpoint[len("ipc://"):].encode())
    if size > MAX_IPC_PATH_BYTES:
        raise ValueError(
            f"the control socket {endpoint} is {size} bytes long, over the "
            f"{MAX_IPC_PATH_BYTES} an ipc:// path may have: give a shorter --state-dir "
            "(or PARSLEY_STATE_DIR) or prefix, or --listen tcp")


def pre_upgrade_endpoints(prefix: str) -> list[str]:
    """Where a coordinator started by a build before the per-user default state dir
    serves ``prefix``: the endpoint it recorded under ``<tmp>/parsley``, then its
    default ipc path there (:func:`coordinator.state_dir.legacy_state_dir`;
    docs/operations.md, "The state dir")."""
    from coordinator.state_dir import legacy_state_dir

    old = Path(legacy_state_dir())
    found: list[str] = []
    with contextlib.suppress(OSError):
        recorded = (old / f"{prefix}.coordinator.endpoint").read_text().strip()
        if recorded:
            found.append(recorded)
    default = f"ipc://{old / (prefix + '.coordinator.ipc')}"
    if default not in found:
        found.append(default)
    return found


def resolve_endpoint(listen: str | None, config: ParsleyConfig) -> str:
    """The endpoint to bind for ``--listen``.

    Args:
        listen: ``None`` or ``"ipc"`` (the default ipc path), ``"tcp"`` (a free
            port on 127.0.0.1), ``"tcp:<port>"`` (127.0.0.1), or a full
            ``ipc://...``/``tcp://host:port`` endpoint (bound as given).
        config: for the state dir and prefix.

    Raises:
        ValueError: anything else.
    """
    if listen is None or listen == "ipc":
        return default_endpoint(config)
    if listen == "tcp":
        return "tcp://127.0.0.1:*"
    if listen.startswith("tcp:") and not listen.startswith("tcp://"):
        port = listen[4:]
        if not port.isdigit():
            raise ValueError(f"--listen tcp:<port> needs a port number, got {listen!r}")
        return f"tcp://127.0.0.1:{port}"
    if listen.startswith(("ipc://", "tcp://")):
        return listen
    raise ValueError(f"--listen must be ipc, tcp, tcp:<port>, ipc://<path> or "
                     f"tcp://<host>:<port>, got {listen!r}")


Handler = Callable[[Mapping[str, Any]], Mapping[str, Any]]
"""``request -> result fields``; raising :class:`BadRequest` gives ``MALFORMED_REQUEST``,
raising anything else a ``FAILED`` reply."""


class ControlServer:
    """Serves ``ping``/``status``/``stop`` on a REP socket, on its own thread.

    Args:
        endpoint: the endpoint to bind (:func:`resolve_endpoint`).
        handlers: ``{op: handler}``; each returns the reply's result fields.
        record_to: a file to write the bound endpoint to (removed on close), or ``None``.

    Raises:
        zmq.ZMQError: the endpoint cannot be bound.
    """

    def __init__(self, endpoint: str, handlers: Mapping[str, Handler],
                 record_to: Path | None = None) -> None:
        self._handlers = dict(handlers)
        if endpoint.startswith("ipc://"):
            Path(endpoint[len("ipc://"):]).parent.mkdir(parents=True, exist_ok=True)
        self._sock = self._bind(endpoint)
        self.endpoint: str = self._sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.rebinds = 0
        """How many times the socket was closed and bound again after a failed send."""
        self._record_to = record_to
        if record_to is not None:
            record_to.parent.mkdir(parents=True, exist_ok=True)
            record_to.write_text(self.endpoint + "\n")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="parsley-control", daemon=True)
        self._thread.start()

    @staticmethod
    def _bind(endpoint: str) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REP)
        sock.setsockopt(zmq.LINGER, 0)
        try:
            secure_server(sock, endpoint)  # CURVE on tcp:// with PARSLEY_CONTROL_KEYS
            sock.bind(endpoint)
        except BaseException:
            sock.close(0)
            raise
        return sock

    def reply_for(self, raw: bytes) -> dict[str, Any]:
        """The one reply to one raw request (pure apart from the handler it calls)."""
        if len(raw) > _MAX_REQUEST_BYTES:
            return {"outcome": Outcome.MALFORMED_REQUEST.value,
                    "error": f"request of {len(raw)} bytes is over {_MAX_REQUEST_BYTES}"}
        try:
            req = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return {"outcome": Outcome.MALFORMED_REQUEST.value,
                    "error": f"request is not JSON: {exc}"}
        if not isinstance(req, dict) or not isinstance(req.get("op"), str):
            return {"outcome": Outcome.MALFORMED_REQUEST.value,
                    "error": 'a request is a JSON object with a string "op", e.g. {"op": "status"}'}
        op = req["op"]
        handler = self._handlers.get(op)
        if handler is None:
            return {"outcome": Outcome.UNKNOWN_OPERATION.value, "op": op,
                    "error": f"unknown operation {op!r}; known: {sorted(self._handlers)}"}
        try:
            result = dict(handler(req))
        except BadRequest as exc:
            return {"outcome": Outcome.MALFORMED_REQUEST.value, "op": op, "error": str(exc)}
        except Exception as exc:
            log.exception("control operation %s failed", op)
            return {"outcome": Outcome.FAILED.value, "op": op,
                    "error": f"{type(exc).__name__}: {exc}"}
        return {"outcome": Outcome.OK.value, "op": op, **result}

    def reply_bytes(self, raw: bytes) -> bytes:
        """The encoded one reply to one raw request; never raises.

        A reply that orjson cannot encode (or a ``reply_for`` that raised)
        becomes ``{"outcome": "FAILED", "error": ...}``.
        """
        op: object = None
        try:
            reply = self.reply_for(raw)
            op = reply.get("op")
            return orjson.dumps(reply)
        except Exception as exc:
            log.exception("control reply could not be built")
            fallback: dict[str, Any] = {"outcome": Outcome.FAILED.value,
                                        "error": f"the reply could not be built: "
                                                 f"{type(exc).__name__}: {exc}"}
            if isinstance(op, str):
                fallback["op"] = op
            return orjson.dumps(fallback)

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        while not self._stop.is_set():
            try:
                try:
                    if not poller.poll(100):
                        continue
                    raw = self._sock.recv()
                except zmq.ZMQError:
                    if self._stop.is_set():
                        return
                    continue
                data = self.reply_bytes(raw)
                try:
                    self._sock.send(data)
                except zmq.ZMQError:
                    if self._stop.is_set():
                        return
                    log.exception("could not send a control reply; binding the socket again")
                    poller.unregister(self._sock)
                    self._rebind()
                    poller.register(self._sock, zmq.POLLIN)
            except Exception:  # one request must never end serving (operations.md, control socket)
                log.exception("control loop error; serving goes on")
                time.sleep(0.05)

    def _rebind(self) -> None:
        """Close the socket and bind a new one on the same endpoint (retrying)."""
        self._sock.close(0)
        while not self._stop.is_set():
            try:
                self._sock = self._bind(self.endpoint)
                self.rebinds += 1
                return
            except zmq.ZMQError:
                log.exception("could not bind %s again; retrying", self.endpoint)
                time.sleep(0.2)

    def close(self) -> None:
        """Stop serving, close the socket, remove the endpoint record and ipc file."""
        self._stop.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)
        self._sock.close(0)
        if self._record_to is not None:
            with contextlib.suppress(OSError):
                if self._record_to.read_text().strip() == self.endpoint:
                    self._record_to.unlink()
        if self.endpoint.startswith("ipc://"):
            with contextlib.suppress(OSError):
                Path(self.endpoint[len("ipc://"):]).unlink()


def listening(endpoint: str, *, timeout_s: float = 0.5) -> bool | None:
    """Whether anything accepts connections at ``endpoint``, without a ZeroMQ request.

    A ZeroMQ ``REQ`` connects lazily and waits its whole deadline for a peer that
    is not there; this asks the operating system instead, so "nothing runs" is
    known at once. ``False``: an ``ipc://`` path that is absent, not a socket, or
    refuses (a socket file left by a coordinator killed with SIGKILL); an abstract
    ``ipc://@name`` nothing has bound; a ``tcp://`` port that refuses. ``None``: a
    path this user may not search.

    Args:
        endpoint: an ``ipc://path`` or ``tcp://host:port`` endpoint.
        timeout_s: bound on a TCP connect, s (an unanswered connect: ``None``).

    Returns:
        ``True`` when a connection was accepted, ``False`` when refused or absent,
        ``None`` when it cannot be told (an unanswered TCP connect, another transport).
    """
    if endpoint.startswith("ipc://"):
        path = endpoint[len("ipc://"):]
        abstract = path.startswith("@")  # Linux's abstract namespace, as ZeroMQ spells it
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(timeout_s)
            try:
                probe.connect("\0" + path[1:] if abstract else path)
            except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
                return False
            except PermissionError:
                return None
            except OSError:  # not a socket, a path too long
                return None if abstract or os.path.lexists(path) else False
            return True
    if endpoint.startswith("tcp://"):
        host, _, port = endpoint[len("tcp://"):].rpartition(":")
        if not port.isdigit():
            return None
        try:
            with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                          timeout=timeout_s):
                return True
        except ConnectionRefusedError:
            return False
        except OSError:
            return None
    return None


def request(endpoint: str, payload: Mapping[str, Any] | bytes, *, timeout_s: float = 5.0
            ) -> dict[str, Any]:
    """Send one request and wait for its one reply.

    Args:
        endpoint: the coordinator's control endpoint.
        payload: a JSON-able mapping, or raw bytes (sent as they are).
        timeout_s: s to wait for the reply (a deadline per call, docs/operations.md, "Bounded
            client calls").

    Returns:
        The decoded reply (always has ``"outcome"``).

    Raises:
        NoReplyError: nothing came back within ``timeout_s``.
    """
    sock: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        secure_client(sock, endpoint)  # CURVE on tcp:// with PARSLEY_CONTROL_KEYS
        sock.connect(endpoint)
        sock.send(payload if isinstance(payload, bytes) else orjson.dumps(dict(payload)))
        if not sock.poll(int(timeout_s * 1000), zmq.POLLIN):
            raise NoReplyError(f"no reply from {endpoint} within {timeout_s:g} s; is a "
                               "coordinator running there?")
        reply = orjson.loads(sock.recv())
        if not isinstance(reply, dict):
            raise NoReplyError(f"unreadable reply from {endpoint}")
        return reply
    finally:
        sock.close(0)
