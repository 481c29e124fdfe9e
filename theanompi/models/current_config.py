"""This rank's current :class:`~theanompi.models.contract.WorkerConfig`: the one global of the house.

Everything else is handed what it works on. This cannot be: Theano-MPI's model constructors take only a config
dict and its DataClasses only ``verbose`` (``Cifar10_data(verbose)``), yet the code they call needs the rank's
config all the same -- the DataClass API (:mod:`theanompi.models.data.theanompi_api`: ``MODEL_DATA_DIR``, the
seed, the rank), Theano-MPI's layers (:mod:`theanompi.models.layers2`: random layers seeded by seed and rank) and
:mod:`theanompi.lib.opt` (the session's sync type). So the rank keeps its config here:
:func:`theanompi.runtime.model_build.build_model` sets it just before it constructs the ModelClass and leaves it
set while the session runs; only those readers read it. Outside a session it is None (a test or a script may set
one itself, and should set None again after).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> set_current(WorkerConfig(rank=1, size=2, seed=3, device="cpu1", model_options={"data_dir": "/data"}))
>>> config = current()
>>> config is not None and (config.rank, config.size, config.model_options["data_dir"])
(1, 2, '/data')
>>> set_current(None); current() is None
True
"""

from __future__ import annotations

from theanompi.models.contract import WorkerConfig

_current: WorkerConfig | None = None


def set_current(config: WorkerConfig | None) -> None:
    """Make ``config`` this rank's current WorkerConfig (None: no session runs in this process)."""
    global _current
    _current = config


def current() -> WorkerConfig | None:
    """This rank's WorkerConfig while a session builds or runs its model, else None."""
    return _current
