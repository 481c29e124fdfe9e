"""``MVCallback``: a Keras 3 callback syncing a model's weights every ``freq`` batches.

Needs Keras 3 and a backend (``pip install keras``; ``KERAS_BACKEND=torch`` or ``jax``).

Example
-------
>>> model.fit(x, y, callbacks=[MVCallback(model, freq=1)])   # doctest: +SKIP
"""

from __future__ import annotations

from theanompi.multiverso.theano_ext.keras_ext.param_manager import KerasParamManager

try:
    from keras.callbacks import Callback
except ImportError as err:  # keras missing, or no backend importable (KERAS_BACKEND)
    raise ImportError(f"MVCallback needs Keras 3 with a backend (pip install keras; KERAS_BACKEND=torch|jax): "
                      f"{err}") from err


class MVCallback(Callback):
    """Sync ``model``'s weights with the server every ``freq`` batches (collective constructor:
    worker 0's weights become every worker's start)."""

    def __init__(self, model, freq: int = 1):
        super().__init__()
        if not isinstance(freq, int) or isinstance(freq, bool) or freq < 1:
            raise ValueError(f"freq must be an integer >= 1; got {freq!r}")
        self.freq, self.batches = freq, 0
        self.kpm = KerasParamManager(model)

    def on_batch_end(self, batch, logs=None) -> None:
        """Keras calls this after every training batch; every ``freq``-th one syncs."""
        self.batches += 1
        if self.batches % self.freq == 0:
            self.kpm.sync_all_param()
