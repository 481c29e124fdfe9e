"""The house's large scale, checked: no import cycle among theanompi's modules, and no import pointing up a layer
(ARCHITECTURE.md; the layers are ``[tool.importlinter]`` in pyproject.toml). Imports inside functions count."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("theanompi", cache_dir=None)


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles: every strongly connected set of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle(graph):
    assert strongly_connected(graph) == []


def test_imports_inside_functions_are_counted(graph):
    # make_exchanger imports each transport inside the function that needs it
    assert "theanompi.comm.exchange.nccl" in graph.find_modules_directly_imported_by("theanompi.comm.exchange")


def test_the_cycle_finder_sees_a_cycle(tmp_path, monkeypatch):
    package = tmp_path / "circle"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from circle import b\n")
    (package / "b.py").write_text("from circle import a\n")
    (package / "c.py").write_text("from circle import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert strongly_connected(grimp.build_graph("circle", cache_dir=None)) == [["circle.a", "circle.b"]]


def test_no_import_points_up_a_layer():
    lint_imports = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in proc.stdout


def test_the_documented_layers_are_the_checked_ones():
    """ARCHITECTURE.md lists the layers in the order pyproject.toml checks them."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    layers = config["tool"]["importlinter"]["contracts"][0]["layers"]
    text = (ROOT / "ARCHITECTURE.md").read_text()
    positions = []
    for layer in layers:
        for name in layer.split("|"):
            marker = f"`theanompi/{name.strip()}"
            assert marker in text, f"ARCHITECTURE.md does not describe {name.strip()}"
            positions.append(text.index(marker))
    assert positions == sorted(positions), "ARCHITECTURE.md lists the layers in another order than pyproject.toml"
