"""MLP on scikit-learn's digits: the default session's model.

Model options (cfg ``MODEL_*``): ``hidden`` (int or "256,128"), ``batch_size``,
``lr``, ``momentum``, ``weight_decay``, ``n_epochs``.

Example
-------
>>> from theanompi import BSP
>>> BSP().init(devices=["cpu0", "cpu1"], modelfile="theanompi.models.mlp", modelclass="MLP",
...            model_options={"hidden": 128}).wait()     # doctest: +SKIP
0
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.core.options import InvalidValue, model_option
from theanompi.models.base import ClassifierModel
from theanompi.models.data.digits import load_digits_split


def parse_hidden(value) -> tuple[int, ...]:
    """``256`` or ``"256,128"`` -> (256,) / (256, 128)."""
    items = str(value).split(",") if not isinstance(value, (list, tuple)) else value
    sizes = tuple(int(str(v).strip()) for v in items)
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(value)
    return sizes


def hidden_sizes(value):
    """The ``hidden`` option's parser: the value as given, when :func:`parse_hidden` reads it."""
    try:
        parse_hidden(value)
    except (ValueError, TypeError):
        raise InvalidValue("use a positive int or a comma list such as '256,128'") from None
    return value


class MLP(ClassifierModel):
    """Fully connected ReLU network, He-initialised, softmax output."""

    declared_options = [model_option("hidden", hidden_sizes, 256, "units of the hidden layers, e.g. 256 or 256,128")]
    defaults = {"lr": 0.05, "n_epochs": 20}

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split(dtype=pytensor.config.floatX)
        return self.shard(xt, yt, xv, yv)

    def build_network(self, x, rng):
        sizes = (self.data.x_train.shape[1],) + parse_hidden(self.hp["hidden"]) + (10,)
        params, h = [], x
        for i, (n_in, n_out) in enumerate(zip(sizes, sizes[1:])):
            he_normal = rng.standard_normal((n_in, n_out)) * np.sqrt(2.0 / n_in)
            W = pytensor.shared(he_normal.astype(self.floatX), name=f"W{i}")
            b = pytensor.shared(np.zeros(n_out, dtype=self.floatX), name=f"b{i}")
            params += [W, b]
            h = h @ W + b
            if i < len(sizes) - 2:
                h = pt.maximum(h, 0)
        return params, h
