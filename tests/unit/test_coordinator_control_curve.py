"""CURVE on TCP control sockets (no broker; docs/operations.md, "The control socket").

With ``PARSLEY_CONTROL_KEYS`` set, a ``tcp://`` control socket answers only clients whose
public key is authorized; an unknown key, or no key at all, gets no reply.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import zmq.auth

from coordinator.bootstrap.common import StartError
from coordinator.control.auth import CLIENT_ENV, KEYS_ENV, is_loopback, make_keys
from coordinator.control.status_socket import ControlServer, NoReplyError, request


def _ping(req: Mapping[str, Any]) -> dict[str, Any]:
    return {"pong": True}


def test_keys_makes_the_server_pair_and_authorizes_clients(tmp_path: Path) -> None:
    written = make_keys(tmp_path / "k", "ops")
    names = sorted(p.relative_to(tmp_path / "k").as_posix() for p in written)
    assert names == ["authorized/ops.key", "authorized/server.key", "ops.key",
                     "ops.key_secret", "server.key", "server.key_secret"]
    assert (tmp_path / "k" / "server.key_secret").stat().st_mode & 0o077 == 0
    assert make_keys(tmp_path / "k") == [], "existing keys are kept"
    with pytest.raises(ValueError, match="plain name"):
        make_keys(tmp_path / "k", "../x")


@pytest.mark.slow
def test_a_tcp_control_socket_answers_only_authorized_clients(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = tmp_path / "keys"
    make_keys(keys, "ops")
    zmq.auth.create_certificates(str(tmp_path), "stranger")  # a pair nobody authorized
    monkeypatch.setenv(KEYS_ENV, str(keys))
    server = ControlServer("tcp://127.0.0.1:*", {"ping": _ping})
    try:
        ep = server.endpoint
        assert request(ep, {"op": "ping"}, timeout_s=5)["pong"] is True  # a peer's key
        monkeypatch.setenv(CLIENT_ENV, "ops")
        assert request(ep, {"op": "ping"}, timeout_s=5)["pong"] is True
        (keys / "stranger.key_secret").write_bytes(
            (tmp_path / "stranger.key_secret").read_bytes())
        (keys / "stranger.key").write_bytes((tmp_path / "stranger.key").read_bytes())
        monkeypatch.setenv(CLIENT_ENV, "stranger")
        with pytest.raises(NoReplyError):
            request(ep, {"op": "ping"}, timeout_s=1.5)
        monkeypatch.delenv(KEYS_ENV)  # no CURVE at all: the handshake fails, no reply
        with pytest.raises(NoReplyError):
            request(ep, {"op": "ping"}, timeout_s=1.5)
    finally:
        server.close()


def test_a_tcp_control_socket_off_the_loopback_needs_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(KEYS_ENV, raising=False)
    assert is_loopback("tcp://127.0.0.1:7070") and is_loopback("tcp://localhost:1")
    assert not is_loopback("tcp://0.0.0.0:7070") and not is_loopback("tcp://node-7:7070")
    with pytest.raises(StartError, match="needs CURVE authentication"):
        ControlServer("tcp://0.0.0.0:*", {"ping": _ping})
    server = ControlServer("tcp://127.0.0.1:*", {"ping": _ping})  # local: allowed, warned
    try:
        assert request(server.endpoint, {"op": "ping"}, timeout_s=5)["pong"] is True
    finally:
        server.close()


def test_loopback_is_decided_on_addresses_not_on_the_text() -> None:
    def fake(host: str, port: Any) -> list[Any]:
        table = {"localhost": ["127.0.0.1", "::1"], "127.example.com": ["203.0.113.7"],
                 "mixed": ["127.0.0.1", "10.0.0.7"]}
        if host not in table:
            raise OSError("unknown host")
        return [(0, 0, 0, "", (a, 0)) for a in table[host]]

    assert is_loopback("tcp://127.0.0.2:1", fake) and is_loopback("tcp://[::1]:1", fake)
    assert is_loopback("tcp://localhost:1", fake)
    for off in ("127.example.com", "mixed", "nowhere", "0.0.0.0", "*", "[::]", "10.0.0.1"):
        assert not is_loopback(f"tcp://{off}:1", fake), off


def test_secret_keys_are_private_from_creation_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        make_keys(tmp_path / "k", "ops")
    finally:
        os.umask(old)
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o700
    for name in ("server.key_secret", "ops.key_secret"):
        assert (tmp_path / "k" / name).stat().st_mode & 0o777 == 0o600
