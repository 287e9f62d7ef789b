"""A short probe of the bootstrap servers: fail at once when none is a Kafka broker.

librdkafka retries a refused connection, or one to a server that does not speak Kafka,
until the first metadata request's timeout (``REACH_TIMEOUT_S``, 10 s), and then says
only ``_TRANSPORT``, so a wrong port used to cost that whole wait. Before that wait, the
start connects once to every address of every bootstrap server and sends the first
request every Kafka client sends, ``ApiVersions`` (v0, as librdkafka starts; the Kafka
protocol guide, "ApiVersions"). When every server refuses the connection (nothing
listens there), does not resolve, is unroutable, or answers with something that is not
a Kafka response (an HTTP server, an SSH banner), the start fails at once naming each. A
server that answers as Kafka, says nothing within the probe's bound (a slow broker, a
firewall dropping packets), closes without a word, or answers with a TLS record (a TLS
listener: the probe speaks plaintext) leaves the decision to the metadata request as
before (docs/operations.md, "Broker outage").
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass
from typing import Final

__all__ = ["API_VERSIONS_V0", "PROBE_TIMEOUT_S", "Endpoint", "not_kafka", "parse_bootstrap",
           "probe_refusals"]

PROBE_TIMEOUT_S: Final = 1.5
"""How long one connect, and then the answer to the handshake, may take before the probe
leaves the server to the metadata request, s."""

DEFAULT_PORT: Final = 9092
"""The port librdkafka assumes for a bootstrap server given without one."""

_DEFINITE: Final = frozenset({errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH,
                              errno.EADDRNOTAVAIL})
"""Connect errors that answer at once and mean nothing accepts there."""
_NO_NAME: Final = frozenset(code for code in (getattr(socket, "EAI_NONAME", None),
                                              getattr(socket, "EAI_NODATA", None))
                            if code is not None)
"""Resolver answers meaning the name does not exist (not a resolver failing for now)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One bootstrap server: ``host`` (a name or an address, IPv6 without brackets) and ``port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def parse_bootstrap(bootstrap_servers: str) -> list[Endpoint]:
    """The endpoints of a ``bootstrap.servers`` value (pure).

    Accepts librdkafka's forms: ``host:port``, ``host`` (port 9092), ``[v6addr]:port``,
    and a ``PROTOCOL://`` prefix (``SASL_SSL://host:port``), comma separated; blank
    entries are skipped.

    Returns:
        The endpoints in the given order.

    Raises:
        ValueError: an entry that cannot be read (the probe then decides nothing).
    """
    out: list[Endpoint] = []
    for raw in bootstrap_servers.split(","):
        entry = raw.strip()
        if "://" in entry:
            entry = entry.split("://", 1)[1]
        entry = entry.rstrip("/")
        if not entry:
            continue
        host, port = entry, str(DEFAULT_PORT)
        if entry.startswith("["):
            close = entry.find("]")
            if close < 0:
                raise ValueError(f"unreadable bootstrap server {raw.strip()!r}")
            host, rest = entry[1:close], entry[close + 1:]
            if rest.startswith(":"):
                port = rest[1:]
        elif entry.count(":") == 1:
            host, port = entry.split(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"unreadable bootstrap server {raw.strip()!r}")
        out.append(Endpoint(host, int(port)))
    return out


_CORRELATION_ID: Final = 0x5061_7273
"""The correlation id of the probe's request, echoed by a Kafka broker's response."""
_CLIENT_ID: Final = b"parsley-probe\r\n\r\n"
"""The request's client id. Its line ends make a line-based server (HTTP, SMTP, Redis)
answer at once instead of waiting for the rest of a line; a Kafka broker takes any
string as a client id."""
API_VERSIONS_V0: Final = struct.pack(">ihhih", 2 + 2 + 4 + 2 + len(_CLIENT_ID), 18, 0,
                                     _CORRELATION_ID, len(_CLIENT_ID)) + _CLIENT_ID
"""An ``ApiVersions`` v0 request (api key 18), size-prefixed: header v1 with the client id."""
_TLS_RECORD_TYPES: Final = frozenset({0x15, 0x16})
"""First bytes of a TLS alert or handshake record: a TLS listener answered."""
_MAX_RESPONSE_BYTES: Final = 1 << 20
"""A larger size prefix is not an ``ApiVersions`` response."""


def not_kafka(answer: bytes) -> str | None:
    """Why ``answer`` (the first bytes a server sent back to :data:`API_VERSIONS_V0`) is not
    a Kafka broker's response, or ``None`` when it may be one (pure).

    A Kafka response starts with its size (int32, big-endian) and the request's
    correlation id (int32). Fewer than 8 bytes (a close without a word) and a TLS record
    decide nothing.
    """
    if not answer or answer[0] in _TLS_RECORD_TYPES:
        return None
    if len(answer) >= 8:
        size, correlation = struct.unpack_from(">ii", answer)
        if 4 <= size <= _MAX_RESPONSE_BYTES and correlation == _CORRELATION_ID:
            return None
    elif answer.isascii() is False or len(answer) < 4:
        return None
    shown = answer[:40].decode("ascii", "replace")
    shown = "".join(c if c.isprintable() else "." for c in shown)
    return f"not a Kafka broker: it answered the Kafka handshake with {shown!r}"


def _answer(sock: socket.socket, timeout_s: float) -> bytes:
    """The first bytes (up to 64) ``sock`` sends back to the probe's request, ``b""`` when
    it closes or says nothing within ``timeout_s``."""
    sock.settimeout(timeout_s)
    got = b""
    try:
        sock.sendall(API_VERSIONS_V0)
        while len(got) < 8:
            more = sock.recv(64)
            if not more:
                break
            got += more
    except OSError:
        pass
    return got


def _refused(endpoint: Endpoint, timeout_s: float) -> str | None:
    """Why ``endpoint`` refuses a TCP connection, or ``None`` when it may answer."""
    try:
        infos = socket.getaddrinfo(endpoint.host, endpoint.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_NAME:
            return f"{endpoint}: the name does not resolve ({exc.strerror})"
        return None  # a resolver that failed for now (EAI_AGAIN): not a definite answer
    except (OSError, UnicodeError):
        return None
    reasons: list[str] = []
    for family, kind, proto, _name, address in infos:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout_s)
                sock.connect(address)
                why = not_kafka(_answer(sock, timeout_s))
            if why is None:
                return None  # something that may be Kafka listens: the metadata request decides
            where = str(Endpoint(str(address[0]), int(address[1])))
            reasons.append(why if where == str(endpoint) else f"{where} {why}")
            continue
        except OSError as exc:
            if exc.errno not in _DEFINITE:
                return None  # a timeout or an unexpected error: not a definite refusal
            where = str(Endpoint(str(address[0]), int(address[1])))
            what = (exc.strerror or str(exc)).lower()
            reasons.append(what if where == str(endpoint) else f"{where} {what}")
    if not reasons:
        return None
    return f"{endpoint}: " + "; ".join(reasons)


def probe_refusals(bootstrap_servers: str, timeout_s: float = PROBE_TIMEOUT_S) -> list[str] | None:
    """Connect once to each bootstrap server; the refusals if every one refused.

    Args:
        bootstrap_servers: the ``bootstrap.servers`` value.
        timeout_s: the bound of each connect, s; a connect that takes longer counts
            as reachable (the slow-broker path is unchanged).

    Returns:
        One line per server (``"127.0.0.1:9: connection refused"``, ``"127.0.0.1:8080:
        not a Kafka broker: it answered the Kafka handshake with 'HTTP/1.0 400 ...'"``; a
        name lists each address it resolved to: ``"kafka:9: 10.0.0.7:9 connection
        refused"``) when every server refused, did not resolve, was unroutable or
        answered as something other than Kafka; ``None`` when any server may be a
        Kafka broker, did not answer in time, or could not be read.
    """
    try:
        endpoints = parse_bootstrap(bootstrap_servers)
    except ValueError:
        return None
    if not endpoints:
        return None
    reasons: list[str] = []
    for endpoint in endpoints:
        why = _refused(endpoint, timeout_s)
        if why is None:
            return None
        reasons.append(why)
    return reasons
