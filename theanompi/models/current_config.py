"""The WorkerConfig of the model this rank builds, for code that is not handed it.

Theano-MPI's DataClasses are constructed as ``Cifar10_data(verbose)``, without the
session's options; they find ``MODEL_DATA_DIR``, the seed, the rank and the
session's sync type here. :func:`theanompi.runtime.worker_loop.build_model` sets it before
it constructs the ModelClass; outside a session it is None.

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> set_current(WorkerConfig(rank=0, size=2, seed=3, device="cpu0", model_options={"data_dir": "/data"}))
>>> current().model_options["data_dir"], current().size
('/data', 2)
>>> set_current(None); current() is None
True
"""

from __future__ import annotations

from typing import Any

_current: Any = None


def set_current(config) -> None:
    """Make ``config`` (a :class:`theanompi.models.contract.WorkerConfig`, or None) this rank's current one."""
    global _current
    _current = config


def current():
    """This rank's WorkerConfig while a session builds or runs its model, else None."""
    return _current
