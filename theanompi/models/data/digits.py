"""scikit-learn's handwritten digits (1,797 8x8 images, 10 classes): real data, no download.

Example
-------
>>> (xt, yt), (xv, yv) = load_digits_split()
>>> xt.shape, xv.shape, xt.dtype, yt.dtype
((1500, 64), (297, 64), dtype('float32'), dtype('int32'))
"""

from __future__ import annotations

import numpy as np

N_VAL = 297  # 1797 = 1500 train + 297 validation


def load_digits_split(flat: bool = True, dtype: str = "float32"):
    """((x_train, y_train), (x_val, y_val)), pixels scaled to [0, 1], a fixed split."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(dtype)
    if not flat:
        x = x.reshape(-1, 1, 8, 8)
    y = bunch.target.astype("int32")
    order = np.random.default_rng(1234).permutation(len(x))
    x, y = x[order], y[order]
    return (x[N_VAL:], y[N_VAL:]), (x[:N_VAL], y[:N_VAL])
