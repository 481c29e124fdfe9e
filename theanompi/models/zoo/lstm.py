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
from theanompi.core.options import predicate_parser
from theanompi.models.base import ClassifierModel
from theanompi.models.data.digits import load_digits_split
from theanompi.models.data.prefetch import PrefetchData
from theanompi.models.data.synthetic import SyntheticData
from theanompi.models.zoo import ImageClassifier, ImageDataOptions, choice_check, is_int, is_number, subset


class LSTMClassifier(ImageClassifier):
    """Sequence classifier: stacked LSTM layers, the last step's hidden state, a dense softmax layer."""

    defaults = {**ClassifierModel.defaults, "data": "digits", "train_size": 0, "val_size": 0, "num_units": 64,
                "num_layers": 1, "grad_clipping": 5.0, "seq_len": 16, "n_features": 8, "n_classes": 10,
                "prefetch": False, "lr": 0.1, "n_epochs": 20}
    checks = {"data": choice_check("digits", "synthetic"),
              "train_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
              "val_size": predicate_parser(lambda v: is_int(v, 0), "an integer >= 0 (0: all)"),
              "num_units": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
              "num_layers": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
              "grad_clipping": predicate_parser(lambda v: is_number(v), "a number >= 0 (0: off)"),
              "seq_len": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
              "n_features": predicate_parser(lambda v: is_int(v, 1), "an integer >= 1"),
              "n_classes": predicate_parser(lambda v: is_int(v, 2), "an integer >= 2"),
              "prefetch": predicate_parser(lambda v: isinstance(v, bool), "true or false")}
    data_choices = ("digits", "synthetic")

    @classmethod
    def validate_options(cls, model_options: dict[str, Any]) -> dict[str, Any]:
        hp = super(ImageDataOptions, cls).validate_options(model_options)  # ClassifierModel's (not the data check)
        if hp["data"] == "digits" and hp["n_classes"] != 10:
            raise ConfigError(f"{cls.__name__}: data=digits has 10 classes; MODEL_N_CLASSES={hp['n_classes']} "
                              "is not allowed")
        return hp

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

    def lr_multiplier(self, epoch_progress: float) -> float:
        return ClassifierModel.lr_multiplier(self, epoch_progress)
