"""2-D convolution layer on :func:`theanompi.backend.ops.conv2d` (NCHW input, OIHW filters).

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

import pytensor.tensor as pt

from theanompi.backend.ops import Conv2dGradInputs, conv2d
from theanompi.models.layers import init, nonlinearities
from theanompi.models.layers.base import Layer

__all__ = ["Conv2DLayer", "Deconv2DLayer", "TransposedConv2DLayer", "conv_input_length", "conv_output_length"]


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


def _border(pad, filter_size, cls, argname):
    """``(pad as given or normalised, per-axis int pair)`` for a pad/crop spec (int, pair or mode name)."""
    if pad in ("valid", "full", "same"):
        if pad == "same" and any(s % 2 == 0 for s in filter_size):
            raise ValueError(f"{cls}: {argname}='same' needs odd filter sizes, got filter_size={filter_size}")
        return pad, tuple({"valid": 0, "full": s - 1, "same": s // 2}[pad] for s in filter_size)
    if isinstance(pad, str):
        raise ValueError(f"{cls}: {argname}={pad!r} is not allowed; use an int, a pair, 'valid', 'full' or 'same'")
    pair = _int_pair(pad, f"{cls}: {argname}", 0)
    return pair, pair


def _add_bias(layer, b):
    """Register ``layer``'s bias (None: no bias): per filter, or per output position if ``layer.untie_biases``."""
    if b is None:
        return None
    if layer.untie_biases:
        out = layer.output_shape[2:]
        if None in out:
            raise ValueError(f"{type(layer).__name__}: untie_biases=True needs known output rows/cols, got output "
                             f"shape {layer.output_shape}")
        shape = (layer.num_filters,) + tuple(out)
    else:
        shape = (layer.num_filters,)
    return layer.add_param(b, shape, name="b", regularizable=False)


def _add_bias_term(out, b, untie_biases):
    if b is None:
        return out
    return out + (b.dimshuffle("x", 0, 1, 2) if untie_biases else b.dimshuffle("x", 0, "x", "x"))


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


def conv_input_length(output_length, filter_size, stride, pad):
    """The smallest input length whose convolution has ``output_length`` (None if that is None).

    The inverse of :func:`conv_output_length` (exact at stride 1; at stride
    s, input lengths up to ``s - 1`` larger give the same output length).

    Example
    -------
    >>> conv_input_length(7, 5, 2, "same"), conv_output_length(13, 5, 2, "same")
    (13, 7)
    """
    if output_length is None:
        return None
    pad = {"valid": 0, "full": filter_size - 1, "same": filter_size // 2}.get(pad, pad) if isinstance(pad, str) \
        else pad
    if not isinstance(pad, numbers.Integral):
        raise ValueError(f"invalid pad {pad!r}: use an int, 'valid', 'full' or 'same'")
    return (output_length - 1) * stride - 2 * pad + filter_size


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
        self.pad, self._pad = _border(pad, self.filter_size, "Conv2DLayer", "pad")
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
        self.b = _add_bias(self, b)

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
            out = _add_bias_term(conv2d(input, W, stride=self.stride, pad=self._pad), self.b, self.untie_biases)
        return self.nonlinearity(out)


class TransposedConv2DLayer(Layer):
    """Transposed 2-D convolution ("deconvolution"): the gradient of a convolution with respect to its input.

    The output is what :func:`~theanompi.backend.ops.conv2d`'s input gradient
    (:class:`~theanompi.backend.ops.Conv2dGradInputs`) gives for the layer's
    input as output gradient: each input pixel scatters ``W[c]`` (scaled by
    its value) into a ``stride``-spaced window of the output, the outer
    ``crop`` rows/columns are cut off, then ``b`` and ``nonlinearity`` apply.
    A convolution with the same ``W``, ``stride`` and ``pad=crop`` maps the
    output shape back to the input shape.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape (batch, channels, rows, columns); channels must be known.
    num_filters : int
        Number of output channels.
    filter_size, stride : int or (int, int)
    crop : int, (int, int), 'valid', 'full' or 'same'
        Rows/columns cut from each border of the full transposed convolution
        (the ``pad`` of the matching convolution): ``'valid'`` = 0,
        ``'full'`` = filter_size - 1, ``'same'`` = filter_size // 2 (odd
        filter sizes only; at stride 1 the output then has the input's size).
    untie_biases : bool
        As in :class:`Conv2DLayer` (True needs a known output size).
    W : initializer, array or shared variable
        Shape (input channels, num_filters, filter_rows, filter_cols), as in Lasagne.
    b : initializer, array, shared variable or None
    nonlinearity : callable or None
    flip_filters : bool
        Lasagne's meaning (inverted with respect to :class:`Conv2DLayer`): True
        slides the flipped filters over the stride-dilated input (a true
        convolution), which is the transpose of ``Conv2DLayer(flip_filters=False)``
        and needs no flip in the graph (the default here). False is Lasagne's
        default, the transpose of ``Conv2DLayer(flip_filters=True)``; pass it
        for weights trained with Lasagne.
    output_size : int, (int, int) or None
        At stride > 1 several output sizes convolve back to the input size;
        this picks one (it must be one of them). None: the smallest,
        ``(input - 1) * stride - 2 * crop + filter_size``.

    Raises
    ------
    ValueError
        For a non-4-D input, unknown channels, a bad stride/crop/filter size, a
        non-positive output size, or an ``output_size`` that does not convolve
        back to the input size.

    Example
    -------
    >>> l = TransposedConv2DLayer((None, 8, 7, 7), 4, 5, stride=2, crop="same", output_size=14)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 4, 14, 14), (8, 4, 5, 5))
    >>> TransposedConv2DLayer((None, 8, 7, 7), 4, 5, stride=2, crop="same").output_shape
    (None, 4, 13, 13)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1), crop=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=True, output_size=None, **kwargs):
        super().__init__(incoming, **kwargs)
        cls = "TransposedConv2DLayer"
        if len(self.input_shape) != 4:
            raise ValueError(f"{cls}: input must be 4-D (batch, channels, rows, cols), got shape {self.input_shape}")
        if self.input_shape[1] is None:
            raise ValueError(f"{cls}: the number of input channels must be known, got input shape "
                             f"{self.input_shape}")
        if isinstance(num_filters, bool) or not isinstance(num_filters, numbers.Integral) or num_filters < 1:
            raise ValueError(f"{cls}: num_filters must be a positive int, got {num_filters!r}")
        self.num_filters = int(num_filters)
        self.filter_size = _int_pair(filter_size, f"{cls}: filter_size", 1)
        self.stride = _int_pair(stride, f"{cls}: stride", 1)
        self.crop, self._crop = _border(crop, self.filter_size, cls, "crop")
        self.output_size = None if output_size is None else _int_pair(output_size, f"{cls}: output_size", 1)
        self.flip_filters = bool(flip_filters)
        self.untie_biases = bool(untie_biases)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        for axis in (2, 3):
            size = self.input_shape[axis]
            k, s, p = self.filter_size[axis - 2], self.stride[axis - 2], self._crop[axis - 2]
            smallest = conv_input_length(size, k, s, p)
            if smallest is not None and smallest < 1:
                raise ValueError(f"{cls}: crop {p} leaves no output along axis {axis} (input shape "
                                 f"{self.input_shape}, filter size {k}, stride {s})")
            if self.output_size is not None:
                out = self.output_size[axis - 2]
                if out + 2 * p < k or (size is not None and conv_output_length(out, k, s, p) != size):
                    raise ValueError(f"{cls}: output_size={output_size!r} is impossible for input shape "
                                     f"{self.input_shape}: along axis {axis} a convolution (filter {k}, stride {s}, "
                                     f"pad {p}) of {out} gives {conv_output_length(out, k, s, p)}, not {size}")
        self.W = self.add_param(W, (self.input_shape[1], self.num_filters) + self.filter_size, name="W")
        self.b = _add_bias(self, b)

    def get_output_shape_for(self, input_shape):
        if self.output_size is not None:
            return (input_shape[0], self.num_filters) + self.output_size
        return (input_shape[0], self.num_filters) + tuple(
            conv_input_length(input_shape[axis], self.filter_size[axis - 2], self.stride[axis - 2],
                              self._crop[axis - 2])
            for axis in (2, 3)
        )

    def get_output_for(self, input, **kwargs):
        if self.output_size is not None:
            rows, cols = self.output_size
        else:
            rows, cols = (conv_input_length(input.shape[axis], self.filter_size[axis - 2], self.stride[axis - 2],
                                            self._crop[axis - 2]) for axis in (2, 3))
        # The op reads only the shape of its first input (the convolution's input); AllocEmpty carries it.
        like_output = pt.empty((input.shape[0], self.num_filters, rows, cols), dtype=input.dtype)
        W = self.W if self.flip_filters else self.W[:, :, ::-1, ::-1]
        out = Conv2dGradInputs(self.stride, self._crop)(like_output, W, input)
        return self.nonlinearity(_add_bias_term(out, self.b, self.untie_biases))


#: Lasagne's alias of :class:`TransposedConv2DLayer`.
Deconv2DLayer = TransposedConv2DLayer
