"""Fully connected layers: :class:`FC` (ReLU) and :class:`Softmax` with its cost and error expressions.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x, y = pt.matrix("x"), pt.lvector("y")
>>> sm = Softmax(x, n_out=3, input_shape=(2, 4), printinfo=False)
>>> f = pytensor.function([x, y], [sm.negative_log_likelihood(y), sm.errors(y)])
>>> cost, err = f(np.zeros((2, 4), "float32"), np.array([0, 2]))
>>> bool(np.isclose(cost, np.log(3))), float(err)
(True, 0.5)
"""

from __future__ import annotations

import logging

import pytensor.tensor as pt
from pytensor.tensor.special import log_softmax, softmax

from theanompi.models.layers2.base import Layer
from theanompi.models.layers2.weights import Constant, Normal

__all__ = ["FC", "Softmax"]

log = logging.getLogger(__name__)


def _affine_weights(layer, n_out, W, b, default_std, default_bias):
    """Use the given W and b Weights, or draw both defaults; check W is (n_in, n_out) and b is (n_out,)."""
    who = type(layer).__name__
    if len(layer.input_shape) != 2:
        raise ValueError(f"{who}: input must be 2-D (batch, features), got input shape {layer.input_shape} "
                         "(put a Flatten layer before it)")
    n_in = layer.input_shape[-1]
    if (W is None) != (b is None):
        raise ValueError(f"{who}: give both W and b (Weights) or neither, got W={W!r} and b={b!r}")
    if W is not None:
        layer.W, layer.b = W, b
    else:
        layer.W = Normal((n_in, n_out), std=default_std)
        layer.b = Constant((n_out,), val=default_bias)
    if tuple(layer.W.shape) != (n_in, n_out) or tuple(layer.b.shape) != (n_out,):
        raise ValueError(f"{who}: expected W of shape {(n_in, n_out)} and b of shape {(n_out,)}, got "
                         f"{layer.W.shape} and {layer.b.shape}")
    layer.params = [layer.W.val, layer.b.val]
    layer.weight_type = ["W", "b"]
    layer.output_shape = (layer.input_shape[0], int(n_out))
    return pt.dot(layer.input, layer.W.val) + layer.b.val


class FC(Layer):
    """``max(input @ W + b, 0)``; without both W and b: ``Normal(std=0.005)`` and ``Constant(0.1)``.

    Example
    -------
    >>> FC(pt.matrix("x"), 16, None, None, input_shape=(8, 32), printinfo=False).output_shape
    (8, 16)
    """

    name = "FC"

    def __init__(self, input, n_out, W, b, printinfo=True, input_shape=None):
        self.get_input_shape(input, input_shape)
        self.output = pt.maximum(_affine_weights(self, n_out, W, b, 0.005, 0.1), 0)
        if printinfo:
            self.print_shape()


class Softmax(Layer):
    """Class probabilities ``softmax(input @ W + b)`` (``.p_y_given_x``, also ``.output``) and ``.y_pred``.

    Without both W and b: ``Normal(std=0.01)`` and ``Constant(0)``.
    """

    name = "Softmax"

    def __init__(self, input, n_out, W=None, b=None, printinfo=True, input_shape=None):
        self.get_input_shape(input, input_shape)
        self.logits = _affine_weights(self, n_out, W, b, 0.01, 0.0)
        self.p_y_given_x = softmax(self.logits, axis=1)
        self.y_pred = pt.argmax(self.p_y_given_x, axis=1)
        self.output = self.p_y_given_x
        if printinfo:
            self.print_shape()

    def negative_log_likelihood(self, y):
        """Mean of ``-log p(y | x)`` over the batch (``y``: int class labels)."""
        return -pt.mean(log_softmax(self.logits, axis=1)[pt.arange(y.shape[0]), y])

    def _check_labels(self, y) -> None:
        if y.ndim != self.y_pred.ndim:
            raise TypeError(f"Softmax: y must be a vector of labels like y_pred ({self.y_pred.type}), got {y.type}")
        if not y.dtype.startswith(("int", "uint")):
            raise NotImplementedError(f"Softmax: y must hold int labels, got dtype {y.dtype}")

    def errors(self, y):
        """Fraction of the batch whose most likely class is not ``y``.

        Example
        -------
        >>> Softmax(pt.matrix("x"), 5, input_shape=(4, 3), printinfo=False).errors(pt.lvector("y")).ndim
        0
        """
        self._check_labels(y)
        return pt.mean(pt.neq(self.y_pred, y))

    def errors_top_x(self, y, num_top=5):
        """Fraction of the batch whose label ``y`` is not among the ``num_top`` most likely classes.

        Example
        -------
        >>> Softmax(pt.matrix("x"), 5, input_shape=(4, 3), printinfo=False).errors_top_x(pt.lvector("y"), 2).ndim
        0
        """
        self._check_labels(y)
        if num_top != 5:
            log.info("validation errors from the top %d classes", num_top)
        top = pt.argsort(self.p_y_given_x, axis=1)[:, -num_top:]
        return pt.mean(pt.all(pt.neq(top, y[:, None]), axis=1))
