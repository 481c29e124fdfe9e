"""Keep a whole network's parameters in sync through one server table.

Works with anything that exposes pytensor shared variables: a list of them, an
object with ``params`` (a theanompi ModelClass), or a Lasagne-style layer (its
``get_all_params``).

Example
-------
>>> manager = MVNetParamManager(model.params)    # doctest: +SKIP
>>> ...                                          # train some batches
>>> manager.sync_all_param()                     # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from theanompi.multiverso.api import barrier
from theanompi.multiverso.tables import ArrayTableHandler
from theanompi.params import FusedParams


def _params_of(network) -> list:
    from theanompi.models.layers import Layer, get_all_params

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


class MVNetParamManager:
    """All params fused into one ArrayTable; the master's values are the common start."""

    def __init__(self, network):
        self.fused = FusedParams(_params_of(network))
        self.table = ArrayTableHandler(self.fused.size, init_value=self.fused.read())
        barrier()
        self._fetch()

    def _fetch(self) -> None:
        values = self.table.get().astype(self.fused.dtype, copy=False)
        self.fused.write(values)
        self.last = np.array(values)

    def sync_all_param(self) -> None:
        """Add the change since the last sync to the server, then fetch the server's parameters."""
        self.table.add(self.fused.read() - self.last)
        self._fetch()


LasagneParamManager = MVNetParamManager  # the name Multiverso's Lasagne extension used
