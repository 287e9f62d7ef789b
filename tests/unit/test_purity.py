"""The pure core never imports I/O, clocks, randomness or Kafka (STYLE.md, "Layout").

Reads the source of every module under parsley/engine and parsley/wire.py and
fails naming the module and the forbidden import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "parsley"
FORBIDDEN = {"confluent_kafka", "zmq", "time", "random", "os", "threading", "socket",
             "subprocess", "multiprocess", "multiprocessing", "psutil", "asyncio"}


def _pure_modules() -> list[Path]:
    files = sorted((ROOT / "engine").glob("*.py"))
    wire = ROOT / "wire.py"
    if wire.exists():
        files.append(wire)
    return files


def test_pure_modules_exist() -> None:
    assert (ROOT / "engine" / "channel.py").exists(), "parsley/engine/channel.py is missing"


def test_core_imports_nothing_impure() -> None:
    offenders: list[str] = []
    for path in _pure_modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in FORBIDDEN:
                    offenders.append(f"{path.relative_to(ROOT.parent)} imports {name}")
    assert not offenders, "impure imports in the core: " + "; ".join(offenders)
