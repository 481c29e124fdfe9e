"""The one global of the house (ARCHITECTURE.md): the rank's current WorkerConfig, written by the model build alone and
read only by what Theano-MPI's constructors call without handing it the config."""

import ast
from pathlib import Path

import theanompi

PACKAGE = Path(theanompi.__file__).parent
MODULE = "theanompi.models.current_config"
#: the one writer and the readers ARCHITECTURE.md names
WRITER = "theanompi.runtime.model_build"
READERS = {"theanompi.models.data.theanompi_api", "theanompi.models.layers2.base", "theanompi.lib.opt"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_current_config(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == MODULE for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module == MODULE or (
                node.module == "theanompi.models" and any(a.name == "current_config" for a in node.names))):
            return True
    return False


def calls_set_current(tree: ast.AST) -> bool:
    return any(isinstance(node, ast.Call) and (getattr(node.func, "attr", None) == "set_current"
                                               or getattr(node.func, "id", None) == "set_current")
               for node in ast.walk(tree))


def test_only_the_model_build_writes_the_current_config_and_only_the_named_modules_read_it():
    importers, writers = set(), set()
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        if name == MODULE:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        if imports_current_config(tree):
            importers.add(name)
        if calls_set_current(tree):
            writers.add(name)
    assert writers == {WRITER}
    assert importers == READERS | {WRITER}
