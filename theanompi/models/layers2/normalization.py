"""Local response normalisation across channels (:class:`CrossChannelNormalization`, :class:`LRN`) and
:class:`BatchNormal` (which Theano-MPI left unimplemented).

For channel ``i`` of ``x`` (Krizhevsky et al. 2012, section 3.3, in Theano-MPI's form with ``alpha``
not divided by ``n``)::

    out[i] = x[i] / (k + alpha * sum_{j = i - n//2}^{i + n//2} x[j]**2) ** beta

with channels outside the range counted as zero.

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x = pt.tensor4("x")
>>> lrn = LRN(x, input_shape=(4, 2, 2, 1), printinfo=False)       # c01b: channels on axis 0
>>> y = pytensor.function([x], lrn.output)(np.ones((4, 2, 2, 1), "float32"))
>>> np.allclose(y[0, 0, 0, 0], 1 / (2 + 1e-4 * 3) ** 0.75)
True
"""

from __future__ import annotations

import numbers

import pytensor.tensor as pt

from theanompi.models.layers2.base import Layer

__all__ = ["BatchNormal", "CrossChannelNormalization", "LRN"]


class CrossChannelNormalization:
    """Callable ``x -> normalised x`` along ``axis`` (0 for c01b, Theano-MPI's only layout; 1 for bc01).

    Example
    -------
    >>> CrossChannelNormalization(n=3, axis=1)(pt.tensor4("x")).ndim
    4
    """

    def __init__(self, alpha=1e-4, k=2, beta=0.75, n=5, axis=0):
        if not isinstance(n, numbers.Integral) or n < 1 or n % 2 == 0:
            raise NotImplementedError(f"CrossChannelNormalization: the window n must be a positive odd int, got {n!r}")
        self.alpha, self.k, self.beta, self.n, self.axis = alpha, k, beta, int(n), int(axis)

    def __call__(self, x):
        order = [self.axis] + [a for a in range(x.ndim) if a != self.axis]
        channels_first = x.dimshuffle(*order)
        half = self.n // 2
        squares = pt.sqr(channels_first)
        zeros = pt.zeros((half,) + tuple(squares.shape[1:]), dtype=x.dtype)
        padded = pt.concatenate([zeros, squares, zeros], axis=0) if half else squares
        count = channels_first.shape[0]
        window_sum = sum(padded[i:i + count] for i in range(self.n))
        scaled = channels_first / (self.k + self.alpha * window_sum) ** self.beta
        return scaled.dimshuffle(*[order.index(a) for a in range(x.ndim)]).astype(x.dtype)


class LRN(Layer):
    """:class:`CrossChannelNormalization` as a layer (default: channels on axis 0, c01b, as in Theano-MPI).

    Example
    -------
    >>> LRN(pt.tensor4("x"), input_shape=(2, 8, 5, 5), axis=1, printinfo=False).output_shape
    (2, 8, 5, 5)
    """

    name = "LRN"

    def __init__(self, input, input_shape=None, printinfo=True, axis=0):
        self.get_input_shape(input, input_shape)
        self.lrn_func = CrossChannelNormalization(axis=axis)
        self.output = self.lrn_func(self.input)
        self.output_shape = self.input_shape
        if printinfo:
            self.print_shape()


class BatchNormal:
    """Not available: Theano-MPI's ``BatchNormal`` was an empty placeholder.

    Example
    -------
    >>> BatchNormal()
    Traceback (most recent call last):
    ...
    NotImplementedError: layers2.BatchNormal was never implemented in Theano-MPI; use ...BatchNormLayer...
    """

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("layers2.BatchNormal was never implemented in Theano-MPI; use "
                                  "theanompi.nn.BatchNormLayer (Lasagne-style) instead")
