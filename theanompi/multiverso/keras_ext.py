"""A Keras 3 callback syncing a model's weights every ``freq`` batches (needs the ``keras`` package).

Example
-------
>>> model.fit(x, y, callbacks=[MVCallback(model, freq=1)])   # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from theanompi.multiverso.api import barrier
from theanompi.multiverso.tables import ArrayTableHandler

try:
    import keras
except ImportError:  # the callback is optional: `pip install keras` (and a backend) to use it
    keras = None


def _flat(weights) -> np.ndarray:
    return np.concatenate([np.asarray(w, dtype=np.float32).ravel() for w in weights])


def _unflat(flat: np.ndarray, like) -> list:
    out, start = [], 0
    for w in like:
        size = int(np.prod(np.shape(w)))
        out.append(flat[start:start + size].reshape(np.shape(w)))
        start += size
    return out


class _MVCallbackMixin:
    def _mv_setup(self, model, freq: int):
        if not isinstance(freq, int) or freq < 1:
            raise ValueError(f"freq must be an integer >= 1; got {freq!r}")
        self.mv_model, self.freq, self.batches = model, freq, 0
        weights = model.get_weights()
        self.table = ArrayTableHandler(sum(np.size(w) for w in weights), init_value=_flat(weights))
        barrier()
        self._fetch()

    def _fetch(self):
        values = self.table.get()
        self.mv_model.set_weights(_unflat(values, self.mv_model.get_weights()))
        self.last = values

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches % self.freq == 0:
            self.table.add(_flat(self.mv_model.get_weights()) - self.last)
            self._fetch()


if keras is not None:
    class MVCallback(_MVCallbackMixin, keras.callbacks.Callback):
        """Sync ``model``'s weights with the server every ``freq`` batches."""

        def __init__(self, model, freq: int = 1):
            super().__init__()
            self._mv_setup(model, freq)
else:
    class MVCallback:  # noqa: D101 - a clear error when keras is missing
        def __init__(self, *args, **kwargs):
            raise ImportError("MVCallback needs Keras 3: pip install keras (and one of its backends)")
