"""``MVModelParamManager``: a whole model's parameters kept in sync through one server table.

A subclass says how to read and write the model's values
(``get_all_param_values()`` / ``set_all_param_values(values)``, lists of arrays);
the manager flattens them into one float32 ArrayTable. Construction is collective:
one worker's values (the master's unless told otherwise) become every worker's start.

Example
-------
>>> class ListManager(MVModelParamManager):            # a "model" that is a list of arrays
...     def get_all_param_values(self):
...         return self.model
...     def set_all_param_values(self, values):
...         self.model[:] = [np.array(v) for v in values]
>>> manager = ListManager([np.zeros(3), np.ones((2, 2))])  # doctest: +SKIP
>>> manager.sync_all_param()                               # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from theanompi.multiverso import api
from theanompi.multiverso.tables import ArrayTableHandler


class MVModelParamManager:
    """All of ``model``'s parameters in one ArrayTable (collective constructor).

    Parameters
    ----------
    model : object
        Whatever the subclass's ``get_all_param_values``/``set_all_param_values`` work on.
    is_master_worker : bool, optional
        Whether this worker's values become the common start (default: worker 0's do);
        exactly one worker should pass True.
    """

    def __init__(self, model, is_master_worker: bool | None = None):
        self.model = model
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: list[np.dtype] = []
        flat = self._read_flat()
        self.table = ArrayTableHandler(flat.size)
        if api.is_master_worker() if is_master_worker is None else is_master_worker:
            self.table._table_set(self.table._shaped(flat, None, "parameter values"))  # overwrite, not add
        api.barrier()
        self._fetch()

    def get_all_param_values(self) -> list:
        """The model's parameter values, a list of arrays (subclasses say how)."""
        raise NotImplementedError(f"{type(self).__name__} must define get_all_param_values()")

    def set_all_param_values(self, values: list) -> None:
        """Set the model's parameters from a list of arrays shaped like ``get_all_param_values()``."""
        raise NotImplementedError(f"{type(self).__name__} must define set_all_param_values()")

    def _read_flat(self) -> np.ndarray:
        values = [np.asarray(v) for v in self.get_all_param_values()]
        self.shapes, self.dtypes = [v.shape for v in values], [v.dtype for v in values]
        return np.concatenate([v.ravel() for v in values]).astype(np.float32)

    def _write_flat(self, flat: np.ndarray) -> None:
        values, start = [], 0
        for shape, dtype in zip(self.shapes, self.dtypes):
            size = int(np.prod(shape))
            values.append(flat[start:start + size].reshape(shape).astype(dtype, copy=False))
            start += size
        self.set_all_param_values(values)

    def _fetch(self) -> None:
        self.last = self.table.get()
        self._write_flat(self.last)

    def sync_all_param(self) -> None:
        """Add the change since the last sync to the server, then fetch the server's parameters."""
        self.table.add(self._read_flat() - self.last)
        self._fetch()
