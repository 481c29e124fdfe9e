"""Locally connected layers (Lasagne's ``lasagne.layers.local``): :class:`LocallyConnected2DLayer`.

A locally connected layer is a convolution whose filters are not shared:
every output position has its own. The input's shape (but the batch) must be
known; the output keeps its rows and cols (``pad='same'``, stride 1).

Example
-------
>>> from theanompi.nn import InputLayer
>>> layer = LocallyConnected2DLayer(InputLayer((None, 3, 8, 8)), 4, 3)
>>> layer.output_shape, layer.W.get_value().shape
((None, 4, 8, 8), (4, 3, 3, 3, 8, 8))
"""

from __future__ import annotations

import pytensor.tensor as pt

from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.conv import BaseConvLayer
from theanompi.nn.utils import as_tuple

__all__ = ["LocallyConnected2DLayer"]


def _same_padded(input, filter_size):
    """``input`` with zeros around its rows and cols so that every filter tap has a value at every position."""
    (fh, fw), (h, w) = filter_size, (input.shape[2], input.shape[3])
    before_h, before_w = fh // 2, fw // 2
    shape = (input.shape[0], input.shape[1], h + fh - 1, w + fw - 1)
    return pt.set_subtensor(pt.zeros(shape, dtype=input.dtype)[:, :, before_h:before_h + h, before_w:before_w + w],
                            input)


def _patches(input, filter_size, rows, cols):
    """(batch, channels, fh, fw, rows, cols): the input under tap (a, b) of the filter at every output position."""
    padded = _same_padded(input, filter_size)
    fh, fw = filter_size
    taps = [padded[:, :, a:a + rows, b:b + cols] for a in range(fh) for b in range(fw)]
    return pt.stack(taps, axis=2).reshape((input.shape[0], input.shape[1], fh, fw, rows, cols))


class LocallyConnected2DLayer(BaseConvLayer):
    """A 2-D convolution with a separate filter at every output position ('same' padding, stride 1).

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, channels, rows, cols); all but the batch size known.
    num_filters : int
    filter_size : int or pair of ints
    stride : 1 or (1, 1)
    pad : 'same'
        Other strides and pads are not implemented (as in Lasagne).
    untie_biases : bool
        False: one bias per filter; True: one per output position.
    W : initializer, array or shared variable
        (num_filters, channels, fh, fw, rows, cols), or with ``channelwise``
        (num_filters, fh, fw, rows, cols).
    b : initializer, array, shared variable or None
    nonlinearity : callable or None
    flip_filters : bool
        True (Lasagne's default): a convolution, the filters flipped; False: a cross-correlation.
    channelwise : bool
        Each output channel sees only its input channel (``num_filters`` must equal the channels).

    Raises
    ------
    NotImplementedError
        For a stride other than 1 or a pad other than 'same'.
    ValueError
        For an unknown input size or, with ``channelwise``, a number of filters that is not the channels'.

    Example
    -------
    >>> LocallyConnected2DLayer((None, 2, 5, 5), 2, (3, 5), channelwise=True).W.get_value().shape
    (2, 3, 5, 5, 5)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1), pad="same", untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify, flip_filters=True,
                 channelwise=False, **kwargs):
        if as_tuple(stride, 2) != (1, 1):
            raise NotImplementedError(f"LocallyConnected2DLayer requires stride=1 / (1, 1), but got {stride!r}")
        if pad != "same":
            raise NotImplementedError(f"LocallyConnected2DLayer requires pad='same', but got {pad!r}")
        self.channelwise = bool(channelwise)
        super().__init__(incoming, num_filters, filter_size, stride, pad, untie_biases, W, b, nonlinearity,
                         flip_filters, n=2, **kwargs)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters, *input_shape[2:])

    def get_W_shape(self):
        if any(s is None for s in self.input_shape[1:]):
            raise ValueError(f"A LocallyConnected2DLayer requires a fixed input shape (except for the batch size). "
                             f"Got {self.input_shape!r}")
        channels, positions = self.input_shape[1], tuple(self.input_shape[2:])
        if self.channelwise:
            if self.num_filters != channels:
                raise ValueError(f"LocallyConnected2DLayer: num_filters and the number of input channels should "
                                 f"match when channelwise is true, but got num_filters={self.num_filters} and "
                                 f"{channels} input channels")
            return (self.num_filters, *self.filter_size, *positions)
        return (self.num_filters, channels, *self.filter_size, *positions)

    def convolve(self, input, **kwargs):
        rows, cols = self.input_shape[2:]
        W = self.W
        if self.flip_filters:
            taps = (slice(None),) * (W.ndim - 4) + (slice(None, None, -1),) * 2
            W = W[taps]
        patches = _patches(input, self.filter_size, rows, cols)  # (N, C, fh, fw, rows, cols)
        if self.channelwise:
            return (patches * W.dimshuffle("x", 0, 1, 2, 3, 4)).sum(axis=(2, 3))
        # One matrix product per output position: (positions, N, C*fh*fw) @ (positions, C*fh*fw, F).
        n, taps_per_filter = input.shape[0], self.input_shape[1] * self.filter_size[0] * self.filter_size[1]
        columns = patches.reshape((n, taps_per_filter, rows * cols)).dimshuffle(2, 0, 1)
        weights = W.reshape((self.num_filters, taps_per_filter, rows * cols)).dimshuffle(2, 1, 0)
        return pt.matmul(columns, weights).dimshuffle(1, 2, 0).reshape((n, self.num_filters, rows, cols))
