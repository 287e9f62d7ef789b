"""The bootstrap probe: every server refusing, or answering as something other than Kafka,
fails at once; a server that may be a Kafka broker is left to the metadata wait."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Callable

import pytest

from coordinator.bootstrap.probe import (
    API_VERSIONS_V0,
    Endpoint,
    not_kafka,
    parse_bootstrap,
    probe_refusals,
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_parse_reads_librdkafka_forms() -> None:
    assert parse_bootstrap("a:1, SASL_SSL://b:2,c,[::1]:3,") == [
        Endpoint("a", 1), Endpoint("b", 2), Endpoint("c", 9092), Endpoint("::1", 3)]
    assert str(Endpoint("::1", 3)) == "[::1]:3"
    with pytest.raises(ValueError):
        parse_bootstrap("a:b")


def test_every_server_refusing_is_named() -> None:
    one, two = _closed_port(), _closed_port()
    got = probe_refusals(f"127.0.0.1:{one},127.0.0.1:{two}")
    assert got is not None and len(got) == 2
    assert got[0].startswith(f"127.0.0.1:{one}: ") and "connection refused" in got[0]


@pytest.mark.slow
def test_a_listening_server_that_never_answers_is_left_to_the_metadata_wait() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        began = time.monotonic()
        assert probe_refusals(f"127.0.0.1:{_closed_port()},127.0.0.1:{port}") is None
        assert time.monotonic() - began < 5


def test_an_unreadable_entry_decides_nothing() -> None:
    assert probe_refusals(f"127.0.0.1:{_closed_port()},bad:port") is None


def _serve_once(reply: Callable[[socket.socket], None]) -> tuple[int, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def run() -> None:
        with listener:
            conn, _ = listener.accept()
            with conn:
                reply(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return int(listener.getsockname()[1]), thread


def test_the_handshake_is_an_api_versions_v0_request_a_line_server_answers() -> None:
    size, api_key, version, correlation, n = struct.unpack_from(">ihhih", API_VERSIONS_V0)
    assert size == len(API_VERSIONS_V0) - 4 and (api_key, version) == (18, 0)
    assert API_VERSIONS_V0[14:] == b"parsley-probe\r\n\r\n" and n == 17
    kafka = struct.pack(">ii", 16, correlation) + b"\x00\x00"
    assert not_kafka(kafka) is None
    assert not_kafka(b"") is None, "a close without a word decides nothing"
    assert not_kafka(b"\x15\x03\x03\x00\x02\x02\x46") is None, "a TLS alert decides nothing"
    assert not_kafka(b"SSH-2.0-OpenSSH_9.2p1\r\n") == \
        "not a Kafka broker: it answered the Kafka handshake with 'SSH-2.0-OpenSSH_9.2p1..'"
    assert not_kafka(struct.pack(">ii", 16, correlation + 1) + b"xx") is not None


@pytest.mark.serial  # bounds a time
@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b"-ERR unknown\r\n"])
def test_a_server_that_answers_as_something_else_is_named(answer: bytes) -> None:
    port, thread = _serve_once(lambda conn: (conn.recv(64), conn.sendall(answer)))
    began = time.monotonic()
    got = probe_refusals(f"127.0.0.1:{port}")
    thread.join(5)
    assert got is not None and got[0].startswith(f"127.0.0.1:{port}: not a Kafka broker"), got
    assert time.monotonic() - began < 2


def test_a_server_that_answers_as_kafka_or_closes_is_left_to_the_metadata_wait() -> None:
    def kafka(conn: socket.socket) -> None:
        request = conn.recv(64)
        correlation = struct.unpack_from(">i", request, 8)[0]
        conn.sendall(struct.pack(">iih", 6, correlation, 0))

    for reply in (kafka, lambda conn: None):
        port, thread = _serve_once(reply)
        assert probe_refusals(f"127.0.0.1:{port}") is None
        thread.join(5)
