"""``mv_shared``: pytensor shared variables kept in sync through the parameter server.

As in Multiverso, ``mv_shared(...)`` takes ``pytensor.shared``'s arguments and returns that shared
variable, plain, while an :class:`MVSharedVariable` beside it (in ``mv_shared.shared_vars``) holds its
server table and the value of its last sync; ``sync_all_mv_shared_vars()`` syncs every variable of the
running session. So a model holding such variables pickles as a model of plain shared variables (what
Multiverso's logistic-regression example saves), and an :class:`MVSharedVariable` pickles without its
table, as Multiverso's did.

Example
-------
>>> W = mv_shared(value=np.zeros((784, 10), "float32"), name="W", borrow=True)   # doctest: +SKIP
>>> # train: W changes locally
>>> sync_all_mv_shared_vars()      # add each change since the last sync, then fetch   # doctest: +SKIP
>>> mv_shared.shared_vars[0].mv_sync()                # one variable                      # doctest: +SKIP
>>> pickle.loads(pickle.dumps(W)).get_value().shape   # a plain shared variable         # doctest: +SKIP
(784, 10)
"""

from __future__ import annotations

import numpy as np
import pytensor

from theanompi.multiverso import api
from theanompi.multiverso.tables import ArrayTableHandler


class MVSharedVariable:
    """A shared variable's server table (Multiverso's wrapper): ``mv_sync()`` adds the variable's change since
    its last sync to the table, then sets the variable to the table's value.

    Collective at construction: every worker creates its variables in the same order; the master's value is
    the common start (the others fetch it). Pickling keeps the variable and its last synced value, not the
    table (a connection to the running session).
    """

    def __init__(self, svobj) -> None:
        value = np.asarray(svobj.get_value(borrow=True))
        self._svobj = svobj
        self._mv_array: ArrayTableHandler | None = ArrayTableHandler(value.size, init_value=value.ravel())
        api.barrier()
        start = self._mv_array.get().reshape(value.shape).astype(value.dtype, copy=False)
        svobj.set_value(start)
        self._last_mv_data = start.copy()

    @property
    def variable(self):
        """The shared variable."""
        return self._svobj

    def mv_sync(self) -> None:
        """Add the variable's change since its last sync to the server, then fetch the server's value."""
        if self._mv_array is None:
            raise RuntimeError(f"mv_sync(): {self._svobj.name or 'this variable'} was unpickled; its server table "
                               "is not pickled with it (create it with mv_shared in the running session)")
        current = np.asarray(self._svobj.get_value(borrow=True))
        self._mv_array.add((current - self._last_mv_data).ravel())
        fresh = self._mv_array.get().reshape(current.shape).astype(current.dtype, copy=False)
        self._svobj.set_value(fresh)
        self._last_mv_data = fresh.copy()

    def in_session(self, running) -> bool:
        """Whether this variable's table belongs to the session ``running``."""
        return self._mv_array is not None and self._mv_array._session is running

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_mv_array"] = None  # the table is a connection to the running session: not pickled
        return state


def mv_shared(*args, **kwargs):
    """``pytensor.shared(*args, **kwargs)``, its table kept in :attr:`mv_shared.shared_vars` (collective).

    Returns the plain shared variable, as Multiverso's did.
    """
    var = pytensor.shared(*args, **kwargs)
    mv_shared.shared_vars.append(MVSharedVariable(var))
    return var


# every variable mv_shared made (its MVSharedVariable), in creation order (Multiverso keeps the list on the function)
mv_shared.shared_vars = []  # type: ignore[attr-defined]


def sync_all_mv_shared_vars() -> None:
    """``mv_sync()`` every variable :func:`mv_shared` made in the running session, in creation order."""
    running = api.session()
    for wrapper in mv_shared.shared_vars:  # type: ignore[attr-defined]
        if wrapper.in_session(running):
            wrapper.mv_sync()
