"""The layer map holds: imports point down, nothing imports tests, no circles, no huge modules.

The layers, lowest first (docs/architecture.md, "Layers"):

    parsley < workers < coordinator < devtools < perf, examples < tests

A module may import its own layer and the layers below it, never one above. ``perf`` and
``examples`` share a layer and do not import each other. ``parsley`` is the pure core and
public API: besides itself it imports only the standard library, its native core
(``parsley._native``) and :data:`PARSLEY_THIRD_PARTY`. Every import counts, also one inside a
function (a lazy import is still an arrow). An import circle between modules fails, and so
does a product module over :data:`MAX_LINES` lines unless a line at its top starts with
:data:`LONG_REASON` and says why in a few words.

``tests/unit/test_purity.py`` judges the pure core's standard-library imports more closely.
The module map of docs/architecture.md names every module, and only modules that exist.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

LAYERS: dict[str, int] = {
    "parsley": 0, "workers": 1, "coordinator": 2, "devtools": 3, "perf": 4, "examples": 4,
    "tests": 5,
}
"""Top-level package -> its layer; a package imports only packages of a layer <= its own."""

PRODUCT = ("parsley", "workers", "coordinator", "devtools")
PARSLEY_THIRD_PARTY = frozenset({"orjson"})
"""The one third-party package the core may use: ``parsley/serdes.py``'s JSON serde."""

NATIVE = "parsley._native"
"""The compiled core (native/, a Rust extension): a module with no Python source to read."""

MAX_LINES = 800
LONG_REASON = "# Long module:"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[str, Path]:
    """Every module of the layered packages, by dotted name."""
    found: dict[str, Path] = {}
    for top in LAYERS:
        for path in sorted((ROOT / top).rglob("*.py")):
            found[_module_name(path)] = path
    return found


def _resolve(module: str, importer: str, is_package: bool, level: int) -> str:
    if not level:
        return module
    base = importer.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


@functools.cache
def _nodes(text: str, filename: str) -> tuple[ast.AST, ...]:
    """Every node of a module's source, parsed once per text (each planted case re-judges
    the whole tree)."""
    return tuple(ast.walk(ast.parse(text, filename=filename)))


def _imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, int]]:
    """(imported module, line) for each import in ``path``, a ``from`` name resolved to the
    submodule it names when there is one, else to the module it is taken from."""
    for node in _nodes(path.read_text(), str(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            module = _resolve(node.module or "", name, path.name == "__init__.py", node.level)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                yield (sub if sub in known else module), node.lineno


def _graph(sources: dict[str, Path]) -> dict[str, dict[str, int]]:
    """Module -> {imported project module: first line}, project modules only."""
    known = {*sources, NATIVE}
    graph: dict[str, dict[str, int]] = {}
    for name, path in sources.items():
        edges: dict[str, int] = {}
        for target, line in _imports(name, path, known):
            if target in sources and target != name:
                edges.setdefault(target, line)
        graph[name] = edges
    return graph


def _circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _offences(sources: dict[str, Path]) -> list[str]:
    graph = _graph(sources)
    offences: list[str] = []
    for name, edges in sorted(graph.items()):
        top = name.split(".")[0]
        for target, line in sorted(edges.items()):
            other = target.split(".")[0]
            where = f"{sources[name].relative_to(ROOT)}:{line}: {name} imports {target}"
            if other == "tests" and top != "tests":
                offences.append(f"{where} (only tests import tests)")
            elif LAYERS[other] > LAYERS[top]:
                offences.append(f"{where} (upward: {top} is below {other})")
            elif LAYERS[other] == LAYERS[top] and other != top:
                offences.append(f"{where} ({top} and {other} do not import each other)")
    for name, path in sorted(sources.items()):
        if not name.startswith("parsley"):
            continue
        for target, line in sorted(set(_imports(name, path, {*sources, NATIVE}))):
            first = target.split(".")[0]
            if first in LAYERS or first == "__future__" or first in sys.stdlib_module_names:
                continue  # project imports are judged by layer above
            if first not in PARSLEY_THIRD_PARTY:
                offences.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target} "
                                "(the core imports only itself and the standard library)")
    offences += [f"import circle: {' -> '.join(c)}" for c in _circles(graph)]
    for name, path in sorted(sources.items()):
        if name.split(".")[0] not in PRODUCT:
            continue
        lines = path.read_text().splitlines()
        reasons = [x for x in lines[:40] if x.startswith(LONG_REASON)]
        if len(lines) > MAX_LINES and not any(len(x.split(":", 1)[1].split()) >= 3
                                              for x in reasons):
            offences.append(f"{path.relative_to(ROOT)} has {len(lines)} lines (over "
                            f"{MAX_LINES}: split it, or say why at its top with {LONG_REASON!r})")
    return offences


def test_every_layered_package_is_found() -> None:
    names = _sources()
    for top in LAYERS:
        assert top in names, f"{top}/__init__.py is missing: {sorted(names)[:5]}"
    assert "parsley.engine.engine" in names and "tests.unit.test_layering" in names


@pytest.mark.slow
def test_imports_point_down_and_make_no_circle() -> None:
    offences = _offences(_sources())
    assert not offences, "layering offences:\n" + "\n".join(offences)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ({"parsley.engine._planted": "import workers.main"}, "(upward: parsley is below workers)"),
        ({"workers._planted": "from coordinator import config"}, "(upward: workers is below"),
        ({"coordinator._planted": "from devtools import devbroker"}, "(upward: coordinator is"),
        ({"devtools._planted": "import perf.report"}, "(upward: devtools is below perf)"),
        ({"perf._planted": "from tests.unit import test_wire"}, "(only tests import tests)"),
        ({"devtools._planted": "import tests.conftest"}, "(only tests import tests)"),
        ({"perf._planted": "import examples.quickstart"}, "do not import each other"),
        ({"parsley._planted": "import confluent_kafka"}, "the core imports only itself"),
        ({"workers._planted": "def f():\n    import coordinator.config\n"}, "(upward"),
        ({"workers._planted_a": "from workers import _planted_b",
          "workers._planted_b": "import workers._planted_a"},
         "import circle: workers._planted_a -> workers._planted_b"),
        ({"workers._planted": "x = 1\n" * (MAX_LINES + 1)}, "over 800: split it"),
        ({"workers._planted": "# Long module:\n" + "x = 1\n" * MAX_LINES}, "over 800"),
        ({"coordinator.runtime._planted": "from ...devtools import devbroker"}, "(upward"),
        ({"workers._planted": "import devtools.devbroker as broker"}, "(upward: workers"),
    ],
)
def test_the_check_names_each_kind_of_offence(
    planted: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sources = _sources()
    texts: dict[Path, str] = {}
    for name, source in planted.items():
        path = ROOT.joinpath(*name.split(".")).with_suffix(".py")
        assert not path.exists(), f"{path} exists: plant another name"
        sources[name] = path
        texts[path] = source
    real = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return texts[self] if self in texts else real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    offences = _offences(sources)
    assert any(expected in o for o in offences), offences


def test_the_module_map_names_every_module_and_only_modules_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    listed = {line.split("`")[1] for line in section.splitlines() if line.startswith("- `")}
    present = {str(p.relative_to(ROOT)) for top in (*PRODUCT, "perf", "examples")
               for p in (ROOT / top).rglob("*.py") if p.stat().st_size}
    missing, stale = sorted(present - listed), sorted(listed - present)
    assert not missing, f"docs/architecture.md's module map lacks {missing}"
    assert not stale, f"docs/architecture.md's module map names no such module: {stale}"


def test_no_two_test_modules_share_a_file_name() -> None:
    """pytest keys a test module outside a package by its file name: two alike stop collection."""
    by_name: dict[str, list[str]] = {}
    for path in (ROOT / "tests").rglob("test_*.py"):
        if not (path.parent / "__init__.py").exists():
            by_name.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    alike = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not alike, f"test modules sharing a file name (rename one): {alike}"
