"""ZeroMQ CURVE authentication for control sockets on TCP (docs/operations.md, "The control
socket", "Several coordinators").

A key directory, named by ``PARSLEY_CONTROL_KEYS``, holds the coordinators' key pair, the
clients' key pairs and ``authorized/*.key``, the public keys a coordinator accepts;
``parsley-coordinator keys DIR [--client NAME]`` makes them (:func:`make_keys`). With the
variable set, a ``tcp://`` control socket is a CURVE server accepting only authorized keys,
and a request to a ``tcp://`` endpoint is a CURVE client; without it, a ``tcp://`` socket
off the loopback is refused (:class:`StartError`). ``ipc://`` sockets stay guarded by the
file system's permissions. The directory's files and the rules are in
docs/architecture.md, "The coordinator", "CURVE keys of control sockets".
"""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Final

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from coordinator.bootstrap.common import StartError

__all__ = ["CLIENT_ENV", "KEYS_ENV", "LOOPBACK_HOSTS", "is_loopback", "keys_dir", "make_keys",
           "secure_client", "secure_server"]

log = logging.getLogger("parsley.coordinator.control")

KEYS_ENV: Final = "PARSLEY_CONTROL_KEYS"
"""The environment variable naming the key directory."""
CLIENT_ENV: Final = "PARSLEY_CONTROL_CLIENT"
"""The environment variable naming the client key pair to use (default ``server``)."""

_auth_lock = threading.Lock()
_authenticators: dict[int, ThreadAuthenticator] = {}


def keys_dir() -> Path | None:
    """The key directory from ``PARSLEY_CONTROL_KEYS``, or ``None`` when unset."""
    raw = os.environ.get(KEYS_ENV, "").strip()
    return Path(raw) if raw else None


def make_keys(directory: Path, client: str | None = None) -> list[Path]:
    """Create the server key pair (unless present), authorize it, and with ``client`` a
    client key pair, authorized too.

    The directory is made (or set) 0700 and each secret key file is created 0600 before
    anything is written to it (``os.open`` with the mode; a umask only removes bits).

    Returns:
        The files written, in order (existing ones are not rewritten).

    Raises:
        ValueError: ``client`` is ``server`` or not a plain file name.
        OSError: the directory cannot be written.
    """
    if client is not None and (client == "server" or not client
                               or Path(client).name != client):
        raise ValueError(f"--client must be a plain name other than 'server', got {client!r}")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    authorized = directory / "authorized"
    authorized.mkdir(exist_ok=True)
    written: list[Path] = []
    for name in ("server", *([client] if client else [])):
        public = directory / f"{name}.key"
        if not public.exists():
            _private_file(directory / f"{name}.key_secret")
            pub, secret = zmq.auth.create_certificates(str(directory), name)
            written += [Path(pub), Path(secret)]
        target = authorized / f"{name}.key"
        if not target.exists():
            shutil.copyfile(public, target)
            written.append(target)
    return written


def _private_file(path: Path) -> None:
    """Create ``path`` empty with mode 0600 (or truncate it and set 0600), so that what is
    written to it later is never readable by others, whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _is_tcp(endpoint: str) -> bool:
    return endpoint.startswith("tcp://")


LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})
"""Hosts of a ``tcp://`` endpoint reachable from this machine alone."""


def is_loopback(endpoint: str,
                resolve: Any = socket.getaddrinfo) -> bool:
    """Whether a ``tcp://HOST:PORT`` endpoint binds the loopback interface only.

    ``HOST`` is an IP address (``[v6]`` in brackets) tested with :mod:`ipaddress`, or a
    name that counts only when every address ``resolve`` (``socket.getaddrinfo``) gives
    for it is a loopback address; a name that does not resolve is not loopback (so
    "127.example.com" needs CURVE unless it resolves to 127.0.0.0/8 or ::1 alone).
    """
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host or host == "*":
        return False
    try:
        infos = resolve(host, None)
    except (OSError, UnicodeError):
        return False
    addresses = {str(info[4][0]).split("%", 1)[0] for info in infos}
    try:
        return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)
    except ValueError:
        return False


def secure_server(sock: zmq.Socket[Any], endpoint: str) -> bool:
    """Make ``sock`` (not yet bound) a CURVE server accepting only the authorized keys,
    when ``endpoint`` is TCP and a key directory is set.

    Returns:
        Whether CURVE was set up.

    Raises:
        StartError: no key directory is set for a ``tcp://`` endpoint on another
            interface than the loopback.
        OSError: the key directory lacks ``server.key_secret``.
    """
    directory = keys_dir()
    if not _is_tcp(endpoint):
        return False
    if directory is None and not is_loopback(endpoint):
        raise StartError(
            f"the control socket {endpoint} is reachable from other machines and needs "
            f"CURVE authentication: make keys (parsley-coordinator keys DIR), then set "
            f"{KEYS_ENV}=DIR for the coordinators, status and stop (docs/operations.md, "
            "\"The control socket\")")
    if directory is None:
        log.warning("the control socket on %s has no authentication: set %s to a key "
                    "directory (parsley-coordinator keys DIR) to require CURVE", endpoint,
                    KEYS_ENV)
        return False
    secret = directory / "server.key_secret"
    if not secret.exists():
        raise OSError(f"{secret} is missing: run parsley-coordinator keys {directory}")
    public_key, secret_key = zmq.auth.load_certificate(str(secret))
    ctx = sock.context
    with _auth_lock:
        auth = _authenticators.get(id(ctx))
        if auth is None:
            auth = ThreadAuthenticator(ctx)
            auth.start()
            _authenticators[id(ctx)] = auth
        auth.configure_curve(domain="*", location=str(directory / "authorized"))
    sock.curve_secretkey = secret_key
    sock.curve_publickey = public_key
    sock.curve_server = True
    return True


def secure_client(sock: zmq.Socket[Any], endpoint: str) -> bool:
    """Make ``sock`` (not yet connected) a CURVE client with the key pair
    ``PARSLEY_CONTROL_CLIENT`` (``server`` by default), when ``endpoint`` is TCP and a key
    directory is set.

    Returns:
        Whether CURVE was set up.

    Raises:
        OSError: the key directory lacks the client's secret key or ``server.key``.
    """
    directory = keys_dir()
    if directory is None or not _is_tcp(endpoint):
        return False
    name = os.environ.get(CLIENT_ENV, "").strip() or "server"
    secret = directory / f"{name}.key_secret"
    server = directory / "server.key"
    for needed in (secret, server):
        if not needed.exists():
            raise OSError(f"{needed} is missing: run parsley-coordinator keys {directory}"
                          + (f" --client {name}" if needed == secret and name != "server"
                             else ""))
    public_key, secret_key = zmq.auth.load_certificate(str(secret))
    server_key, _ = zmq.auth.load_certificate(str(server))
    sock.curve_secretkey = secret_key
    sock.curve_publickey = public_key
    sock.curve_serverkey = server_key
    return True
