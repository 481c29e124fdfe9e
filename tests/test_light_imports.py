"""Importing the launcher side of theanompi loads neither mpi4py nor pytensor.

``tmlauncher`` validates the cfg and spawns mpiexec; only the ranks need MPI and pytensor. Keeping them out of the
launcher's imports keeps bad-input errors instant and lets the launcher run where pytensor would compile C code.
"""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys

import pytest
from conftest import ROOT

HEAVY = ("mpi4py", "pytensor")


def modules_loaded_by(statement: str, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The ``heavy`` packages present in a fresh interpreter's ``sys.modules`` after ``statement``."""
    probe = (f"import json, sys\n{statement}\n"
             f"print(json.dumps(sorted(m for m in {heavy!r} if m in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def launcher_modules() -> list[str]:
    """``theanompi`` and every module of the launcher's package, :mod:`theanompi.launch`."""
    import theanompi.launch

    return ["theanompi", "theanompi.launch",
            *sorted(info.name for info in pkgutil.walk_packages(theanompi.launch.__path__, "theanompi.launch."))]


@pytest.mark.parametrize("module", launcher_modules())
def test_launcher_imports_stay_light(module: str) -> None:
    assert modules_loaded_by(f"import {module}") == []


def test_every_launcher_module_is_guarded() -> None:
    assert {"theanompi.launch.cli", "theanompi.launch.plan", "theanompi.launch.mpiexec",
            "theanompi.launch.handles", "theanompi.launch.cfg"} <= set(launcher_modules())


def test_theanompi_models_exports_theanompis_classes_without_loading_them() -> None:
    """``theanompi.models`` names AlexNet, Cifar10_model and GoogLeNet as Theano-MPI's package did; they load
    (with pytensor) only when asked for."""
    assert modules_loaded_by("import theanompi.models; assert 'Cifar10_model' in theanompi.models.__all__") == []
    assert modules_loaded_by("import theanompi.models; theanompi.models.Cifar10_model") == ["pytensor"]


def test_probe_sees_a_heavy_import() -> None:
    assert modules_loaded_by("import mpi4py, pytensor") == ["mpi4py", "pytensor"]


def test_c_mode_model_code_does_not_import_jax() -> None:
    """jax costs ~1 s per rank: only the JAX compute mode (``pytensor_mode("jax")``) imports it."""
    statement = "import theanompi.nn, theanompi.backend.ops, theanompi.models.zoo.resnet"
    assert modules_loaded_by(statement, ("jax",)) == []
    assert modules_loaded_by("import jax", ("jax",)) == ["jax"]
