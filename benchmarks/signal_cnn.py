"""Noisy sinusoids of 8 frequencies: a 1-D signal classification set with a known ceiling, and its CNN.

Sample ``i`` is ``sin(2 pi f_y t / length + phase) + noise * N(0, 1)`` for t = 0..length-1, with
its class ``y`` uniform over ``n_classes``, ``f_y = 4 + y`` cycles per window and ``phase`` uniform
in [0, 2 pi). Nothing but the frequency tells the classes apart, under noise and an unknown phase.

The ceiling is known: the Bayes-optimal classifier, which knows how the samples were made,
scores each class by its likelihood integrated over the phase (:func:`bayes_predict`, a bank of
matched filters); no classifier does better on average. At the defaults (noise 2.0, 128 samples
a window) it scores 96.3 % on the 4,000 validation signals, and a small CNN about 94 % after 30
epochs: between them and below, there is room to tell a rule that learns well from one that does
not, which the digits (about 98 % for every rule) don't.

``SignalCNN`` (``MODELFILE=benchmarks/signal_cnn.py``, ``MODELCLASS=SignalCNN``): the signals
scaled to unit variance, three conv(1 x ``kernel``)+ReLU+maxpool(1x2) stages (widths ``widths``),
global average pooling (``global_pool``), a dense layer; momentum SGD (lr 0.02, momentum 0.9,
batch 32) whose learning rate drops tenfold at epoch ``decay_epoch`` (20). Model options (cfg
``MODEL_*``): ``n_train``, ``n_val``, ``noise``, ``widths``, ``kernel``, ``global_pool``,
``decay_epoch``, and ClassifierModel's ``batch_size``, ``lr``, ``momentum``, ``weight_decay``,
``n_epochs``.

Example
-------
>>> (x, y), _ = make_signals(n_train=400, n_val=0, seed=1)
>>> x.shape, x.dtype, sorted(set(y.tolist())) == list(range(N_CLASSES))
((400, 1, 1, 128), dtype('float32'), True)
>>> round(float((bayes_predict(x) == y).mean()), 2)
0.94
"""

from __future__ import annotations

import numpy as np
import pytensor

import theanompi.nn as L
from theanompi.core.options import (
    boolean,
    choice,
    int_list,
    model_option,
    non_negative_int,
    positive_float,
    positive_int,
    predicate_parser,
)
from theanompi.models.base import ClassifierModel

N_CLASSES = 8
LENGTH = 128
FIRST_FREQUENCY = 4  # cycles per window of class 0; class k has FIRST_FREQUENCY + k


def frequencies(n_classes: int = N_CLASSES) -> np.ndarray:
    """Cycles per window of each class."""
    return FIRST_FREQUENCY + np.arange(n_classes, dtype=np.float64)


def _draw(n: int, noise: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    labels = rng.integers(0, N_CLASSES, n)
    phase = rng.uniform(0.0, 2 * np.pi, n)
    t = np.arange(LENGTH)
    clean = np.sin(2 * np.pi * frequencies()[labels][:, None] * t / LENGTH + phase[:, None])
    x = clean + noise * rng.standard_normal((n, LENGTH))
    return x.astype(np.float32).reshape(n, 1, 1, LENGTH), labels.astype(np.int32)


def make_signals(n_train: int = 8000, n_val: int = 4000, noise: float = 2.0, seed: int = 0):
    """((x_train, y_train), (x_val, y_val)); x of shape (n, 1, 1, LENGTH), the same for every rank."""
    rng = np.random.default_rng(seed)
    return _draw(n_train, noise, rng), _draw(n_val, noise, rng)


def bayes_predict(x: np.ndarray, noise: float = 2.0, phases: int = 256) -> np.ndarray:
    """The Bayes-optimal class of each signal: argmax over classes of the likelihood averaged over the phase
    (``phases`` equally spaced phases; classes are equally likely)."""
    signals = np.asarray(x, dtype=np.float64).reshape(len(x), LENGTH)
    t = np.arange(LENGTH)
    grid = 2 * np.pi * np.arange(phases) / phases
    scores = []
    for f in frequencies():
        templates = np.sin(2 * np.pi * f * t[None, :] / LENGTH + grid[:, None])  # (phases, LENGTH)
        log_lik = (signals @ templates.T - 0.5 * (templates * templates).sum(1)) / noise ** 2
        peak = log_lik.max(axis=1, keepdims=True)
        scores.append(peak[:, 0] + np.log(np.exp(log_lik - peak).mean(axis=1)))
    return np.argmax(np.stack(scores, axis=1), axis=1)


class SignalCNN(ClassifierModel):
    """(conv(1 x kernel)-relu-pool) x3, global average pool, dense(8), He-initialised; momentum SGD, one decay."""

    declared_options = [
        model_option("n_train", positive_int, 8000, "training signals"),
        model_option("n_val", positive_int, 4000, "validation signals"),
        model_option("noise", positive_float, 2.0, "standard deviation of the white noise added to each sinusoid"),
        model_option("widths", int_list(length=3), "16,32,32", "channels of the three convolutions"),
        model_option("n_classes", choice(N_CLASSES), N_CLASSES, "classes (frequencies)"),
        model_option("kernel", predicate_parser(lambda v: isinstance(v, int) and not isinstance(v, bool)
                                                and v >= 1 and v % 2 == 1, "an odd integer >= 1"),
                     15, "width of each convolution"),
        model_option("decay_epoch", non_negative_int, 20,
                     "epoch (from 0) from which the learning rate is a tenth (0: no decay)"),
        model_option("global_pool", boolean, True, "global average pooling before the dense layer"),
    ]
    defaults = {"lr": 0.02, "n_epochs": 30}

    @property
    def own_lr_schedule(self) -> str | None:
        """The tenfold drop at ``decay_epoch`` is this model's own schedule; with ``decay_epoch=0`` it follows the
        session's (LR_SCHEDULE)."""
        decay = self.hp["decay_epoch"]
        return f"MODEL_DECAY_EPOCH={decay}" if decay else None

    def lr_multiplier(self, epoch_progress: float) -> float:
        """The learning rate drops tenfold from epoch ``decay_epoch`` on (counted from 0; 0: never)."""
        decay = self.hp["decay_epoch"]
        drop = 0.1 if decay and epoch_progress >= decay else 1.0
        return drop * super().lr_multiplier(epoch_progress)

    def build_data(self):
        # the data's seed is fixed: every session (and every SEED) sees the same set
        noise = float(self.hp["noise"])
        (xt, yt), (xv, yv) = make_signals(self.hp["n_train"], self.hp["n_val"], noise)
        scale = 1.0 / np.sqrt(0.5 + noise ** 2)  # unit variance: a sinusoid's 1/2 plus the noise's
        return self.shard((xt * scale).astype(pytensor.config.floatX), yt, (xv * scale).astype(pytensor.config.floatX),
                          yv)

    def build_network(self, x, rng):
        L.init.set_rng(rng)
        net = L.InputLayer((None, 1, 1, LENGTH), input_var=x)
        for i, width in enumerate(int(s) for s in str(self.hp["widths"]).split(",")):
            k = self.hp["kernel"]
            net = L.Conv2DLayer(net, width, (1, k), pad=(0, k // 2), W=L.init.HeNormal("relu"), name=f"conv{i + 1}")
            net = L.MaxPool2DLayer(net, (1, 2), name=f"pool{i + 1}")
        if self.hp["global_pool"]:
            net = L.GlobalPoolLayer(net, name="gap")
        net = L.DenseLayer(net, N_CLASSES, nonlinearity=None, name="fc")
        self.network = net
        return L.get_all_params(net, trainable=True), L.get_output(net)
