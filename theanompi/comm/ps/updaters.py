"""Server-side updaters: how a pushed delta changes a table. Their state persists across pushes.

| name       | rule (d = pushed delta)                                   |
|------------|-----------------------------------------------------------|
| add        | w <- w + d                                                |
| sgd        | w <- w - lr * d                                           |
| momentum   | v <- mu * v + d;  w <- w - lr * v                         |
| adagrad    | h <- h + d**2;    w <- w - lr * d / (sqrt(h) + eps)       |

``lr`` is the table's (ASGD_LR), or the one an add brings (ASGD_LR on the session's LR_SCHEDULE, computed by
the pushing worker for its own progress: :meth:`Updater.apply`'s ``lr``).

Example
-------
>>> import numpy as np
>>> w = np.zeros((2, 1)); up = make_updater("momentum", w.shape, w.dtype, lr=1.0, momentum=0.5)
>>> up.apply(w, np.ones((2, 1))); up.apply(w, np.ones((2, 1))); w.ravel()
array([-2.5, -2.5])
"""

from __future__ import annotations

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.session_options import UPDATER_NAMES

UPDATERS = UPDATER_NAMES  # ASGD_UPDATER's values in the option table; make_updater implements each


class Updater:
    """Applies deltas to (rows of) a 2-D table in place; its state (:attr:`state_names`: arrays of the table's
    shape) is what a checkpoint keeps of it."""

    #: the updater's state arrays, attributes of the table's shape
    state_names: tuple[str, ...] = ()

    def __init__(self, shape, dtype, lr: float = 0.1, momentum: float = 0.9, eps: float = 1e-8):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        self.lr, self.momentum, self.eps = lr, momentum, eps

    def state(self) -> dict[str, np.ndarray]:
        """The state arrays by name (the arrays themselves, not copies)."""
        return {name: getattr(self, name) for name in self.state_names}

    def load_state(self, state: dict[str, np.ndarray]) -> None:
        """Overwrite the state arrays with ``state``'s (ValueError naming one that is missing or of another shape)."""
        for name in self.state_names:
            value = np.asarray(state.get(name))
            if value.shape != self.shape:
                raise ValueError(f"updater state {name!r}: shape {value.shape}, the table's rows {self.shape}")
            getattr(self, name)[...] = value

    def step(self, values: np.ndarray, delta: np.ndarray, rows, lr: float) -> np.ndarray:
        """New values of the addressed rows (``rows`` is a slice or an index array) at learning rate ``lr``."""
        raise NotImplementedError

    def apply(self, table: np.ndarray, delta: np.ndarray, rows=None, lr: float | None = None) -> None:
        """Apply ``delta`` to the addressed rows, at learning rate ``lr`` (a scheduled one), else the table's."""
        rows = slice(None) if rows is None else rows
        table[rows] = self.step(table[rows], delta, rows, self.lr if lr is None else lr)


class AddUpdater(Updater):
    def step(self, values, delta, rows, lr):
        return values + delta


class SGDUpdater(Updater):
    def step(self, values, delta, rows, lr):
        return values - lr * delta


class MomentumUpdater(Updater):
    state_names = ("velocity",)

    def __init__(self, shape, dtype, **kw):
        super().__init__(shape, dtype, **kw)
        self.velocity = np.zeros(self.shape, self.dtype)

    def step(self, values, delta, rows, lr):
        v = self.momentum * self.velocity[rows] + delta
        self.velocity[rows] = v
        return values - lr * v


class AdagradUpdater(Updater):
    state_names = ("sum_sq",)

    def __init__(self, shape, dtype, **kw):
        super().__init__(shape, dtype, **kw)
        self.sum_sq = np.zeros(self.shape, self.dtype)

    def step(self, values, delta, rows, lr):
        h = self.sum_sq[rows] + delta * delta
        self.sum_sq[rows] = h
        return values - lr * delta / (np.sqrt(h) + self.eps)


_CLASSES = {"add": AddUpdater, "sgd": SGDUpdater, "momentum": MomentumUpdater, "adagrad": AdagradUpdater}


def make_updater(name: str, shape, dtype, **hyper) -> Updater:
    """The updater called ``name`` (one of UPDATERS) for a table of ``shape``."""
    try:
        cls = _CLASSES[name]
    except KeyError:
        raise ConfigError(f"updater {name!r} is not allowed; use one of: {', '.join(UPDATERS)}") from None
    return cls(shape, dtype, **hyper)
