"""The model zoo: ready-made ModelClasses built with :mod:`theanompi.nn`.

``MODELFILE=theanompi.models.zoo.<module>``, ``MODELCLASS=<class>``:

* ``small_cnn.CifarCNN``: conv32-pool-conv64-pool-dense10 (the CNN benchmark net)
* ``resnet.ResNet`` (``ResNet20``, ``ResNet32``): CIFAR ResNet (He et al. 2016), depth 6n+2,
  batch norm, shortcuts A/B; ResNet-32 has 464,154 parameters (Multiverso's benchmark)
* ``alexnet.AlexNet``: AlexNet-style net on ImageNet-style hickle batch files
* ``vgg.VGG``: VGG-11/13/16/19 (optionally with batch norm) on hickle batch files
* ``lstm.LSTMClassifier``: LSTM sequence classifier (digits as 8 rows of 8 pixels)
* ``wgan.WGAN``, ``wgan.LSGAN``: Wasserstein and least-squares GANs (critic + generator; MLP or DCGAN
  networks) on the digits, MNIST or CIFAR-10 images
* ``googlenet.GoogLeNet``: GoogLeNet (Szegedy et al. 2015) with its auxiliary classifiers
* ``resnet_imagenet.ResNet50`` (``BottleneckResNet``: 50/101/152): ImageNet ResNets with bottleneck blocks

Every model validates its ``MODEL_*`` options before any rank starts, initialises
its parameters from ``SEED`` (:func:`theanompi.nn.init.set_rng`, so all
ranks start identical) and runs under every rule (BSP ``cdd``/``avg``, EASGD,
GOSGD, ASGD).

This module holds what the zoo's classifiers share: :class:`LayerClassifier` (the network as a layer graph,
deterministic validation logits, rank-seeded dropout), :class:`ImageClassifier` (with the image data options and
loaders and their step learning-rate decay, :class:`~theanompi.models.hyperparams.ImageClassifierHyperParams`)
and :func:`rank_dropout` (dropout masks that differ between ranks).

Each model declares its ``MODEL_*`` options in its class body (``declared_options``, and ``defaults`` for the
defaults it changes), merged along the class hierarchy by :mod:`theanompi.models.model_options`;
``tmlauncher --model-options theanompi.models.zoo.resnet:ResNet32`` prints them. Data options of the image
classifiers: :mod:`theanompi.models.data.image_options`.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt

import theanompi.nn as L
from theanompi.models.base import ClassifierModel
from theanompi.models.hyperparams import ImageClassifierHyperParams

#: MODELCLASS -> MODELFILE of every zoo model.
MODELS = {
    "CifarCNN": "theanompi.models.zoo.small_cnn",
    "ResNet": "theanompi.models.zoo.resnet",
    "ResNet20": "theanompi.models.zoo.resnet",
    "ResNet32": "theanompi.models.zoo.resnet",
    "AlexNet": "theanompi.models.zoo.alexnet",
    "VGG": "theanompi.models.zoo.vgg",
    "LSTMClassifier": "theanompi.models.zoo.lstm",
    "WGAN": "theanompi.models.zoo.gans",
    "LSGAN": "theanompi.models.zoo.gans",
    "GoogLeNet": "theanompi.models.zoo.inception",
    "BottleneckResNet": "theanompi.models.zoo.resnet_imagenet",
    "ResNet50": "theanompi.models.zoo.resnet_imagenet",
}


class LayerClassifier(ClassifierModel):
    """A ClassifierModel whose network is a layer graph (:mod:`theanompi.nn`).

    Subclasses implement :meth:`build_layers` (the input layer -> the output layer, logits, no softmax) and
    :meth:`build_data`. :meth:`build_network` seeds :func:`theanompi.nn.init.set_rng` from
    ``config.seed``, keeps the output layer in ``self.network`` (so ``sync_state`` pools batch-norm statistics)
    and returns the trainable params, the training logits and the deterministic validation logits (batch norm
    on running statistics, dropout off).

    Example
    -------
    >>> from theanompi.models.data.digits import load_digits_split
    >>> class Linear(LayerClassifier):
    ...     def build_data(self):
    ...         (xt, yt), (xv, yv) = load_digits_split()
    ...         return self.shard(xt, yt, xv, yv)
    ...     def build_layers(self, net):
    ...         return L.DenseLayer(net, self.n_outputs, nonlinearity=None)
    >>> from theanompi.models.contract import WorkerConfig
    >>> m = Linear(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    >>> [p.name for p in m.params], m.n_params
    (['W', 'b'], 650)
    """

    # ----- network ----------------------------------------------------------------------
    def build_layers(self, net):
        """The network on top of the input layer ``net``; returns the output layer (logits)."""
        raise NotImplementedError

    def build_network(self, x, rng):
        L.init.set_rng(rng)  # seeded from config.seed: identical networks on every rank
        self._dropouts = 0
        l_in = L.InputLayer((None,) + tuple(self.data.x_train.shape[1:]), input_var=x, name="input")
        self.network = self.build_layers(l_in)
        params = L.get_all_params(self.network, trainable=True)
        return params, L.get_output(self.network), L.get_output(self.network, deterministic=True)

    def dropout(self, incoming, p: float):
        """A DropoutLayer whose masks differ between ranks (see :func:`rank_dropout`)."""
        self._dropouts += 1
        return rank_dropout(incoming, p, self.config, self._dropouts)

    @property
    def n_params(self) -> int:
        """Number of trainable parameters (batch norm's gamma and beta included, its running statistics not)."""
        return int(sum(np.prod(p.get_value(borrow=True).shape) for p in self.params))


class ImageClassifier(ImageClassifierHyperParams, LayerClassifier):
    """A LayerClassifier whose data is chosen by the image data options.

    Subclasses set :attr:`data_choices` and implement :meth:`build_layers`. The data options, :meth:`build_data`
    and the step learning-rate decay are
    :class:`~theanompi.models.hyperparams.ImageClassifierHyperParams`'.

    Example
    -------
    >>> class Linear(ImageClassifier):
    ...     data_choices = ("digits", "synthetic")
    ...     def build_layers(self, net):
    ...         return L.DenseLayer(net, self.n_outputs, nonlinearity=None)
    >>> from theanompi.models.contract import WorkerConfig
    >>> m = Linear(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    >>> [p.name for p in m.params], m.data.input_shape
    (['W', 'b'], (1, 8, 8))
    """

    @property
    def data_dtype(self) -> str:  # type: ignore[override]
        """In-memory images in pytensor's floatX."""
        return str(pytensor.config.floatX)


class BatchSizedConcat(L.ConcatLayer):
    """A channel concatenation whose output states its shape: the first input's batch size and its static sizes.

    pytensor's ``Join`` infers its batch size as the *sum* of its inputs' (then selects the first by the join
    axis); stacked inception modules nest those sums, and compiling a network of nine of them took minutes of
    graph rewriting. Stating the shape keeps each module's shape expression one step long.

    Example
    -------
    >>> import pytensor
    >>> a, b = L.InputLayer((None, 2, 3, 3)), L.InputLayer((None, 4, 3, 3))
    >>> out = L.get_output(BatchSizedConcat([a, b], axis=1))
    >>> f = pytensor.function([a.input_var, b.input_var], out.shape)
    >>> f(np.zeros((5, 2, 3, 3), "float32"), np.zeros((5, 4, 3, 3), "float32")).tolist()
    [5, 6, 3, 3]
    """

    def get_output_for(self, inputs, **kwargs):
        out = super().get_output_for(inputs, **kwargs)
        return pt.specify_shape(out, (inputs[0].shape[0], *self.output_shape[1:]))


def rank_dropout(incoming, p: float, config, index: int):
    """A :class:`~theanompi.nn.DropoutLayer` whose random generator is seeded by
    (``config.seed``, ``config.rank``, ``index``): different masks on every rank (each
    worker sees other samples), reproducible runs, and the initializers' generator
    (the parameters, identical on every rank) is left untouched.

    Example
    -------
    >>> from theanompi.models.contract import WorkerConfig
    >>> a = rank_dropout((None, 4), 0.5, WorkerConfig(rank=0, size=2, seed=0, device="cpu0"), 1)
    >>> b = rank_dropout((None, 4), 0.5, WorkerConfig(rank=1, size=2, seed=0, device="cpu1"), 1)
    >>> a._seed != b._seed
    True
    """
    saved = L.init.get_rng()
    L.init.set_rng(np.random.default_rng([int(config.seed), int(config.rank), int(index), 3]))
    try:
        return L.DropoutLayer(incoming, p=p, name=f"dropout{index}")
    finally:
        L.init.set_rng(saved)
