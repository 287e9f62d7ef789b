"""The pure core imports only computation: no I/O, clocks, randomness or Kafka.

An allowlist, not a blocklist. The pure modules are every module under
``parsley/engine``, ``parsley/wire.py``, the session past and tiers
(``parsley/session/past.py``, ``tiers.py``), and every ``parsley`` module they
import, followed transitively (today ``parsley/refusals.py`` and
``parsley/status.py``). Each may import only

* a standard-library module (``sys.stdlib_module_names``) outside
  :data:`BANNED` (I/O, processes, networking, clocks, randomness, threads,
  interpreter state), or
* another pure ``parsley`` module.

Two ``parsley`` modules are admitted without being followed: the extension
module ``parsley._native`` (the same core compiled from ``native/src``, pure Rust
computation, no I/O) and ``parsley.native``, which chooses between the two
implementations once at import from ``PARSLEY_ENGINE`` and logs one warning when
the native core is missing (:data:`ADMITTED`).

Anything else (a third-party package, a banned stdlib module, a ``parsley``
module that is itself impure, a relative import) fails naming the module and
the import. The package facade ``parsley/__init__.py`` re-exports the public
API and is not part of the core; it is never an import target here because
imports are resolved to the module file they name.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARSLEY = ROOT / "parsley"

BANNED = frozenset({
    # files, processes, the interpreter and the operating system
    "os", "io", "sys", "pathlib", "shutil", "tempfile", "glob", "fnmatch", "fileinput",
    "mmap", "fcntl", "msvcrt", "pty", "tty", "termios", "resource", "signal", "subprocess",
    "multiprocessing", "platform", "getpass", "pwd", "grp", "ctypes", "gc", "importlib",
    "pickle", "shelve", "dbm", "sqlite3", "logging", "warnings", "atexit", "builtins",
    "site", "code", "pdb", "inspect", "traceback", "faulthandler", "tracemalloc",
    # networking
    "socket", "ssl", "select", "selectors", "asyncio", "asyncore", "asynchat",
    "socketserver", "http", "urllib", "ftplib", "smtplib", "poplib", "imaplib", "nntplib",
    "telnetlib", "xmlrpc", "email", "mailbox", "webbrowser", "wsgiref", "ipaddress",
    # clocks and randomness
    "time", "datetime", "calendar", "zoneinfo", "sched", "random", "secrets",
    # threads and concurrency
    "threading", "_thread", "concurrent", "queue", "contextvars",
})
ALLOWED_STDLIB = frozenset(sys.stdlib_module_names) - BANNED

ADMITTED = frozenset({"parsley._native", "parsley.native"})
"""Modules the core may import without their own imports being judged (docstring)."""

ROOTS = [*sorted((PARSLEY / "engine").glob("*.py")), PARSLEY / "wire.py",
         PARSLEY / "session" / "past.py", PARSLEY / "session" / "tiers.py"]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _file_of(module: str) -> Path | None:
    """The source file of a ``parsley`` module, or ``None`` when it names no module."""
    base = ROOT.joinpath(*module.split("."))
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _imports(path: Path) -> list[tuple[str, Path | None]]:
    """Every import in ``path`` as (what it names, the parsley file it loads, if any)."""
    found: list[tuple[str, Path | None]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(a.name, _file_of(a.name)
                       if a.name.startswith("parsley") and a.name not in ADMITTED else None)
                      for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                found.append(("." * node.level + (node.module or ""), None))
                continue
            module = node.module or ""
            if module.split(".")[0] != "parsley":
                found.append((module, None))
                continue
            for alias in node.names:
                if f"{module}.{alias.name}" in ADMITTED:
                    found.append((f"{module}.{alias.name}", None))
                    continue
                # `from parsley.engine import state_codec` loads a submodule.
                sub = _file_of(f"{module}.{alias.name}")
                found.append((f"{module}.{alias.name}" if sub else module,
                              sub or _file_of(module)))
    return found


def _verdicts() -> tuple[list[str], list[str]]:
    """(pure module names, offences), walking from :data:`ROOTS` through parsley imports."""
    seen: set[Path] = set()
    todo = list(ROOTS)
    offences: list[str] = []
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        where = _module_name(path)
        for name, target in _imports(path):
            top = name.split(".")[0]
            if name.startswith("."):
                offences.append(f"{where} imports {name} (relative imports are not allowed)")
            elif name in ADMITTED:
                continue
            elif top == "parsley":
                if target is None:
                    offences.append(f"{where} imports {name}, which is no parsley module")
                elif target == PARSLEY / "__init__.py":
                    offences.append(f"{where} imports {name} from the parsley package facade")
                else:
                    todo.append(target)
            elif top == "__future__" or top in ALLOWED_STDLIB:
                continue
            elif top in BANNED:
                offences.append(f"{where} imports {name} (banned: I/O, clock, randomness or "
                                "threads)")
            else:
                offences.append(f"{where} imports {name} (not the standard library)")
    return sorted(_module_name(p) for p in seen), offences


def test_pure_modules_exist() -> None:
    assert (PARSLEY / "engine" / "channel.py").exists(), "parsley/engine/channel.py is missing"


def test_the_pure_set_follows_parsley_imports() -> None:
    pure, _ = _verdicts()
    for name in ("parsley.wire", "parsley.engine.engine", "parsley.refusals", "parsley.status"):
        assert name in pure, f"{name} should be reached from the pure roots: {pure}"
    assert "parsley.declarations" not in pure and "parsley.serdes" not in pure, pure


def test_core_imports_only_allowed_modules() -> None:
    _, offences = _verdicts()
    assert not offences, "impure imports in the core: " + "; ".join(offences)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time", "imports time (banned"),
        ("from os import path", "imports os (banned"),
        ("import orjson", "imports orjson (not the standard library)"),
        ("from concurrent.futures import Future", "imports concurrent.futures (banned"),
        ("from . import wire", "imports . (relative imports are not allowed)"),
        ("from parsley.serdes import JSON", "parsley.serdes imports orjson"),
        ("from parsley import Channel", "from the parsley package facade"),
        ("import parsley.nothing_here", "which is no parsley module"),
    ],
)
def test_the_check_names_each_kind_of_offence(
    source: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probe = PARSLEY / "engine" / "_purity_probe.py"
    assert not probe.exists()
    # Judge a fake root module without writing into the tree: patch the reader.
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return source if self == probe else real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    monkeypatch.setattr(sys.modules[__name__], "ROOTS", [*ROOTS, probe])
    _, offences = _verdicts()
    assert any(expected in o for o in offences), offences
