"""scikit-learn's handwritten digits (1,797 8x8 images, 10 classes): real data, no download.

The data ship with scikit-learn (``sklearn/datasets/data/digits.csv.gz``); they are read from
there with numpy, because importing ``sklearn`` costs ~1.6 s in every rank (scipy and more).
When the file is not where this scikit-learn keeps it, ``sklearn.datasets.load_digits`` reads it.

Example
-------
>>> (xt, yt), (xv, yv) = load_digits_split()
>>> xt.shape, xv.shape, xt.dtype, yt.dtype
((1500, 64), (297, 64), dtype('float32'), dtype('int32'))
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

N_VAL = 297  # 1797 = 1500 train + 297 validation


def digits_file() -> Path | None:
    """Where the installed scikit-learn keeps the digits (found without importing it), or None."""
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None


def load_digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """(pixels 0..16 as float64, shape (1797, 64); labels as int), as ``sklearn.datasets.load_digits`` gives.

    Example
    -------
    >>> pixels, labels = load_digits_arrays()
    >>> pixels.shape, int(pixels.max()), sorted(set(labels.tolist())) == list(range(10))
    ((1797, 64), 16, True)
    """
    path = digits_file()
    if path is None:
        from sklearn.datasets import load_digits  # noqa: PLC0415 - scikit-learn (~1 s to import): only without the file

        bunch = load_digits()
        return bunch.data, bunch.target
    with gzip.open(path, "rt") as f:
        table = np.loadtxt(f, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


def load_digits_split(flat: bool = True, dtype: str = "float32"):
    """((x_train, y_train), (x_val, y_val)), pixels scaled to [0, 1], a fixed split."""
    pixels, labels = load_digits_arrays()
    x = (pixels / 16.0).astype(dtype)
    if not flat:
        x = x.reshape(-1, 1, 8, 8)
    y = labels.astype("int32")
    order = np.random.default_rng(1234).permutation(len(x))
    x, y = x[order], y[order]
    return (x[N_VAL:], y[N_VAL:]), (x[:N_VAL], y[:N_VAL])
