"""Import a user's ModelClass from MODELFILE (dotted module or ``.py`` path) and MODELCLASS.

Importing never initialises MPI: the launcher process must stay MPI-free so that
it can start ``mpiexec``.

Example
-------
>>> cls = load_model_class("theanompi.models.mlp", "MLP")
>>> cls.__name__
'MLP'
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from theanompi import lasagne_alias
from theanompi.core.errors import ConfigError

#: Optional libraries a ModelClass may build on -> the theanompi extra that installs the tested version.
OPTIONAL_EXTRAS = {"torch": "torch", "keras": "keras", "jax": "jax", "flax": "jax", "optax": "jax"}


def _import_file(path: Path):
    name = f"theanompi_user_model_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"MODELFILE={str(path)!r} cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def import_model_module(modelfile: str, cwd: str | None = None):
    """Import MODELFILE; relative names resolve against ``cwd`` (the launch directory).

    A model needing an optional library that is not installed (torch, keras, jax, flax, optax) gets one
    ConfigError line naming the extra to install.
    """
    try:
        return _import_model_module(modelfile, cwd)
    except ModuleNotFoundError as err:
        top = (err.name or "").split(".")[0]
        if top in OPTIONAL_EXTRAS:
            raise ConfigError(f"MODELFILE={modelfile!r} needs {top}, which is not installed: "
                              f"pip install 'theanompi[{OPTIONAL_EXTRAS[top]}]'") from None
        raise


def _import_model_module(modelfile: str, cwd: str | None):
    try:
        import mpi4py  # noqa: PLC0415 - the launcher imports this module: no mpi4py

        mpi4py.rc.initialize = False  # a model module importing mpi4py.MPI must not start MPI here
        mpi4py.rc.finalize = False
    except ImportError:
        pass
    lasagne_alias.install()  # Lasagne-zoo model files `import lasagne`: theanompi.lasagne when Lasagne is absent
    base = Path(cwd or os.getcwd())
    if modelfile.endswith(".py"):
        path = Path(modelfile) if Path(modelfile).is_absolute() else base / modelfile
        if not path.is_file():
            raise ConfigError(f"MODELFILE={modelfile!r}: no such file")
        return _import_file(path)
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    try:
        return importlib.import_module(modelfile)
    except ModuleNotFoundError as err:
        if err.name and modelfile.startswith(err.name):
            raise ConfigError(
                f"MODELFILE={modelfile!r}: no module named {err.name!r} "
                "(use a dotted module importable from the launch directory, or a .py path)"
            ) from None
        raise


#: imports of Theano-era modules that pytensor does not have -> what to use instead
THEANO_ERA_HINTS = {
    "pytensor.sandbox": "pytensor has no 'sandbox' (Theano's MRG_RandomStreams): use "
                        "pytensor.tensor.random.utils.RandomStream",
    "pytensor.gpuarray": "pytensor has no 'gpuarray' (pygpu is gone): use COMPUTE=jax with theanompi's contract",
    "pygpu": "pygpu is gone: use COMPUTE=jax with theanompi's contract",
}


def theano_era_hint(err: BaseException) -> str | None:
    """What to use instead, when ``err`` is an import of a Theano-era module pytensor lacks; else None.

    Example
    -------
    >>> theano_era_hint(ModuleNotFoundError("No module named 'pytensor.sandbox'", name="pytensor.sandbox"))
    "pytensor has no 'sandbox' (Theano's MRG_RandomStreams): use pytensor.tensor.random.utils.RandomStream"
    """
    missing = getattr(err, "name", None) or "" if isinstance(err, ImportError) else ""
    for prefix, hint in THEANO_ERA_HINTS.items():
        if missing == prefix or missing.startswith(prefix + "."):
            return hint
    return None


def load_model_class(modelfile: str, modelclass: str, cwd: str | None = None) -> type:
    """Return the ModelClass named ``modelclass`` in ``modelfile`` (ConfigError if absent)."""
    try:
        module = import_model_module(modelfile, cwd)
    except ImportError as err:
        hint = theano_era_hint(err)
        if hint is None:
            raise
        raise ConfigError(f"MODELFILE={modelfile!r} imports {err.name!r}: {hint}") from None
    cls = getattr(module, modelclass, None)
    if cls is None:
        raise ConfigError(f"MODELCLASS={modelclass!r}: module {modelfile!r} has no such class")
    if not isinstance(cls, type):
        raise ConfigError(f"MODELCLASS={modelclass!r} in {modelfile!r} is not a class")
    return cls
