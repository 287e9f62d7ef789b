"""The peers of ``python -m perf --peers``: Quix Streams and Kafka Streams, each in its own
environment, relaying under the same procedure as the baseline (docs/performance.md,
"Peers").

* ``quix-100ms`` and ``quix-5s``: Quix Streams (:data:`QUIX_VERSION`) exactly-once, commit
  interval 100 ms and its default 5 s, ``perf/peer_quix.py`` run by the Python of a venv
  this module makes under the cache directory (Quix pins its own confluent-kafka, so it
  cannot share the project's environment);
* ``kstreams``: Kafka Streams (:data:`KSTREAMS_VERSION`, the broker's version) with the
  minimal topology ``stream(in).to(out)``, ``exactly_once_v2``, ``commit.interval.ms=100``:
  the Maven project in ``perf/kstreams/`` copied to the cache directory and built there with
  Maven from Maven Central (nothing vendored). A JVM's first records run interpreted, so the
  run relays an untimed backlog first (:attr:`PeerRelay.warmup_records`).

The cache directory is ``$PARSLEY_PERF_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/parsley/perf``.
:func:`prepare` installs and builds what the asked peers need before any run, and a
missing Java, Maven, package or network is a :class:`PeerUnavailable` naming what to do:
never a peer silently left out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from perf.relay_process import RelayProcess

__all__ = ["KSTREAMS_VERSION", "QUIX_VERSION", "PeerRelay", "PeerUnavailable", "cache_dir",
           "peer_relay", "prepare"]

QUIX_VERSION: Final = "3.28.1"
"""The Quix Streams release the venv installs (pinned: figures compare like with like)."""
KSTREAMS_VERSION: Final = "4.3.1"
"""The Kafka Streams release of ``perf/kstreams/pom.xml``: the dev broker's Kafka version."""
INSTALL_TIMEOUT_S: Final = 900.0
"""The longest a pip install or a Maven build may take, s."""
PROJECT: Final = Path(__file__).parent / "kstreams"


class PeerUnavailable(RuntimeError):
    """A peer cannot be installed, built or run here; the message says what is missing and
    what to do (install Java 17 and Maven, reach PyPI or Maven Central, ...)."""


class PeerRelay(RelayProcess):
    """A peer relay in a subprocess, started and stopped as the baseline is
    (:class:`perf.relay_process.RelayProcess`)."""


def cache_dir() -> Path:
    """``$PARSLEY_PERF_CACHE`` or ``${XDG_CACHE_HOME:-~/.cache}/parsley/perf``."""
    if os.environ.get("PARSLEY_PERF_CACHE"):
        return Path(os.environ["PARSLEY_PERF_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "parsley" / "perf"


def _run(argv: list[str], what: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise PeerUnavailable(f"{what}: {argv[0]} is not installed ({exc})") from exc
    except subprocess.TimeoutExpired as exc:
        raise PeerUnavailable(f"{what}: no end after {INSTALL_TIMEOUT_S:g} s (is the package "
                              "registry reachable?)") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise PeerUnavailable(f"{what} failed (exit status {done.returncode}):\n{tail}")
    return done.stdout


def quix_python() -> Path:
    """The Python of the Quix Streams venv, made (and Quix installed) on first use.

    Raises:
        PeerUnavailable: the venv or the install failed (no network to PyPI, say).
    """
    home = cache_dir() / f"quix-{QUIX_VERSION}"
    python = home / "venv" / "bin" / "python"
    done = home / ".complete"
    if done.exists() and python.exists():
        return python
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    _run([sys.executable, "-m", "venv", str(home / "venv")],
         f"making the Quix Streams venv in {home}")
    _run([str(python), "-m", "pip", "install", "--quiet", f"quixstreams=={QUIX_VERSION}"],
         f"installing quixstreams=={QUIX_VERSION} from PyPI into {home / 'venv'}")
    done.touch()
    return python


def _java_major() -> int:
    java = shutil.which("java")
    if java is None:
        raise PeerUnavailable("Kafka Streams needs Java 17 or later: `java` is not on PATH "
                              "(apt-get install openjdk-17-jdk-headless maven)")
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (out.stderr or out.stdout).splitlines()[0] if (out.stderr or out.stdout) else ""
    digits = first.split('"')[1] if '"' in first else "0"
    return int(digits.split(".")[0])


def kstreams_classpath() -> str:
    """The classpath of the built Kafka Streams relay, built on first use (or when
    ``perf/kstreams/`` changed) in the cache directory.

    Raises:
        PeerUnavailable: no Java 17+, no Maven, or the build failed (no network to Maven
            Central, say).
    """
    major = _java_major()
    if major < 17:
        raise PeerUnavailable(f"Kafka Streams {KSTREAMS_VERSION} needs Java 17 or later; "
                              f"`java -version` says {major}")
    if shutil.which("mvn") is None:
        raise PeerUnavailable("building the Kafka Streams relay needs Maven: `mvn` is not on "
                              "PATH (apt-get install maven)")
    digest = hashlib.sha256()
    for path in sorted(p for p in PROJECT.rglob("*") if p.is_file()):
        digest.update(path.relative_to(PROJECT).as_posix().encode() + path.read_bytes())
    home = cache_dir() / f"kstreams-{KSTREAMS_VERSION}-{digest.hexdigest()[:12]}"
    classpath = home / "classpath.txt"
    if not (home / ".complete").exists():
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(PROJECT, home)
        _run(["mvn", "-B", "-q", "package", "dependency:build-classpath",
              "-Dmdep.outputFile=classpath.txt"],
             f"building the Kafka Streams relay with Maven in {home}", cwd=home)
        (home / ".complete").touch()
    return f"{home / 'target' / 'classes'}{os.pathsep}{classpath.read_text().strip()}"


def prepare(kinds: Iterable[str]) -> None:
    """Install and build what the peer ``kinds`` need, before any run.

    Raises:
        PeerUnavailable: as :func:`quix_python` and :func:`kstreams_classpath`.
    """
    kinds = set(kinds)
    if kinds & {"quix-100ms", "quix-5s"}:
        quix_python()
    if "kstreams" in kinds:
        kstreams_classpath()


def peer_relay(kind: str, bootstrap: str, input_topic: str, output_topic: str, tag: str,
               consume_batch: int) -> PeerRelay:
    """The relay of peer ``kind`` over ``input_topic`` -> ``output_topic``: records per poll
    ``consume_batch`` (the baseline's), its group/application id from ``tag``.

    Raises:
        PeerUnavailable: as :func:`prepare`.
        ValueError: an unknown kind.
    """
    state = tempfile.mkdtemp(prefix=f"{kind}-state-")
    if kind in ("quix-100ms", "quix-5s"):
        interval = "0.1" if kind == "quix-100ms" else "5.0"
        return PeerRelay(kind, [str(quix_python()), str(Path(__file__).parent / "peer_quix.py"),
                                "--bootstrap-servers", bootstrap, "--input", input_topic,
                                "--output", output_topic, "--group", f"{tag}-quix",
                                "--commit-interval-s", interval,
                                "--batch", str(consume_batch), "--state-dir", state])
    if kind == "kstreams":
        return PeerRelay(kind, ["java", "-Xms256m", "-Xmx512m", "-cp", kstreams_classpath(),
                                "parsley.perf.Relay", bootstrap, input_topic, output_topic,
                                f"{tag}-kstreams", "100", str(consume_batch), state],
                         warmup_records=1)
    raise ValueError(f"unknown peer {kind!r}")
