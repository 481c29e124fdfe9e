"""Managers for Lasagne-style networks: ``LasagneParamManager`` and Multiverso's older ``MVNetParamManager``.

A network is a Lasagne-style layer (theanompi.nn; the whole net's
trainable params), a list of layers, a list of pytensor shared variables, or an
object with a ``params`` list (a theanompi ModelClass). The parameters travel
as one fused buffer.

Example
-------
>>> manager = LasagneParamManager(network)     # doctest: +SKIP
>>> # train some batches
>>> manager.sync_all_param()                   # doctest: +SKIP
>>> old_style = MVNetParamManager(network, mv.is_master_worker())  # doctest: +SKIP
>>> old_style.update_all_param()               # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from theanompi.comm.fused_params import FusedParams
from theanompi.multiverso.theano_ext.param_manager import MVModelParamManager
from theanompi.nn import Layer, get_all_params


def params_of(network) -> list:
    """The shared variables of ``network`` (see the module notes); TypeError naming the type otherwise."""
    if isinstance(network, (list, tuple)):
        if network and all(isinstance(x, Layer) for x in network):
            return list(get_all_params(list(network), trainable=True))
        return list(network)
    if isinstance(network, Layer):  # before .params: every layer has a dict of its own params
        return list(get_all_params(network, trainable=True))
    if isinstance(getattr(network, "params", None), (list, tuple)):
        return list(network.params)
    raise TypeError(f"cannot find parameters in {type(network).__name__}: pass a Lasagne-style layer, "
                    "a list of shared variables or an object with a .params list")


class LasagneParamManager(MVModelParamManager):
    """A network's parameters in one server table; worker 0's values are the common start."""

    def __init__(self, model, is_master_worker: bool | None = None):
        self.fused = FusedParams(params_of(model))
        super().__init__(model, is_master_worker)

    def get_all_param_values(self) -> list:
        return [np.array(p.get_value()) for p in self.fused.params]

    def set_all_param_values(self, values: list) -> None:
        self.fused.write(np.concatenate([np.asarray(v).ravel() for v in values]).astype(self.fused.dtype))

    def _read_flat(self) -> np.ndarray:
        return np.asarray(self.fused.read(), dtype=np.float32).copy()

    def _write_flat(self, flat: np.ndarray) -> None:
        self.fused.write(flat.astype(self.fused.dtype, copy=False))


class MVNetParamManager(LasagneParamManager):
    """Multiverso's first Lasagne manager: ``MVNetParamManager(network, is_master_worker)``.

    The worker passing ``is_master_worker=True`` gives the start values (default:
    worker 0); ``update_all_param()`` is ``sync_all_param()``.
    """

    def __init__(self, network, is_master_worker: bool | None = None):
        super().__init__(network, is_master_worker)

    def update_all_param(self) -> None:
        """Add the change since the last update to the server, then fetch the server's parameters."""
        self.sync_all_param()
