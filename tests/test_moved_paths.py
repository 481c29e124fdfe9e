"""0.1's import paths that moved (``theanompi.MOVED_PATHS``): each old path gives the module object of the new one,
with a DeprecationWarning naming the new path. Checked in a fresh interpreter (an alias warns when first imported)."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest
from conftest import ROOT

import theanompi
import theanompi.nn.layers

#: Every old module path and the module it moved to: the table's own entries, and each module of the layer
#: library under its old package (the layers under theanompi.models.layers.X are now theanompi.nn.layers.X).
OLD_TO_NEW = {
    **{old: new for old, new in theanompi.MOVED_PATHS.items() if not old.endswith(".*")},
    **{f"theanompi.models.layers.{info.name}": f"theanompi.nn.layers.{info.name}"
       for info in pkgutil.iter_modules(theanompi.nn.layers.__path__)},
}

PROBE = """
import importlib, json, sys, warnings
import theanompi
results = {}
for old, new in json.loads(sys.argv[1]).items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    results[old] = {"same": module is importlib.import_module(new),
                    "warnings": [str(w.message) for w in caught if w.category is DeprecationWarning]}
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def imported() -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", PROBE, json.dumps(OLD_TO_NEW)], capture_output=True, text=True,
                          timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_the_layer_library_paths_are_all_listed():
    assert {"theanompi.models.layers", "theanompi.models.layers.init", "theanompi.models.layers.updates",
            "theanompi.models.layers.dense", "theanompi.models.layers.pool", "theanompi.models.layers.recurrent",
            "theanompi.models.layers.utils"} <= set(OLD_TO_NEW)
    assert OLD_TO_NEW["theanompi.models.layers"] == "theanompi.nn"
    assert OLD_TO_NEW["theanompi.models.layers.updates"] == "theanompi.nn.updates"
    assert OLD_TO_NEW["theanompi.models.layers.conv"] == "theanompi.nn.layers.conv"


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_an_old_path_gives_the_new_module_and_warns_naming_it(imported, old):
    new = OLD_TO_NEW[old]
    assert imported[old]["same"], f"{old} is not the module object of {new}"
    assert f"{old} is now {new}; import it from there" in imported[old]["warnings"], imported[old]["warnings"]


def test_old_layer_library_idioms_still_work():
    """What 0.1's docs wrote: ``import theanompi.models.layers as L`` then ``L.DenseLayer``, ``L.init``, ..."""
    code = ("import warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    import theanompi.models.layers\nexcept DeprecationWarning as w:\n    print('warned:', w)\n"
            "warnings.simplefilter('ignore', DeprecationWarning)\n"
            "import theanompi.models.layers as L, theanompi.nn as nn\n"
            "from theanompi.models.layers.init import GlorotUniform\n"
            "from theanompi.models.layers import DenseLayer, updates\n"
            "print(L is nn, L.init is nn.init, GlorotUniform is nn.init.GlorotUniform, DenseLayer is nn.DenseLayer,\n"
            "      updates is nn.updates, L.get_output is nn.layers.get_output)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == [
        "warned: theanompi.models.layers is now theanompi.nn; import it from there",
        "True True True True True True",
    ]


def test_an_old_path_wins_over_a_directory_left_at_it(tmp_path):
    """After an update, ``theanompi/models/layers/`` may be left with only its ``__pycache__``: a directory that
    the path finder would import as an empty namespace package. The finder of moved paths is asked first."""
    (tmp_path / "layers" / "__pycache__").mkdir(parents=True)
    code = ("import sys, theanompi.models\n"
            f"theanompi.models.__path__.append({str(tmp_path)!r})\n"
            "import theanompi.models.layers as L\n"
            "print(L.__name__, hasattr(L, 'DenseLayer'))\n")
    proc = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", code], capture_output=True,
                          text=True, timeout=240, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["theanompi.nn", "True"]


def test_a_cfg_naming_an_old_zoo_path_still_loads_its_model():
    """``MODELFILE=theanompi.models.zoo.cifar10_cnn`` (the zoo's name before its modules said what they hold) loads
    the class from its new module, as the launcher does before any rank starts."""
    code = ("import warnings; warnings.simplefilter('ignore', DeprecationWarning)\n"
            "from theanompi.models.loader import load_model_class\n"
            "for old, cls in [('cifar10_cnn', 'CifarCNN'), ('googlenet', 'GoogLeNet'), ('wgan', 'LSGAN')]:\n"
            "    print(load_model_class('theanompi.models.zoo.' + old, cls).__module__)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["theanompi.models.zoo.small_cnn", "theanompi.models.zoo.inception",
                                   "theanompi.models.zoo.gans"]
