"""How a server adjusts a stale push before its updater applies it (``ASGD_STALENESS``).

A push from a worker was computed on the parameters that worker last pulled, ``w_bak``; by the
time it arrives the server has applied ``tau`` other pushes (its *staleness*) and holds ``w``.

| mode       | the pushed ``p`` becomes                                       | from                     |
|------------|----------------------------------------------------------------|--------------------------|
| none       | ``p``                                                          | plain ASGD               |
| scale      | ``p / max(1, tau)``                                            | Zhang et al. 2016        |
| compensate | ``p + s * lam0 * p*p / (sqrt(ms) + eps) * (w - w_bak)``         | Zheng et al. 2017        |

``scale`` is the staleness-aware learning rate of Zhang, Gupta, Lian and Liu, "Staleness-aware
Async-SGD for Distributed Deep Learning" (IJCAI 2016): each push's step is divided by its own
staleness. ``compensate`` is the delay compensation of Zheng et al., "Asynchronous Stochastic
Gradient Descent with Delay Compensation" (ICML 2017), in its adaptive form DC-ASGD-a: the
gradient at ``w`` is estimated from the one at ``w_bak`` by a first-order Taylor step whose
Hessian is approximated by ``lam * g*g``, with ``lam = lam0 / sqrt(ms)`` element-wise and ``ms``
the running mean of ``g*g`` (``ms <- m * ms + (1 - m) * g*g``, m = 0.95, updated with each push
before it is used). ``s`` is +1 when the push is a gradient (updaters ``sgd``, ``momentum``,
``adagrad``: the server steps against it) and -1 when it is a parameter change (updater ``add``:
``p = -eta * g``, and the formula, being homogeneous of degree one in ``p``, is the same
compensation whatever ``eta``).

Example
-------
>>> import numpy as np
>>> scale = make_staleness("scale", (2, 1), "float64", descends=False)
>>> scale.adjust(np.ones((2, 1)), slice(None), staleness=4, drift=None).ravel()
array([0.25, 0.25])
>>> dc = make_staleness("compensate", (1, 1), "float64", descends=True, dc_lambda=2.0)
>>> dc.needs_backup, float(dc.adjust(np.array([[1.0]]), slice(None), 3, drift=np.array([[0.5]]))[0, 0])
(True, 5.472...)
"""

from __future__ import annotations

import numpy as np

from theanompi.core.errors import ConfigError
from theanompi.core.session_options import STALENESS_MODES

#: DC-ASGD-a's decay of the running mean square of the pushes (Zheng et al. 2017 use 0.95)
MEAN_SQUARE_DECAY = 0.95


class Staleness:
    """``none``: a push is applied as it is."""

    #: whether the server must keep, per client, the values that client last pulled (``w_bak``)
    needs_backup = False

    def adjust(self, push: np.ndarray, rows, staleness: int, drift: np.ndarray | None) -> np.ndarray:
        """The push to hand the updater. ``rows`` addresses the table rows it covers (a slice or an index
        array), ``staleness`` counts the server updates since its sender's pull, ``drift`` is ``w - w_bak`` on
        those rows (None unless :attr:`needs_backup`)."""
        return push


class ScaledStaleness(Staleness):
    """``scale``: the push divided by its staleness (by 1 when fresh)."""

    def adjust(self, push, rows, staleness, drift):
        if staleness <= 1:
            return push
        return push * np.asarray(1.0 / staleness, dtype=push.dtype)


class CompensatedStaleness(Staleness):
    """``compensate``: DC-ASGD-a's first-order correction towards the server's current values."""

    needs_backup = True

    def __init__(self, shape, dtype, descends: bool, dc_lambda: float, eps: float = 1e-8):
        self.sign = 1.0 if descends else -1.0
        self.dc_lambda, self.eps = dc_lambda, eps
        self.mean_square = np.zeros(tuple(shape), np.dtype(dtype))

    def adjust(self, push, rows, staleness, drift):
        square = push * push
        ms = MEAN_SQUARE_DECAY * self.mean_square[rows] + (1.0 - MEAN_SQUARE_DECAY) * square
        self.mean_square[rows] = ms
        if drift is None:
            return push
        gain = (self.sign * self.dc_lambda) * square / (np.sqrt(ms) + self.eps)
        return (push + gain * drift).astype(push.dtype, copy=False)


def make_staleness(mode: str, shape, dtype, descends: bool, dc_lambda: float = 2.0) -> Staleness:
    """The staleness handling ``mode`` (one of STALENESS_MODES) of a table (or shard) of ``shape``.
    ``descends``: pushes are gradients the server steps against (not parameter changes it adds)."""
    if mode == "none":
        return Staleness()
    if mode == "scale":
        return ScaledStaleness()
    if mode == "compensate":
        return CompensatedStaleness(shape, dtype, descends, dc_lambda)
    raise ConfigError(f"staleness {mode!r} is not allowed; use one of: {', '.join(STALENESS_MODES)}")
