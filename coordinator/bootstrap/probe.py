"""A short TCP probe of the bootstrap servers: fail at once when every one refuses.

librdkafka retries a refused connection until the first metadata request's timeout
(``REACH_TIMEOUT_S``, 10 s), so a wrong port used to cost that whole wait. Before that
wait, the start connects once to every address of every bootstrap server; when every
attempt is refused (nothing listens there), unresolvable or unroutable, the start fails
at once naming the address. A connection that succeeds, or that does not answer within
the probe's bound (a slow but reachable broker, a firewall that drops packets), leaves
the decision to the metadata request as before (docs/operations.md, "Broker outage").
The probe opens a bare TCP connection and closes it; no Kafka request is sent.
"""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass
from typing import Final

__all__ = ["PROBE_TIMEOUT_S", "Endpoint", "parse_bootstrap", "probe_refusals"]

PROBE_TIMEOUT_S: Final = 1.5
"""How long one connect may take before the probe counts it as not refused, s."""

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
            return None  # something listens: the metadata request decides
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
        One line per server (``"127.0.0.1:9: connection refused"``; a name lists each
        address it resolved to: ``"kafka:9: 10.0.0.7:9 connection refused"``) when
        every server refused, did not resolve, or was unroutable; ``None`` when any
        server accepted, did not answer in time, or could not be read.
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
