"""Every module under theanompi/ runs its docstring examples, which print what they show.

Modules are found by walking the package, so a new module's examples run without touching this file. No example
starts an MPI session; the ones that need one (or a GPU, or a data set on disk) carry ``# doctest: +SKIP``.
"""

from __future__ import annotations

import doctest
import importlib
import os
import pkgutil

import pytest

import theanompi
from theanompi.models.current_config import set_current

# Modules that cannot be imported in the test process, each with the reason. None today: lasagne.layers.dnn, which
# raises ImportError by design, is a name of theanompi.lasagne's table, not a file (tests/compat/test_lasagne_tree.py).
NOT_IMPORTABLE: set[str] = set()

# Modules that need an optional package; their examples run when it is installed.
OPTIONAL_PACKAGE = {
    "theanompi.models.torch_classifier": "torch",
    "theanompi.comm.array_cell": "jax",
    "theanompi.models.jax_functional": "jax",
    "theanompi.models.jax_classifier": "flax",
    "theanompi.models.keras_classifier": "keras",
    "theanompi.models.keras_torch": "torch",
    "theanompi.models.keras_jax": "keras",
    "theanompi.multiverso.keras_ext": "keras",
    "theanompi.multiverso.theano_ext.keras_ext.callbacks": "keras",
}

# Packages every module of which must show at least one docstring example, and single modules that must.
MUST_HAVE_EXAMPLES_UNDER = ("theanompi.nn.", "theanompi.models.zoo.", "theanompi.models.data.")
MUST_HAVE_EXAMPLES = ("theanompi.nn", "theanompi.models.zoo", "theanompi.session.watchdog",
                      "theanompi.session.run_dir", "theanompi.launch.mpiexec", "theanompi.core.options",
                      "theanompi.core.session_options", "theanompi.core.option_checks", "theanompi.core.devices",
                      "theanompi.core.polling", "theanompi.launch.cfg", "theanompi.multiverso.api",
                      "theanompi.multiverso.guards", "theanompi.multiverso.theano_ext.param_manager",
                      "theanompi.comm.param_access", "theanompi.models.hyperparams",
                      "theanompi.models.torch_classifier", "theanompi.models.contract", "theanompi.models.layers2",
                      "theanompi.comm.array_cell", "theanompi.models.jax_functional", "theanompi.models.jax_classifier",
                      "theanompi.models.keras_classifier", "theanompi.models.keras_torch",
                      "theanompi.rules.easgd", "theanompi.runtime.records", "theanompi.models.data",
                      "theanompi.lasagne", "theanompi.lasagne._name_map", "theanompi.lasagne_alias",
                      "theanompi.core.module_alias", "theanompi.runtime.rank_context", "theanompi.session.spec")

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def all_modules() -> list[str]:
    """The package and every module under it, sorted.

    >>> names = all_modules()
    >>> names[0], "theanompi.nn.layers.dense" in names, "theanompi.lasagne.theano_extensions.conv" in names
    ('theanompi', True, True)
    """
    return sorted(["theanompi", *(info.name for info in pkgutil.walk_packages(theanompi.__path__, "theanompi."))])


@pytest.mark.parametrize("name", [name for name in all_modules() if name not in NOT_IMPORTABLE])
def test_docstring_examples(name: str) -> None:
    if name in OPTIONAL_PACKAGE:
        pytest.importorskip(OPTIONAL_PACKAGE[name])
        os.environ.setdefault("KERAS_BACKEND", "torch")  # keras 3 defaults to tensorflow, which is not a dependency
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=FLAGS)
    if name.startswith("theanompi.models.data"):
        set_current(None)  # the data loaders' examples set the rank's current WorkerConfig
    if name in MUST_HAVE_EXAMPLES or name.startswith(MUST_HAVE_EXAMPLES_UNDER):
        assert result.attempted > 0, f"{name} has no docstring example"
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring example(s) of {name} failed (above)"


def test_walk_finds_the_known_examples() -> None:
    """The walk reaches nested packages (guards against a silently empty parametrization)."""
    names = all_modules()
    assert len(names) > 100
    nested = {"theanompi.nn.layers.dense", "theanompi.multiverso.theano_ext.sharedvar", "theanompi.comm.ps.server"}
    assert nested <= set(names)


def test_this_module_examples() -> None:
    import sys

    result = doctest.testmod(sys.modules[__name__], optionflags=FLAGS)
    assert result.attempted > 0 and result.failed == 0
