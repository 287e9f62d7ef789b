"""A dev broker restarted by a test comes back on its port, and one that does not is
reported with its log's errors, not only the shutdown lines that fill its log's tail
(devtools/devbroker.py, ``free_port``, ``start_failure``); a cluster broker's start that
fails is retried once within the same deadline (devtools/dev_cluster.py,
``START_ATTEMPTS``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devtools import devbroker_cluster
from devtools.broker_log import log_errors, log_matching
from devtools.dev_cluster import START_ATTEMPTS, DevCluster
from devtools.kafka_jars import DevBrokerError

LOG = """\
[2026-12-06 19:09:40,000] INFO [KafkaRaftServer nodeId=1] starting (kafka.server.KafkaRaftServer)
[2026-12-06 19:09:41,000] ERROR [KafkaRaftServer nodeId=1] Fatal error during startup. (k)
java.net.BindException: Address already in use
\tat java.base/sun.nio.ch.Net.bind0(Native Method)
[2026-12-06 19:09:42,000] WARN [x] not an error (y)
[2026-12-06 19:09:43,000] FATAL [z] Exiting Kafka. (z)
""" + "".join(f"[2026-12-06 19:09:44,{i:03d}] INFO shutting down part {i} (p)\n"
              for i in range(40))


def test_the_errors_and_their_exception_line_are_picked_out_of_a_shutdown_tail(
        tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    picked = log_errors(log).splitlines()
    assert picked == [
        "[2026-12-06 19:09:41,000] ERROR [KafkaRaftServer nodeId=1] Fatal error during "
        "startup. (k)",
        "java.net.BindException: Address already in use",
        "[2026-12-06 19:09:43,000] FATAL [z] Exiting Kafka. (z)",
    ]


def test_a_log_without_errors_or_without_a_file_says_so(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("[2026-12-06 19:09:40,000] INFO fine (x)\n")
    assert log_errors(log) == "(none)"
    assert log_errors(tmp_path / "missing.log") == "(no log)"


def test_log_matching_picks_the_last_lines_with_the_needle(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(LOG)
    assert log_matching(log, "shutting down part", lines=2).splitlines() == [
        "[2026-12-06 19:09:44,038] INFO shutting down part 38 (p)",
        "[2026-12-06 19:09:44,039] INFO shutting down part 39 (p)",
    ]
    assert log_matching(log, "likely deleted already") == "(none)"
    assert log_matching(tmp_path / "missing.log", "x") == "(no log)"


def test_dev_broker_ports_are_picked_below_the_ephemeral_range() -> None:
    # A freed broker port in the kernel's ephemeral range can be taken by a client's
    # connection (or a reconnect that connects to itself) before the broker restarts.
    from devtools.devbroker import BROKER_PORTS, free_port

    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert BROKER_PORTS.stop <= low
    assert all(port in BROKER_PORTS for port in (free_port() for _ in range(20)))


class _Starts:
    """Stands in for ``devbroker_cluster.start_broker``/``stop_broker``: fails the first
    ``failures`` starts as a wedged node does, and records every call."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[str, int, float | bool]] = []

    def start_broker(self, data_dir: Path, broker_id: int, *, timeout_s: float) -> str:
        self.calls.append(("start", broker_id, timeout_s))
        if self.failures:
            self.failures -= 1
            raise DevBrokerError(f"broker {broker_id} did not open its port 1 within "
                                 f"{timeout_s:.0f} s; its errors (log):\n(none)")
        return "state"

    def stop_broker(self, data_dir: Path, broker_id: int, *, kill: bool = False) -> None:
        self.calls.append(("stop", broker_id, kill))


def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: _Starts) -> DevCluster:
    monkeypatch.setattr(devbroker_cluster, "start_broker", starts.start_broker)
    monkeypatch.setattr(devbroker_cluster, "stop_broker", starts.stop_broker)
    return DevCluster(data_dir=tmp_path, bootstrap="127.0.0.1:1", brokers=3,
                      security="plaintext")


def test_a_broker_start_that_fails_is_killed_and_retried_within_the_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = _Starts(failures=START_ATTEMPTS - 1)
    told: list[str] = []
    assert _cluster(tmp_path, monkeypatch, starts).start(2, timeout_s=200.0,
                                                         say=told.append) == "state"
    kinds = [c[0] for c in starts.calls]
    assert kinds == ["start", "stop"] * (START_ATTEMPTS - 1) + ["start"]
    assert all(c == ("stop", 2, True) for c in starts.calls if c[0] == "stop")
    shares = [c[2] for c in starts.calls if c[0] == "start"]
    assert shares[0] == pytest.approx(200.0 / START_ATTEMPTS, abs=1.0)
    # One deadline: the last attempt gets what is left of it (all, as the first failed at once).
    assert 199.0 <= shares[-1] <= 200.0
    assert len(told) == START_ATTEMPTS - 1
    first, *rest = told[0].splitlines()
    assert first.startswith("broker 2's start 1 failed after ")
    assert "did not open its port 1" in first and first.endswith("started it again")
    assert rest == ["broker 2 did not open its port 1 within 100 s; its errors (log):",
                    "(none)"]  # the failure in full


def test_a_broker_that_never_starts_raises_the_last_attempts_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    starts = _Starts(failures=START_ATTEMPTS)
    told: list[str] = []
    with pytest.raises(DevBrokerError, match="broker 3 did not open its port") as raised:
        _cluster(tmp_path, monkeypatch, starts).start(3, timeout_s=10.0, say=told.append)
    assert [c[0] for c in starts.calls].count("start") == START_ATTEMPTS
    assert len(told) == START_ATTEMPTS - 1
    # The last failure in full, then a line for each earlier one.
    lines = str(raised.value).splitlines()
    # (the last attempt gets what is left: all 10 s, as the first failed at once)
    assert lines[:2] == ["broker 3 did not open its port 1 within 10 s; its errors (log):",
                         "(none)"]
    assert lines[-1].startswith("(earlier: broker 3's start 1 failed")
