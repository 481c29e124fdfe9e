"""One server's rows of one table: the values, the updater and staleness handling that change them, the version.

A :class:`TableShard` knows nothing of MPI: :class:`theanompi.comm.ps.server.TableServer` receives the
requests and hands the shard what to apply (:meth:`TableShard.add`, :meth:`TableShard.set`) and what to
answer (:meth:`TableShard.pulled`).

Example
-------
>>> import numpy as np
>>> shard = TableShard.create(0, num_row=4, num_col=1, dtype="float64", start=0, stop=2, updater="add",
...                           staleness="scale")
>>> _ = shard.pulled(client=1, rows=None); _ = shard.pulled(client=2, rows=None)
>>> shard.add(client=2, rows=None, push=np.ones((2, 1)), base_version=0)  # fresh: applied whole
0
>>> shard.add(client=1, rows=None, push=np.ones((2, 1)), base_version=0)  # one update late: still whole
1
>>> shard.add(client=2, rows=None, push=np.ones((2, 1)), base_version=0)  # two late: halved
2
>>> shard.values.ravel(), shard.version
(array([2.5, 2.5]), 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from theanompi.comm.params_ema import ema_step
from theanompi.comm.ps.staleness import make_staleness
from theanompi.comm.ps.updaters import make_updater


@dataclass
class TableShard:
    """This server's rows [start, stop) of one table."""

    table_id: int
    num_row: int
    num_col: int
    dtype: np.dtype
    start: int
    stop: int
    updater_name: str
    staleness_name: str = "none"
    values: Any = None  # the rows' np.ndarray, and below their Updater and Staleness: made by create()
    version: int = 0  # writes applied
    updater: Any = None
    staleness: Any = None
    backups: dict = field(default_factory=dict)  # client -> the values it last pulled (staleness.needs_backup)
    average: Any = None  # the rows' moving average (float64; AVERAGE_WEIGHTS=ema), once an add or a set asked for it
    gets: dict = field(default_factory=dict)  # client -> gets answered (sync rounds)
    waiting: dict = field(default_factory=dict)  # client -> (n_rows, local rows) of a pending sync get

    @classmethod
    def create(cls, table_id: int, num_row: int, num_col: int, dtype, start: int, stop: int, updater: str,
               staleness: str = "none", lr: float = 0.1, momentum: float = 0.9, eps: float = 1e-8,
               dc_lambda: float = 2.0) -> TableShard:
        """A shard of zeros with its updater and staleness handling (their state starts empty)."""
        dtype = np.dtype(dtype)
        shard = cls(table_id, num_row, num_col, dtype, start, stop, updater, staleness)
        shard.values = np.zeros((stop - start, num_col), dtype=dtype)
        shard.updater = make_updater(updater, shard.values.shape, dtype, lr=lr, momentum=momentum, eps=eps)
        shard.staleness = make_staleness(staleness, shard.values.shape, dtype, descends=updater != "add",
                                         dc_lambda=dc_lambda)
        return shard

    def describe(self) -> str:
        return f"({self.num_row}, {self.num_col}) {self.dtype} updater={self.updater_name} " \
               f"staleness={self.staleness_name}"

    def same_table(self, other: TableShard) -> bool:
        """Whether ``other`` asks for this table as it exists (shape, dtype, updater, staleness)."""
        mine = (self.num_row, self.num_col, self.dtype, self.updater_name, self.staleness_name)
        return mine == (other.num_row, other.num_col, other.dtype, other.updater_name, other.staleness_name)

    def set(self, rows, data: np.ndarray) -> None:
        """Overwrite the addressed rows (``rows``: local row ids, or None for all)."""
        self.values[slice(None) if rows is None else rows] = data
        self.version += 1

    def add(self, client: int, rows, push: np.ndarray, base_version: int, lr: float | None = None,
            decay: float | None = None) -> int:
        """Apply ``client``'s push, computed on this shard's version ``base_version``, at learning rate ``lr`` (the
        updater's own when None); with ``decay``, fold the new values into the moving average. Returns the push's
        staleness (the writes applied since), by which the staleness handling adjusted it."""
        staleness = self.version - base_version
        where = slice(None) if rows is None else rows
        backup = self.backups.get(client)
        drift = None if backup is None else self.values[where] - backup[where]
        self.updater.apply(self.values, self.staleness.adjust(push, where, staleness, drift), rows, lr=lr)
        if decay is not None:
            self.fold_into_average(where, decay)
        self.version += 1
        return staleness

    def fold_into_average(self, where, decay: float) -> None:
        """``average <- decay * average + (1 - decay) * values`` on the addressed rows (it starts at the values)."""
        if self.average is None:
            self.average = self.values.astype(np.float64)
            return
        self.average[where] = ema_step(self.average[where], self.values[where], decay)

    def set_average(self, rows, data: np.ndarray) -> None:
        """Overwrite the moving average of the addressed rows (a session's start, or a resumed checkpoint's)."""
        if self.average is None:
            self.average = self.values.astype(np.float64)
        self.average[slice(None) if rows is None else rows] = data

    def pulled_average(self, rows) -> np.ndarray:
        """The moving average of the addressed rows in the table's dtype (the values where there is none yet)."""
        source = self.values if self.average is None else self.average
        return np.ascontiguousarray(source[slice(None) if rows is None else rows], dtype=self.dtype)

    def pulled(self, client: int, rows) -> np.ndarray:
        """The addressed rows for ``client``'s get (remembered as what it computes on, where needed)."""
        data = self.values if rows is None else np.ascontiguousarray(self.values[rows])
        if self.staleness.needs_backup:
            backup = self.backups.setdefault(client, self.values.copy())
            backup[slice(None) if rows is None else rows] = data
        return data
