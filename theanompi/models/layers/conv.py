"""2-D convolution layer on :func:`theanompi.models.ops.conv2d` (NCHW input, OIHW filters).

``flip_filters`` defaults to False here (cross-correlation, like the op, cuDNN
and PyTorch); Lasagne's default is True (a true convolution). For a network
trained from scratch the two are equivalent; to load weights trained with
Lasagne's default pass ``flip_filters=True``, which flips W inside the graph
(``W[:, :, ::-1, ::-1]``) at a small cost.

Example
-------
>>> from theanompi.models.layers import InputLayer, Conv2DLayer
>>> l = Conv2DLayer(InputLayer((None, 3, 32, 32)), num_filters=16, filter_size=3, pad="same")
>>> l.output_shape, l.W.get_value().shape
((None, 16, 32, 32), (16, 3, 3, 3))
"""

from __future__ import annotations

import numbers

from theanompi.models.layers import init, nonlinearities
from theanompi.models.layers.base import Layer
from theanompi.models.ops import conv2d

__all__ = ["Conv2DLayer", "conv_output_length"]


def _int_pair(value, name, minimum):
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        pair = (int(value), int(value))
    else:
        try:
            pair = tuple(value)
        except TypeError:
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}") from None
        if len(pair) != 2 or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair):
            raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
        pair = (int(pair[0]), int(pair[1]))
    if min(pair) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return pair


def conv_output_length(input_length, filter_size, stride, pad):
    """Output length of a convolution along one axis (None if ``input_length`` is None).

    ``pad`` is an int or ``'valid'`` (0), ``'full'`` (filter_size - 1) or
    ``'same'`` (filter_size // 2).

    Example
    -------
    >>> conv_output_length(32, 5, 1, "same"), conv_output_length(32, 5, 2, "valid")
    (32, 14)
    """
    if input_length is None:
        return None
    if pad == "valid":
        pad = 0
    elif pad == "full":
        pad = filter_size - 1
    elif pad == "same":
        pad = filter_size // 2
    if not isinstance(pad, numbers.Integral):
        raise ValueError(f"invalid pad {pad!r}: use an int, 'valid', 'full' or 'same'")
    return (input_length + 2 * pad - filter_size) // stride + 1


class Conv2DLayer(Layer):
    """2-D convolution: ``nonlinearity(conv2d(input, W, stride, pad) + b)``.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape (batch, channels, rows, columns); channels must be known.
    num_filters : int
        Number of output channels.
    filter_size : int or (int, int)
    stride : int or (int, int)
    pad : int, (int, int), 'valid', 'full' or 'same'
        Zero padding per side. ``'valid'`` = 0, ``'full'`` = filter_size - 1,
        ``'same'`` = filter_size // 2 (odd filter sizes only: the output then
        has the input's size at stride 1).
    untie_biases : bool
        False: one bias per filter, shape (num_filters,). True: one per output
        position, shape (num_filters, out_rows, out_cols).
    W : initializer, array or shared variable
        Filters of shape (num_filters, channels, filter_rows, filter_cols).
    b : initializer, array, shared variable or None
        Biases (``regularizable=False``); None: no bias.
    nonlinearity : callable or None
    flip_filters : bool
        False: cross-correlation (default). True: flip W (Lasagne's default
        semantics, for weights trained with Lasagne).

    Raises
    ------
    ValueError
        For a non-4-D input, unknown channels, a bad stride/pad/filter size, or
        ``'same'`` with an even filter size.

    Example
    -------
    >>> l = Conv2DLayer((None, 1, 8, 8), 4, (3, 3), stride=2)
    >>> l.output_shape
    (None, 4, 3, 3)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1), pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, **kwargs):
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) != 4:
            raise ValueError(f"Conv2DLayer: input must be 4-D (batch, channels, rows, cols), "
                             f"got shape {self.input_shape}")
        if self.input_shape[1] is None:
            raise ValueError(f"Conv2DLayer: the number of input channels must be known, got input shape "
                             f"{self.input_shape}")
        if isinstance(num_filters, bool) or not isinstance(num_filters, numbers.Integral) or num_filters < 1:
            raise ValueError(f"Conv2DLayer: num_filters must be a positive int, got {num_filters!r}")
        self.num_filters = int(num_filters)
        self.filter_size = _int_pair(filter_size, "Conv2DLayer: filter_size", 1)
        self.stride = _int_pair(stride, "Conv2DLayer: stride", 1)
        if pad in ("valid", "full", "same"):
            if pad == "same" and any(s % 2 == 0 for s in self.filter_size):
                raise ValueError(f"Conv2DLayer: pad='same' needs odd filter sizes, got filter_size="
                                 f"{self.filter_size}")
            self.pad = pad
            self._pad = tuple({"valid": 0, "full": s - 1, "same": s // 2}[pad] for s in self.filter_size)
        elif isinstance(pad, str):
            raise ValueError(f"Conv2DLayer: pad={pad!r} is not allowed; use an int, a pair, 'valid', 'full' "
                             "or 'same'")
        else:
            self.pad = self._pad = _int_pair(pad, "Conv2DLayer: pad", 0)
        self.flip_filters = bool(flip_filters)
        self.untie_biases = bool(untie_biases)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        for axis in (2, 3):
            size = self.input_shape[axis]
            k, p = self.filter_size[axis - 2], self._pad[axis - 2]
            if size is not None and size + 2 * p < k:
                raise ValueError(f"Conv2DLayer: filter size {k} is larger than the padded input "
                                 f"{size} + 2*{p} (input shape {self.input_shape})")
        self.W = self.add_param(W, (self.num_filters, self.input_shape[1]) + self.filter_size, name="W")
        if b is None:
            self.b = None
        else:
            if self.untie_biases:
                out = self.output_shape[2:]
                if None in out:
                    raise ValueError(f"Conv2DLayer: untie_biases=True needs known output rows/cols, got output "
                                     f"shape {self.output_shape}")
                bias_shape = (self.num_filters,) + tuple(out)
            else:
                bias_shape = (self.num_filters,)
            self.b = self.add_param(b, bias_shape, name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters) + tuple(
            conv_output_length(input_shape[axis], self.filter_size[axis - 2], self.stride[axis - 2],
                               self._pad[axis - 2])
            for axis in (2, 3)
        )

    def get_output_for(self, input, **kwargs):
        W = self.W[:, :, ::-1, ::-1] if self.flip_filters else self.W
        if self.b is not None and not self.untie_biases:
            out = conv2d(input, W, stride=self.stride, pad=self._pad, bias=self.b)
        else:
            out = conv2d(input, W, stride=self.stride, pad=self._pad)
            if self.b is not None:
                out = out + self.b.dimshuffle("x", 0, 1, 2)
        return self.nonlinearity(out)
