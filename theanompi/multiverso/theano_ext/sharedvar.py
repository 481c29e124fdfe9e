"""``mv_shared``: pytensor shared variables kept in sync through the parameter server.

``mv_shared(...)`` takes ``pytensor.shared``'s arguments and returns that shared
variable with a ``mv_sync()`` method; ``sync_all_mv_shared_vars()`` syncs every
one of the running session (``mv_shared.shared_vars`` lists them).

Example
-------
>>> W = mv_shared(value=np.zeros((784, 10), "float32"), name="W", borrow=True)   # doctest: +SKIP
>>> # train: W changes locally
>>> W.mv_sync()            # add the change since the last sync, then fetch         # doctest: +SKIP
>>> sync_all_mv_shared_vars()                                                        # doctest: +SKIP
"""

from __future__ import annotations

import types

import numpy as np
import pytensor

from theanompi.multiverso import api
from theanompi.multiverso.tables import ArrayTableHandler


def _mv_sync(self) -> None:
    """Add this variable's change since its last sync to the server, then fetch the server's value."""
    current = np.asarray(self.get_value(borrow=True))
    self._mv_table.add((current - self._mv_last).ravel())
    fresh = self._mv_table.get().reshape(current.shape).astype(current.dtype, copy=False)
    self.set_value(fresh)
    self._mv_last = fresh.copy()


def mv_shared(*args, **kwargs):
    """``pytensor.shared(*args, **kwargs)`` plus a server table and a ``.mv_sync()`` method.

    Collective: every worker must create its mv_shared variables in the same order.
    The master's initial value is the common starting point (others fetch it).
    """
    var = pytensor.shared(*args, **kwargs)
    value = np.asarray(var.get_value(borrow=True))
    var._mv_table = ArrayTableHandler(value.size, init_value=value.ravel())
    api.barrier()
    start = var._mv_table.get().reshape(value.shape).astype(value.dtype, copy=False)
    var.set_value(start)
    var._mv_last = start.copy()
    var.mv_sync = types.MethodType(_mv_sync, var)
    mv_shared.shared_vars.append(var)
    return var


# every variable mv_shared made, in creation order (Multiverso's API keeps the list on the function)
mv_shared.shared_vars = []  # type: ignore[attr-defined]


def sync_all_mv_shared_vars() -> None:
    """``mv_sync()`` every variable :func:`mv_shared` made in the running session, in creation order."""
    running = api.session()
    for var in mv_shared.shared_vars:  # type: ignore[attr-defined]
        if var._mv_table._session is running:
            var.mv_sync()
