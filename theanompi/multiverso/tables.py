"""Multiverso's table handlers: ArrayTableHandler and MatrixTableHandler.

Values are float32 on the server. ``add``/``get`` accept numpy arrays, PyTorch
CPU tensors and any DLPack or buffer-protocol array; ``get`` returns numpy.

Example (under ``mpiexec -n 2``)
-------
>>> t = MatrixTableHandler(3, 2, init_value=np.zeros((3, 2)))     # doctest: +SKIP
>>> t.add(np.ones((1, 2)), row_ids=[2]); mv.barrier()              # doctest: +SKIP
>>> t.get(row_ids=[2])                                             # doctest: +SKIP
array([[2., 2.]], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from theanompi.comm.ps.updaters import UPDATERS
from theanompi.multiverso import api
from theanompi.multiverso.api import session

DTYPE = np.float32


def as_numpy(data, what: str = "data") -> np.ndarray:
    """numpy view/copy of ``data`` (numpy, PyTorch CPU tensor, DLPack, buffer protocol, nested lists)."""
    if isinstance(data, np.ndarray):
        array = data
    elif hasattr(data, "__dlpack__"):
        detach = getattr(data, "detach", None)  # torch tensors that require grad refuse DLPack export
        array = np.from_dlpack(detach() if callable(detach) else data)
    else:
        try:
            array = np.asarray(memoryview(data))
        except TypeError:
            array = np.asarray(data)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{what} must be numeric; got dtype {array.dtype}")
    return array


class _TableHandler:
    def __init__(self, num_row: int, num_col: int, init_value, updater: str | None):
        for name, value in (("rows", num_row), ("columns", num_col)):
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"table {name} must be a positive integer; got {value!r}")
        s = session()
        updater = updater or s.updater
        if updater not in UPDATERS:
            raise ValueError(f"updater={updater!r} is not allowed; use one of: {', '.join(UPDATERS)}")
        self.num_row, self.num_col = int(num_row), int(num_col)
        self._session = s
        self._table = s.client.create_table(s.new_table_id(), self.num_row, self.num_col, DTYPE, updater,
                                            lr=s.lr, momentum=s.momentum)
        if init_value is not None and s.comm.rank == 0:  # master initialisation
            self._table_set(self._shaped(init_value, None, "init_value"))

    def _check(self):
        if api._state is not self._session:
            raise RuntimeError("this table belongs to a multiverso session that was shut down")

    def _shaped(self, data, row_ids, what) -> np.ndarray:
        array = as_numpy(data, what)
        rows = self.num_row if row_ids is None else len(row_ids)
        if array.size != rows * self.num_col:
            raise ValueError(f"{what} has {array.size} values; the table expects {rows * self.num_col} "
                             f"({rows} rows x {self.num_col} columns)")
        return array.reshape(rows, self.num_col).astype(DTYPE, copy=False)

    def _table_set(self, values) -> None:
        self._session.client.set(self._table, values)

    def _add(self, data, row_ids, sync: bool) -> None:
        self._check()
        rows = None if row_ids is None else np.asarray(row_ids, dtype=np.int64).ravel()
        self._session.client.add(self._table, self._shaped(data, rows, "data"), rows=rows, sync=sync)

    def _get(self, row_ids) -> np.ndarray:
        self._check()
        rows = None if row_ids is None else np.asarray(row_ids, dtype=np.int64).ravel()
        return self._session.client.get(self._table, rows=rows)


class ArrayTableHandler(_TableHandler):
    """A 1-D table of ``size`` float32 values; only the master's ``init_value`` lands on the server."""

    def __init__(self, size: int, init_value=None, updater: str | None = None):
        super().__init__(size, 1, init_value, updater)
        self.size = self.num_row

    def add(self, data, sync: bool = False) -> None:
        """Add ``data`` (size values) through the table's updater."""
        self._add(data, None, sync)

    def get(self) -> np.ndarray:
        """The whole table as a 1-D float32 array."""
        return self._get(None).reshape(self.size)


class MatrixTableHandler(_TableHandler):
    """A (num_row, num_col) float32 table with whole-table or row-wise add/get."""

    def __init__(self, num_row: int, num_col: int, init_value=None, updater: str | None = None):
        super().__init__(num_row, num_col, init_value, updater)

    def add(self, data, row_ids=None, sync: bool = False) -> None:
        """Add ``data`` to all rows, or to ``row_ids`` (data has len(row_ids) rows)."""
        self._add(data, row_ids, sync)

    def get(self, row_ids=None) -> np.ndarray:
        """All rows, or the rows ``row_ids`` in the order given, as a 2-D float32 array."""
        return self._get(row_ids)
