"""Nonlinearities (Lasagne's ``lasagne.nonlinearities``): functions of a tensor, dtype preserved.

Example
-------
>>> import numpy as np, pytensor.tensor as pt
>>> from theanompi.nn import nonlinearities
>>> x = pt.vector("x")
>>> nonlinearities.rectify(x).eval({x: np.array([-1.0, 2.0], x.dtype)}).tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

__all__ = [
    "LeakyRectify", "SELU", "ScaledTanH", "elu", "identity", "leaky_rectify", "linear", "rectify", "selu",
    "sigmoid", "softmax", "softplus", "tanh", "very_leaky_rectify",
]


def _c(value, like):
    """A constant of ``like``'s dtype (keeps float32 graphs float32)."""
    return np.asarray(value, dtype=like.dtype)


def sigmoid(x):
    """Logistic sigmoid 1 / (1 + exp(-x)).

    Example
    -------
    >>> sigmoid(pt.vector()).ndim
    1
    """
    return pt.sigmoid(x)


def softmax(x):
    """Softmax over the last axis (rows of a matrix, as in Lasagne).

    Example
    -------
    >>> softmax(pt.matrix()).ndim
    2
    """
    return pt.special.softmax(x, axis=-1)


def tanh(x):
    """Hyperbolic tangent.

    Example
    -------
    >>> tanh(pt.vector()).ndim
    1
    """
    return pt.tanh(x)


class ScaledTanH:
    """``scale_out * tanh(scale_in * x)``.

    Example
    -------
    >>> ScaledTanH(scale_in=0.5, scale_out=2.4)(pt.vector()).ndim
    1
    """

    def __init__(self, scale_in=1.0, scale_out=1.0):
        self.scale_in, self.scale_out = scale_in, scale_out

    def __call__(self, x):
        return _c(self.scale_out, x) * pt.tanh(_c(self.scale_in, x) * x)


def rectify(x):
    """ReLU: max(x, 0); a numpy array gives a numpy array (as Theano's ``relu`` did).

    Example
    -------
    >>> rectify(pt.vector()).ndim, rectify(np.array([-1.0, 2.0])).tolist()
    (1, [0.0, 2.0])
    """
    if isinstance(x, np.ndarray):
        return np.maximum(x, 0)
    return pt.maximum(x, _c(0, x))


class LeakyRectify:
    """Leaky ReLU: x for x > 0, ``leakiness * x`` otherwise.

    Example
    -------
    >>> LeakyRectify(0.1)(pt.vector()).ndim
    1
    """

    def __init__(self, leakiness=0.01):
        self.leakiness = leakiness

    def __call__(self, x):
        return pt.switch(pt.gt(x, 0), x, _c(self.leakiness, x) * x)


#: Leaky ReLU with leakiness 0.01.
leaky_rectify = LeakyRectify(0.01)
#: Leaky ReLU with leakiness 1/3.
very_leaky_rectify = LeakyRectify(1.0 / 3)


def elu(x):
    """Exponential linear unit: x for x > 0, exp(x) - 1 otherwise.

    Example
    -------
    >>> elu(pt.vector()).ndim
    1
    """
    return pt.switch(pt.gt(x, 0), x, pt.expm1(pt.minimum(x, _c(0, x))))


class SELU:
    """Scaled exponential linear unit: ``scale * (x if x > 0 else scale_neg * (exp(x) - 1))``.

    Klambauer et al. 2017; :data:`selu` is the instance with their constants.

    Example
    -------
    >>> x = pt.vector()
    >>> SELU(scale=2.0, scale_neg=0.5)(x).eval({x: np.array([1.0, 0.0], x.dtype)}).tolist()
    [2.0, 0.0]
    """

    def __init__(self, scale=1.0, scale_neg=1.0):
        self.scale, self.scale_neg = scale, scale_neg

    def __call__(self, x):
        negative = _c(self.scale_neg, x) * pt.expm1(pt.minimum(x, _c(0, x)))
        return _c(self.scale, x) * pt.switch(pt.gt(x, 0), x, negative)


#: SELU with the self-normalising constants of Klambauer et al. (lambda ~ 1.0507, alpha ~ 1.6733).
selu = SELU(scale=1.0507009873554804934193349852946, scale_neg=1.6732632423543772848170429916717)


def softplus(x):
    """log(1 + exp(x)).

    Example
    -------
    >>> softplus(pt.vector()).ndim
    1
    """
    return pt.softplus(x)


def linear(x):
    """The identity (no nonlinearity).

    Example
    -------
    >>> v = pt.vector(); linear(v) is v
    True
    """
    return x


identity = linear
