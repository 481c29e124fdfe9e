"""ImageNet ResNets with bottleneck blocks (He et al., "Deep Residual Learning", 2016, table 1): ResNet-50/101/152.

Network (``depth`` 50: ``blocks`` = ``"3,4,6,3"``; 101: ``"3,4,23,3"``; 152: ``"3,8,36,3"``; ``width`` w = 64)::

    crop (3, 224, 224) -> conv7x7/2(w) + BN + relu -> maxpool 3/2
        -> stage k = 1..4: blocks[k] bottleneck blocks of width w*2^(k-1) (output 4x that; the first block of
           stages 2-4 has stride 2)
        -> global average pool -> dense(n_classes)

    bottleneck: conv1x1 + BN + relu -> conv3x3 (stride) + BN + relu -> conv1x1 (4x) + BN -> (+ shortcut) -> relu
    shortcut: the input, or conv1x1 (stride) + BN where the shape changes (the paper's option B)

The stride of a downsampling block sits on its 3x3 convolution (as torchvision's ``resnet50``, so the
benchmarks compare the same network; the paper's Caffe model strides the first 1x1). ``stem=small``
(``auto`` for inputs under 64 pixels) starts with one 3x3 stride-1 convolution and no pooling instead.
Batch norm follows the CIFAR ResNet's policy (:mod:`theanompi.models.zoo.resnet`: running statistics
pooled by ``sync_state``; ``bn_eval=batch`` for EASGD's server).

Model options (cfg ``MODEL_*``; ``tmlauncher --model-options theanompi.models.zoo.resnet_imagenet:ResNet50``
prints them all): ``depth`` (50/101/152), ``blocks`` (overrides the depth's block counts, e.g. ``"1,1,1,1"`` for
tests), ``width`` (64), ``stem`` (``auto``/``imagenet``/``small``), ``bn_eval``, ``n_classes`` (1000),
``input_size`` (224), the image data options of :mod:`theanompi.models.data.image_options` (``data`` = ``hickle``
(default) or ``synthetic``), ``batch_size`` (32), ``lr`` (0.0125 = 0.1 x 32/256), ``momentum`` (0.9),
``weight_decay`` (0.0001), ``n_epochs`` (90), ``lr_decay_epochs`` (``"30,60,80"``), ``prefetch`` (true).

Example
-------
>>> from theanompi.models.contract import WorkerConfig
>>> full = BottleneckResNet(WorkerConfig(rank=0, size=1, seed=0, device="cpu0",
...                                      model_options={"data": "synthetic", "input_size": 64, "train_size": 2,
...                                                     "val_size": 1, "prefetch": False}))
>>> full.n_params                    # the paper's 25.5M, BN's gamma and beta included
25557032
"""

from __future__ import annotations

import theanompi.nn as L
from theanompi.core.options import choice, int_list, model_option, parse_int_list, positive_int
from theanompi.models.zoo.resnet import ResNet, conv_bn

#: Bottleneck blocks per stage of each depth.
BLOCKS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}
EXPANSION = 4


class BottleneckResNet(ResNet):
    """ResNet-50/101/152 with bottleneck blocks (see the module docstring)."""

    declared_options = [
        model_option("depth", choice(*BLOCKS), 50, "layers: 50, 101 or 152 (the paper's block counts)"),
        model_option("blocks", int_list(length=4, allow_empty=True), "",
                     "bottleneck blocks of the four stages, instead of the depth's (e.g. 1,1,1,1)"),
        model_option("width", positive_int, 64, "channels of the first stage's bottlenecks (doubled in each stage)"),
        model_option("stem", choice("auto", "imagenet", "small"), "auto",
                     "imagenet: conv7x7/2 and max pooling; small: one conv3x3; auto: small under 64 pixels"),
        model_option("shortcut", choice("B"), "B", "where the shape changes: B, a 1x1 convolution with batch norm"),
    ]
    defaults = {"data": "hickle", "input_size": 224, "n_classes": 1000, "batch_size": 32, "lr": 0.0125,
                "weight_decay": 0.0001, "n_epochs": 90, "lr_decay_epochs": "30,60,80", "prefetch": True}
    data_choices = ("hickle", "synthetic")

    @property
    def blocks(self) -> tuple[int, ...]:
        """Bottleneck blocks per stage."""
        return parse_int_list(self.hp["blocks"]) or BLOCKS[self.hp["depth"]]

    def bottleneck(self, net, width: int, stride: int, name: str):
        out = conv_bn(net, width, 1, 1, f"{name}.conv1")
        out = conv_bn(out, width, 3, stride, f"{name}.conv2")
        out = conv_bn(out, width * EXPANSION, 1, 1, f"{name}.conv3", relu=False)
        if stride == 1 and net.output_shape[1] == width * EXPANSION:
            shortcut = net
        else:
            shortcut = conv_bn(net, width * EXPANSION, 1, stride, f"{name}.proj", relu=False)
        return L.NonlinearityLayer(L.ElemwiseSumLayer([out, shortcut], name=f"{name}.sum"),
                                   L.nonlinearities.rectify, name=f"{name}.relu")

    def build_layers(self, net):
        w = self.hp["width"]
        side = min(net.output_shape[2:])
        self.stem = self.hp["stem"] if self.hp["stem"] != "auto" else ("imagenet" if side >= 64 else "small")
        if self.stem == "imagenet":
            net = conv_bn(net, w, 7, 2, "conv1")
            net = L.MaxPool2DLayer(net, 3, stride=2, pad=1, name="pool1")
        else:
            net = conv_bn(net, w, 3, 1, "conv1")
        for stage, n_blocks in enumerate(self.blocks, start=1):
            for k in range(n_blocks):
                stride = 2 if stage > 1 and k == 0 else 1
                net = self.bottleneck(net, w * 2 ** (stage - 1), stride, f"stage{stage}.block{k + 1}")
        net = L.GlobalPoolLayer(net, name="pool")
        return L.DenseLayer(net, self.n_outputs, W=L.init.HeNormal(), nonlinearity=None, name="fc")


class ResNet50(BottleneckResNet):
    """ResNet-50 (25,557,032 parameters with 1000 classes)."""
