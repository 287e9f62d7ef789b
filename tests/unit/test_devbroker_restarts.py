"""A dev broker restarted by a test comes back on its port, and one that does not is
reported with its log's errors, not only the shutdown lines that fill its log's tail
(devtools/devbroker.py, ``free_port``, ``start_failure``)."""

from __future__ import annotations

from pathlib import Path

from devtools.broker_log import log_errors, log_matching

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
