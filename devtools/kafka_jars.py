"""The pinned Apache Kafka jars: where they are cached, how Maven fetches them, and Java.

The dev broker (:mod:`devtools.devbroker`) and ``parsley-devbroker tool`` run the official
``org.apache.kafka:kafka_2.13`` and ``kafka-tools`` jars of :data:`KAFKA_VERSION`, fetched once
from Maven Central into ``$PARSLEY_KAFKA_LIB`` or
``${XDG_CACHE_HOME:-~/.cache}/parsley/kafka-<version>/lib``.

Source: README.md, "The local broker: ``parsley-devbroker``".
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

KAFKA_VERSION = "4.3.1"
"""The one pinned Apache Kafka version (jars from Maven Central)."""

LOG4J_VERSION = "2.25.4"
"""log4j2 version of Kafka 4.3.1's own log4j-api/log4j-core; the SLF4J binding matches it."""

MIN_JAVA_MAJOR = 17
ENV_LIB_DIR = "PARSLEY_KAFKA_LIB"

_POM = """\
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>parsley</groupId>
  <artifactId>parsley-devbroker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_COMPLETE_MARKER = ".complete"


class DevBrokerError(Exception):
    """The dev broker could not be fetched, started, stopped or run as asked.

    The message names what went wrong and what to do (install Java 17 or Maven,
    read the broker log at a given path, ...). The CLI prints it and exits 1.
    """



# ---------------------------------------------------------------------------- locations


def cache_root() -> Path:
    """``${XDG_CACHE_HOME:-~/.cache}/parsley``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "parsley"


def lib_dir(version: str = KAFKA_VERSION) -> Path:
    """The jar directory: ``$PARSLEY_KAFKA_LIB`` or ``<cache_root>/kafka-<version>/lib``."""
    override = os.environ.get(ENV_LIB_DIR)
    if override:
        return Path(override).expanduser()
    return cache_root() / f"kafka-{version}" / "lib"



# ---------------------------------------------------------------------------- prerequisites


def require_java() -> str:
    """Locate ``java`` on PATH and check it is Java 17 or newer.

    Returns:
        The path of the ``java`` executable.

    Raises:
        DevBrokerError: no ``java`` on PATH, or its major version is below 17.
    """
    java = shutil.which("java")
    if java is None:
        raise DevBrokerError(
            "java not found on PATH: install a Java 17 runtime "
            "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    out = subprocess.run(
        [java, "-version"], capture_output=True, text=True, check=False, timeout=60
    )
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if match is None:
        raise DevBrokerError(f"could not read the Java version from `{java} -version`")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_x" style
        major = int(match.group(2))
    if major < MIN_JAVA_MAJOR:
        raise DevBrokerError(
            f"{java} is Java {major}; Apache Kafka {KAFKA_VERSION} needs Java "
            f"{MIN_JAVA_MAJOR} or newer (Debian/Ubuntu: apt-get install openjdk-17-jre-headless)"
        )
    return java


def require_maven() -> str:
    """Locate ``mvn`` on PATH.

    Raises:
        DevBrokerError: no ``mvn`` on PATH.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevBrokerError(
            "mvn not found on PATH: install Apache Maven to fetch the Kafka jars "
            "(Debian/Ubuntu: apt-get install maven), or point "
            f"${ENV_LIB_DIR} at a directory holding the Kafka {KAFKA_VERSION} jars"
        )
    return mvn


# ---------------------------------------------------------------------------- jars


def jars_present(lib: Path) -> bool:
    """Whether ``lib`` holds a complete fetch (marker file, or a user-provided jar set)."""
    if (lib / _COMPLETE_MARKER).exists():
        return True
    return bool(os.environ.get(ENV_LIB_DIR)) and any(lib.glob("kafka_2.13-*.jar"))


def fetch_jars(
    version: str = KAFKA_VERSION, *, say: Callable[[str], None] | None = None
) -> Path:
    """Fetch the Kafka jars and their runtime dependencies into the cache, once.

    Runs ``mvn dependency:copy-dependencies`` over a generated pom into a temporary
    directory next to the cache and renames it into place, under a file lock, so a
    partial or concurrent fetch never leaves a half-filled cache.

    Args:
        version: Apache Kafka version (``org.apache.kafka:kafka_2.13`` and ``kafka-tools``).
        say: progress callback (one line per call), or None for silence.

    Returns:
        The jar directory (:func:`lib_dir`).

    Raises:
        DevBrokerError: Maven is missing or the fetch failed (Maven's output tail included).
    """
    lib = lib_dir(version)
    if jars_present(lib):
        return lib
    if os.environ.get(ENV_LIB_DIR):
        raise DevBrokerError(
            f"${ENV_LIB_DIR}={lib} holds no kafka_2.13-*.jar; unset it to fetch with Maven"
        )
    mvn = require_maven()
    lib.parent.mkdir(parents=True, exist_ok=True)
    with open(lib.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jars_present(lib):
            return lib
        if say:
            say(f"fetching Apache Kafka {version} jars with Maven into {lib} ...")
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=lib.parent))
        try:
            (work / "pom.xml").write_text(_POM.format(kafka=version, log4j=LOG4J_VERSION))
            out = subprocess.run(
                [
                    mvn, "-B", "-q", "-f", str(work / "pom.xml"),
                    "dependency:copy-dependencies",
                    "-DincludeScope=runtime",
                    f"-DoutputDirectory={work / 'lib'}",
                ],
                capture_output=True, text=True, check=False, timeout=1800,
            )
            if out.returncode != 0 or not any((work / "lib").glob("kafka_2.13-*.jar")):
                tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-25:])
                raise DevBrokerError(
                    f"Maven could not fetch org.apache.kafka:kafka_2.13:{version} "
                    f"(exit {out.returncode}):\n{tail}"
                )
            (work / "lib" / _COMPLETE_MARKER).write_text(version + "\n")
            if lib.exists():
                shutil.rmtree(lib)
            (work / "lib").rename(lib)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return lib


def classpath(lib: Path) -> str:
    return str(lib / "*")
