"""``python -m perf --peers`` fails clearly, never silently, when a peer cannot run here."""

from __future__ import annotations

from pathlib import Path

import pytest

from perf import peers


def test_no_java_is_named_with_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no java, no mvn
    monkeypatch.setenv("PARSLEY_PERF_CACHE", str(tmp_path / "cache"))
    with pytest.raises(peers.PeerUnavailable, match=r"Java 17.*`java` is not on PATH"):
        peers.prepare(["kstreams"])


def test_no_maven_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text('#!/bin/sh\necho \'openjdk version "17.0.1" 2021\' >&2\n')
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PARSLEY_PERF_CACHE", str(tmp_path / "cache"))
    with pytest.raises(peers.PeerUnavailable, match="needs Maven"):
        peers.kstreams_classpath()


def test_a_failed_install_says_what_failed_and_how() -> None:
    with pytest.raises(peers.PeerUnavailable, match=r"installing x failed \(exit status 3\)"):
        peers._run(["sh", "-c", "echo no registry >&2; exit 3"], "installing x")
    with pytest.raises(peers.PeerUnavailable, match="is not installed"):
        peers._run(["/nonexistent/pip"], "installing y")


def test_the_benchmark_stops_with_status_2_before_any_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from perf.__main__ import main

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("PARSLEY_PERF_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(peers, "quix_python", lambda: Path("/bin/true"))
    # no broker is started or asked: the peers are prepared first
    assert main(["--peers", "--runs", "baseline", "--bootstrap-servers", "127.0.0.1:1",
                 "--no-restore"]) == 2
    assert "the peers cannot run here" in capsys.readouterr().err
