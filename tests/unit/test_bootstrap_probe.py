"""The bootstrap probe: every server refusing fails at once; anything listening does not."""

from __future__ import annotations

import socket
import time

import pytest

from coordinator.bootstrap.probe import Endpoint, parse_bootstrap, probe_refusals


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
