"""LSTMClassifier: an LSTM reads a sequence and classifies it from its last hidden state.

Network::

    sequence (T, F) -> LSTM(num_units) [-> LSTM(num_units) ...] (last step's hidden state)
                    -> dense(n_classes) -> softmax cross-entropy, momentum SGD

Data (``data``): ``digits`` (default, real data): each 8x8 digit image is read
row by row, a sequence of T = 8 steps of F = 8 pixel features, 10 classes;
``synthetic``: ``seq_len`` x ``n_features`` sequences of ``n_classes`` classes
(class mean pattern + noise, :class:`~theanompi.models.data.synthetic.SyntheticData`).

Model options (cfg ``MODEL_*``): ``data``, ``num_units`` (64), ``num_layers``
(1), ``grad_clipping`` (5: clip the gradient flowing into the gates; 0: off),
``seq_len`` (16) and ``n_features`` (8) and ``n_classes`` (10) for synthetic
data, ``train_size``/``val_size`` (0: all), ``batch_size`` (32), ``lr`` (0.1),
``momentum`` (0.9), ``weight_decay`` (0), ``n_epochs`` (20).

cfg::

    RULE=BSP
    MODELFILE=theanompi.models.zoo.lstm
    MODELCLASS=LSTMClassifier
    DEVICES=cpu0,cpu1
    N_EPOCHS=10

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> m = LSTMClassifier(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"num_units": 16}))
>>> m.data.input_shape, L.get_output_shape(m.network)
((8, 8), (None, 10))
"""

from __future__ import annotations

from typing import Any

import pytensor

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import (
    boolean,
    choice,
    int_at_least,
    model_option,
    non_negative_float,
    non_negative_int,
    positive_int,
)
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.image_loaders import subset
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData
from theanompi.models.zoo import LayerClassifier


class LSTMClassifier(LayerClassifier):
    """Sequence classifier: stacked LSTM layers, the last step's hidden state, a dense softmax layer."""

    declared_options = [
        model_option("data", choice("digits", "synthetic"), "digits",
                     "digits (8x8 images read as 8 rows of 8 pixels) or synthetic sequences"),
        model_option("train_size", non_negative_int, 0, "use only the first training sequences (0: all)"),
        model_option("val_size", non_negative_int, 0, "use only the first validation sequences (0: all)"),
        model_option("num_units", positive_int, 64, "hidden units of each LSTM layer"),
        model_option("num_layers", positive_int, 1, "stacked LSTM layers"),
        model_option("grad_clipping", non_negative_float, 5.0, "clip the gradient flowing into the gates (0: off)"),
        model_option("seq_len", positive_int, 16, "steps of a synthetic sequence"),
        model_option("n_features", positive_int, 8, "features of each step of a synthetic sequence"),
        model_option("n_classes", int_at_least(2), 10, "classes of synthetic sequences (digits: 10)"),
        model_option("prefetch", boolean, False, "load the next batch in a background thread"),
    ]
    defaults = {"lr": 0.1, "n_epochs": 20}

    @classmethod
    def check_options(cls, hp: dict[str, Any]) -> None:
        super().check_options(hp)
        if hp["data"] == "digits" and hp["n_classes"] != 10:
            raise ConfigError(f"{cls.__name__}: data=digits has 10 classes; MODEL_N_CLASSES={hp['n_classes']} "
                              "is not allowed")

    def build_data(self):
        hp, c = self.hp, self.config
        floatX = pytensor.config.floatX
        if hp["data"] == "digits":
            (xt, yt), (xv, yv) = load_digits_split(flat=False, dtype=floatX)
            xt, xv = xt.reshape(-1, 8, 8), xv.reshape(-1, 8, 8)  # 8 steps (rows) of 8 features (pixels)
            data = self.shard(*subset(xt, yt, hp["train_size"]), *subset(xv, yv, hp["val_size"]))
        else:
            data = SyntheticData((hp["seq_len"], hp["n_features"]), hp["n_classes"], hp["batch_size"], c.rank,
                                 c.size, c.seed, n_train=hp["train_size"] or 1024, n_val=hp["val_size"] or 256,
                                 dtype=floatX)
        if hp["prefetch"]:
            data = PrefetchData(data)
        return data

    def build_layers(self, net):
        hp = self.hp
        for i in range(1, hp["num_layers"] + 1):
            net = L.LSTMLayer(net, hp["num_units"], grad_clipping=hp["grad_clipping"],
                              only_return_final=i == hp["num_layers"], name=f"lstm{i}")
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, name="fc")
