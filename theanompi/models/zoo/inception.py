"""GoogLeNet (Szegedy et al., "Going Deeper with Convolutions", 2015) with its two auxiliary classifiers.

Network (``width`` 1.0: the paper's table 1; inception ``(1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool proj)``)::

    crop (3, 224, 224) -> conv7x7/2(64) -> maxpool 3/2 -> LRN -> conv1x1(64) -> conv3x3(192) -> LRN -> maxpool 3/2
        -> inception 3a (64, 96, 128, 16, 32, 32) -> 3b (128, 128, 192, 32, 96, 64) -> maxpool 3/2
        -> 4a (192, 96, 208, 16, 48, 64) -> [aux 1] -> 4b (160, 112, 224, 24, 64, 64) -> 4c (128, 128, 256, 24, 64, 64)
        -> 4d (112, 144, 288, 32, 64, 64) -> [aux 2] -> 4e (256, 160, 320, 32, 128, 128) -> maxpool 3/2
        -> 5a (256, 160, 320, 32, 128, 128) -> 5b (384, 192, 384, 48, 128, 128)
        -> global average pool -> dropout 0.4 -> fc(n_classes)

    aux: average pool 5/3 -> conv1x1(128) -> fc(1024) -> dropout 0.7 -> fc(n_classes)

Every convolution has a ReLU; the inception module concatenates its four branches (1x1; 1x1 then 3x3; 1x1
then 5x5; 3x3/1 max pool then 1x1). Training minimises the main classifier's cross-entropy plus
``aux_weight`` (0.3, the paper's) times each auxiliary classifier's; validation and the reported
error use the main classifier alone (the auxiliary towers are dropped at inference, as in the paper).

``width`` scales every layer's channel count (``0.125``: an eighth, for tests and CPU benchmarks);
``stem=small`` (``auto`` for inputs under 64 pixels) replaces the first convolution and its pool by one
3x3 stride-1 convolution, so 32x32 images reach inception 4a at 8x8 (the auxiliary pool then still fits;
where a map is smaller than 5x5 the auxiliary tower pools it globally).

Model options (cfg ``MODEL_*``): ``width`` (1.0), ``stem`` (``auto``/``imagenet``/``small``),
``aux_weight`` (0.3), ``dropout`` (0.4), ``n_classes`` (1000), ``input_size`` (224), the data options of
:mod:`theanompi.models.data.image_options` (``data`` = ``hickle`` (default) or ``synthetic``), ``batch_size``
(32), ``lr`` (0.01), ``momentum`` (0.9), ``weight_decay`` (0.0002), ``n_epochs`` (90), ``lr_decay_epochs``
(``"30,60,80"``), ``prefetch`` (true).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> opts = {"data": "synthetic", "input_size": 32, "n_classes": 5, "width": 0.125, "train_size": 8, "val_size": 4}
>>> m = GoogLeNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=opts))
>>> [L.get_output_shape(layer) for layer in m.outputs], m.stem
([(None, 5), (None, 5), (None, 5)], 'small')
>>> m.inception_widths["3a"], L.get_output_shape(m.layer("4a"))
((8, 12, 16, 2, 4, 4), (None, 64, 8, 8))
"""

from __future__ import annotations

import pytensor.tensor as pt

import theanompi.nn as L
from theanompi.core.errors import ConfigError
from theanompi.core.options import InvalidValue, choice, model_option, non_negative_float, positive_float, unit_interval
from theanompi.models.zoo import BatchSizedConcat, ImageClassifier

#: The paper's inception modules: (1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection).
INCEPTIONS = {
    "3a": (64, 96, 128, 16, 32, 32), "3b": (128, 128, 192, 32, 96, 64),
    "4a": (192, 96, 208, 16, 48, 64), "4b": (160, 112, 224, 24, 64, 64), "4c": (128, 128, 256, 24, 64, 64),
    "4d": (112, 144, 288, 32, 64, 64), "4e": (256, 160, 320, 32, 128, 128),
    "5a": (256, 160, 320, 32, 128, 128), "5b": (384, 192, 384, 48, 128, 128),
}
#: where the auxiliary classifiers branch off
AUX_AFTER = ("4a", "4d")


def width_scale(value) -> float:
    """The ``width`` option's parser: a factor in (0, 4] of the paper's channel counts."""
    try:
        scale = positive_float(value)
    except InvalidValue:
        scale = 0.0
    if not 0 < scale <= 4:
        raise InvalidValue("use a number in (0, 4]")
    return scale


class GoogLeNet(ImageClassifier):
    """GoogLeNet (Inception v1) with its auxiliary classifiers (see the module docstring)."""

    declared_options = [
        model_option("width", width_scale, 1.0, "factor of every layer's channel count (0.0625 in the tests)"),
        model_option("stem", choice("auto", "imagenet", "small"), "auto",
                     "imagenet: conv7x7/2 and max pooling; small: one conv3x3; auto: small under 64 pixels"),
        model_option("aux_weight", non_negative_float, 0.3, "weight of each auxiliary classifier's loss in training"),
        model_option("dropout", unit_interval, 0.4, "dropout probability before the main classifier (0: none)"),
    ]
    defaults = {"data": "hickle", "input_size": 224, "n_classes": 1000, "batch_size": 32, "lr": 0.01,
                "momentum": 0.9, "weight_decay": 0.0002, "n_epochs": 90, "lr_decay_epochs": "30,60,80",
                "prefetch": True}
    data_choices = ("hickle", "synthetic")

    def channels(self, n: int) -> int:
        """``n`` channels of the paper scaled by ``width`` (at least 1)."""
        return max(1, round(n * self.hp["width"]))

    # ----- layers -----------------------------------------------------------------------
    def conv(self, net, filters: int, size: int, name: str, stride: int = 1):
        return L.Conv2DLayer(net, self.channels(filters), size, stride=stride, pad=size // 2,
                             W=L.init.GlorotUniform(), b=L.init.Constant(0.2), name=name)

    def lrn(self, net, name: str):
        return L.LocalResponseNormalization2DLayer(net, alpha=1e-4, k=1.0, beta=0.75, n=5, name=name)

    def inception(self, net, name: str):
        n1, r3, n3, r5, n5, proj = INCEPTIONS[name]
        self.inception_widths[name] = tuple(self.channels(n) for n in INCEPTIONS[name])
        branches = [
            self.conv(net, n1, 1, f"inception{name}.1x1"),
            self.conv(self.conv(net, r3, 1, f"inception{name}.3x3_reduce"), n3, 3, f"inception{name}.3x3"),
            self.conv(self.conv(net, r5, 1, f"inception{name}.5x5_reduce"), n5, 5, f"inception{name}.5x5"),
            self.conv(L.MaxPool2DLayer(net, 3, stride=1, pad=1, name=f"inception{name}.pool"), proj, 1,
                      f"inception{name}.pool_proj"),
        ]
        return BatchSizedConcat(branches, axis=1, name=f"inception{name}")

    def aux_tower(self, net, index: int):
        name = f"aux{index}"
        side = min(net.output_shape[2:])
        if side >= 5:
            net = L.Pool2DLayer(net, 5, stride=3, mode="average_exc_pad", name=f"{name}.pool")
        else:
            net = L.ExpressionLayer(net, lambda x: pt.mean(x, axis=(2, 3), keepdims=True),
                                    output_shape=lambda s: (s[0], s[1], 1, 1), name=f"{name}.pool")
        net = self.conv(net, 128, 1, f"{name}.conv")
        net = L.DenseLayer(net, self.channels(1024), W=L.init.GlorotUniform(), name=f"{name}.fc")
        net = self.dropout(net, 0.7)
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, name=f"{name}.classifier")

    def pool(self, net, name: str):
        return L.MaxPool2DLayer(net, 3, stride=2, pad=1, name=name)

    def build_layers(self, net: L.Layer) -> L.Layer:
        side = min(net.output_shape[2:])
        self.stem = self.hp["stem"] if self.hp["stem"] != "auto" else ("imagenet" if side >= 64 else "small")
        self.inception_widths: dict[str, tuple[int, ...]] = {}
        self._named: dict[str, L.Layer] = {}
        self.aux_outputs: list[L.Layer] = []
        if self.stem == "imagenet":
            net = self.pool(self.conv(net, 64, 7, "conv1", stride=2), "pool1")
        else:
            net = self.conv(net, 64, 3, "conv1")
        net = self.lrn(net, "lrn1")
        net = self.conv(self.conv(net, 64, 1, "conv2_reduce"), 192, 3, "conv2")
        net = self.pool(self.lrn(net, "lrn2"), "pool2")
        for name in INCEPTIONS:
            if name in ("4a", "5a"):
                net = self.pool(net, f"pool{name[0]}")
            net = self._named[name] = self.inception(net, name)
            if name in AUX_AFTER:
                self.aux_outputs.append(self.aux_tower(net, len(self.aux_outputs) + 1))
        if min(net.output_shape[2:]) < 1:
            raise ConfigError(f"GoogLeNet: a {side}x{side} input is too small for stem={self.stem}; use a larger "
                              "MODEL_INPUT_SIZE or MODEL_STEM=small")
        net = L.GlobalPoolLayer(net, name="pool5")
        if self.hp["dropout"]:
            net = self.dropout(net, self.hp["dropout"])
        return L.DenseLayer(net, self.n_outputs, nonlinearity=None, name="classifier")

    def layer(self, name: str) -> L.Layer:
        """The inception module ``name`` (``"3a"`` .. ``"5b"``)."""
        return self._named[name]

    @property
    def outputs(self) -> list:
        """The main classifier and the auxiliary ones."""
        return [self.network, *self.aux_outputs]

    def build_network(self, x, rng):
        L.init.set_rng(rng)
        self._dropouts = 0
        l_in = L.InputLayer((None,) + tuple(self.data.x_train.shape[1:]), input_var=x, name="input")
        self.network = self.build_layers(l_in)
        params = L.get_all_params(self.outputs, trainable=True)
        main, *aux = L.get_output(self.outputs)
        self.aux_logits = aux
        return params, main, L.get_output(self.network, deterministic=True)

    def loss_and_error(self, logits=None):
        """Training (``logits`` None): the main loss plus ``aux_weight`` times each auxiliary loss; the error is the
        main classifier's. Validation (``logits`` given): that classifier's own loss and error."""
        loss, error = super().loss_and_error(logits)
        if logits is None and self.hp["aux_weight"]:
            weight = pt.constant(self.hp["aux_weight"], dtype=self.floatX)
            loss = loss + weight * sum(super(GoogLeNet, self).loss_and_error(aux)[0] for aux in self.aux_logits)
        return loss, error
