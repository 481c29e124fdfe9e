"""Convolution layers (Lasagne's ``lasagne.layers.conv``) on :mod:`theanompi.backend.ops`' convolution.

:class:`Conv1DLayer`, :class:`Conv2DLayer` and :class:`Conv3DLayer` (NC + 1-3
spatial axes, ``num_groups`` channel groups), :class:`DilatedConv2DLayer`,
:class:`TransposedConv2DLayer` and :class:`TransposedConv3DLayer` (=
``Deconv2DLayer``/``Deconv3DLayer``). They run on the BLAS-backed
:func:`~theanompi.backend.ops.conv2d` op (2-D directly, bias fused) and on
:func:`~theanompi.backend.ops.conv_nd.conv_nd` built from it (1-D, 3-D,
dilation, groups, transposed).

``flip_filters`` defaults to False for the forward convolutions here
(cross-correlation, like the op, cuDNN and PyTorch); Lasagne's default is True
(a true convolution). For a network trained from scratch the two are
equivalent; to load weights trained with Lasagne's default pass
``flip_filters=True``, which flips W inside the graph at a small cost. The
transposed layers default to True, the transpose of an unflipped forward
convolution (Lasagne: False, the transpose of its flipped one).

Example
-------
>>> from theanompi.nn import InputLayer, Conv2DLayer
>>> l = Conv2DLayer(InputLayer((None, 3, 32, 32)), num_filters=16, filter_size=3, pad="same")
>>> l.output_shape, l.W.get_value().shape
((None, 16, 32, 32), (16, 3, 3, 3))
"""

from __future__ import annotations

import numbers

import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from theanompi.backend.ops import conv2d
from theanompi.backend.ops.conv_nd import conv_nd, conv_nd_transpose
from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.base import Layer
from theanompi.nn.utils import as_tuple, int_types

__all__ = [
    "BaseConvLayer", "Conv1DLayer", "Conv2DLayer", "Conv3DLayer", "Deconv2DLayer", "Deconv3DLayer",
    "DilatedConv2DLayer", "TransposedConv2DLayer", "TransposedConv3DLayer", "conv_input_length",
    "conv_output_length",
]

PAD_MODES = ("valid", "full", "same")


def _int_tuple(value, n, name, minimum):
    """``value`` (an int or ``n`` ints) as ``n`` ints ``>= minimum``, or ValueError naming ``name``."""
    try:
        values = as_tuple(value, n, int_types)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an int or {n} ints, got {value!r}") from None
    if any(isinstance(v, bool) for v in values):
        raise ValueError(f"{name} must be an int or {n} ints, got {value!r}")
    if min(values) < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")
    return tuple(int(v) for v in values)


def _int_pair(value, name, minimum):
    return _int_tuple(value, 2, name, minimum)


def _pad_amount(pad, filter_size):
    """Zeros added on each side for a pad spec along one axis ('valid', 'full', 'same' or an int)."""
    if pad == "valid":
        return 0
    if pad == "full":
        return filter_size - 1
    if pad == "same":
        return filter_size // 2
    if not isinstance(pad, int_types):
        raise ValueError(f"Invalid pad: {pad!r}; use an int, 'valid', 'full' or 'same'")
    return pad


def _border(pad, filter_size, cls, argname):
    """``(pad as Lasagne stores it, per-axis ints)`` for a pad/crop spec (int, tuple or mode name)."""
    n = len(filter_size)
    if pad in PAD_MODES:
        if pad == "same" and any(s % 2 == 0 for s in filter_size):
            raise NotImplementedError(f"{cls}: {argname}='same' requires odd filter size, got filter_size="
                                      f"{filter_size}")
        amounts = tuple(_pad_amount(pad, k) for k in filter_size)
        return (amounts if pad == "valid" else pad), amounts
    if isinstance(pad, str):
        raise TypeError(f"{cls}: {argname}={pad!r} is not allowed; use an int or an iterable of int ({n} ints), "
                        "'valid', 'full' or 'same'")
    amounts = _int_tuple(pad, n, f"{cls}: {argname}", 0)
    return amounts, amounts


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
    return (input_length + 2 * _pad_amount(pad, filter_size) - filter_size) // stride + 1


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
    return (output_length - 1) * stride - 2 * _pad_amount(pad, filter_size) + filter_size


def _positive_int(value, name, cls):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{cls}: {name} must be a positive int, got {value!r}")
    return int(value)


class BaseConvLayer(Layer):
    """What every convolution layer shares: its arguments, parameters, output shape, bias and nonlinearity.

    Subclasses give :meth:`convolve` (and :meth:`get_W_shape` where W is laid
    out otherwise).

    Parameters
    ----------
    incoming : Layer or tuple
        (batch, channels, ``n`` spatial axes); channels must be known.
    num_filters : int
        Output channels.
    filter_size, stride : int or ``n`` ints
    pad : int, ``n`` ints, 'valid', 'full' or 'same'
        Zeros on each side: 'valid' 0, 'full' filter_size - 1, 'same'
        filter_size // 2 (odd sizes only: then the output keeps the input's size at stride 1).
    untie_biases : bool
        False: one bias per filter (num_filters,); True: one per output position.
    W : initializer, array, shared variable or expression
        Filters, shape (num_filters, channels / num_groups, filter sizes...).
    b : initializer, array, shared variable, expression or None
        Biases (``regularizable=False``); None: no bias.
    nonlinearity : callable or None
    flip_filters : bool
        False: cross-correlation; True: convolution (W flipped, Lasagne's default).
    num_groups : int
        Channel groups (must divide the input and the output channels).
    n : int, optional
        Spatial axes (default: the input's dimensions - 2).

    Raises
    ------
    ValueError
        For an input of another number of dimensions, unknown channels, a bad
        size/stride/pad, or a ``num_groups`` that does not divide the channels.
    NotImplementedError
        For ``pad='same'`` with an even filter size.

    Example
    -------
    >>> Conv2DLayer((None, 4, 8, 8), 6, 3, num_groups=2).W.get_value().shape
    (6, 2, 3, 3)
    """

    #: What the constructor calls its ``pad`` argument in error messages.
    _pad_argname = "pad"

    def __init__(self, incoming, num_filters, filter_size, stride=1, pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, num_groups=1, n=None, **kwargs):
        super().__init__(incoming, **kwargs)
        cls = type(self).__name__
        if n is None:
            n = len(self.input_shape) - 2
        if n < 1 or len(self.input_shape) != n + 2:
            raise ValueError(f"{cls}: Expected {n + 2} input dimensions (batch, channels, {n} spatial) for a "
                             f"{n}-D convolution, got input shape {self.input_shape}")
        if self.input_shape[1] is None:
            raise ValueError(f"{cls}: the number of input channels must be known, got input shape {self.input_shape}")
        self.n = n
        self.num_filters = _positive_int(num_filters, "num_filters", cls)
        self.filter_size = _int_tuple(filter_size, n, f"{cls}: filter_size", 1)
        self.stride = _int_tuple(stride, n, f"{cls}: stride", 1)
        self.pad, self._pad = _border(pad, self.filter_size, cls, self._pad_argname)
        self.flip_filters = bool(flip_filters)
        self.untie_biases = bool(untie_biases)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        if isinstance(num_groups, bool) or not isinstance(num_groups, numbers.Integral) or num_groups < 1:
            raise ValueError(f"{cls}: num_groups must be positive, got {num_groups!r}")
        if self.num_filters % num_groups or self.input_shape[1] % num_groups:
            raise ValueError(f"{cls}: num_groups (here: {num_groups!r}) must evenly divide the number of input and "
                             f"output channels (here: {self.input_shape[1]} and {self.num_filters})")
        self.num_groups = int(num_groups)
        self._check_sizes()
        self.W = self.add_param(W, self.get_W_shape(), name="W")
        self.b = self._add_bias(b)

    def _check_sizes(self):
        for axis, (size, k, p) in enumerate(zip(self.input_shape[2:], self.filter_size, self._pad), start=2):
            if size is not None and size + 2 * p < k:
                raise ValueError(f"{type(self).__name__}: filter size {k} is larger than the padded input "
                                 f"{size} + 2*{p} along axis {axis} (input shape {self.input_shape})")

    def _add_bias(self, b):
        if b is None:
            return None
        if self.untie_biases:
            positions = self.output_shape[2:]
            if None in positions:
                raise ValueError(f"{type(self).__name__}: untie_biases=True needs a known output size, got output "
                                 f"shape {self.output_shape}")
            shape = (self.num_filters,) + tuple(positions)
        else:
            shape = (self.num_filters,)
        return self.add_param(b, shape, name="b", regularizable=False)

    def get_W_shape(self):
        """The filters' shape: (num_filters, input channels / num_groups, filter sizes...)."""
        return (self.num_filters, self.input_shape[1] // self.num_groups) + self.filter_size

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters) + tuple(
            conv_output_length(size, k, s, p)
            for size, k, s, p in zip(input_shape[2:], self.filter_size, self.stride, self._pad))

    def _filters(self):
        """W as the cross-correlation's filters (flipped along the spatial axes with ``flip_filters``)."""
        if not self.flip_filters:
            return self.W
        return self.W[(slice(None), slice(None)) + (slice(None, None, -1),) * self.n]

    def convolve(self, input, **kwargs):
        """The convolution of ``input`` (no bias, no nonlinearity): given by the subclasses (as in Lasagne)."""
        raise NotImplementedError(f"{type(self).__name__}: BaseConvLayer does not convolve; use Conv1DLayer, "
                                  "Conv2DLayer, Conv3DLayer or a subclass that defines convolve()")

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        if self._fuses_bias(input):
            return self.nonlinearity(conv2d(input, self._filters(), stride=self.stride, pad=self._pad, bias=self.b))
        out = self.convolve(input, **kwargs)
        if self.b is not None:
            pattern = ("x",) + tuple(range(self.b.ndim)) if self.untie_biases else ("x", 0) + ("x",) * self.n
            out = out + self.b.dimshuffle(pattern)
        return self.nonlinearity(out)

    def _fuses_bias(self, input):
        """Whether the 2-D op computes convolution and bias in one pass (one group, tied biases, one dtype)."""
        return (type(self).convolve is _plain_convolve and self.n == 2 and self.num_groups == 1
                and self.b is not None and not self.untie_biases and self.b.ndim == 1
                and input.dtype == self.W.dtype == self.b.dtype)


def _plain_convolve(self, input, **kwargs):
    """The convolution of :class:`Conv1DLayer`, :class:`Conv2DLayer` and :class:`Conv3DLayer` on conv_nd."""
    return conv_nd(input, self._filters(), self.stride, self._pad, groups=self.num_groups)


class Conv1DLayer(BaseConvLayer):
    """1-D convolution of (batch, channels, length) inputs.

    Example
    -------
    >>> Conv1DLayer((None, 3, 20), 8, 5, stride=2, pad="same").output_shape
    (None, 8, 10)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=1, pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, num_groups=1, **kwargs):
        super().__init__(incoming, num_filters, filter_size, stride, pad, untie_biases, W, b, nonlinearity,
                         flip_filters, num_groups, n=1, **kwargs)

    convolve = _plain_convolve


class Conv2DLayer(BaseConvLayer):
    """2-D convolution: ``nonlinearity(conv2d(input, W, stride, pad) + b)``, on the fused C op.

    Parameters as in :class:`BaseConvLayer`; input (batch, channels, rows, cols),
    W (num_filters, channels / num_groups, filter_rows, filter_cols).

    Example
    -------
    >>> l = Conv2DLayer((None, 1, 8, 8), 4, (3, 3), stride=2)
    >>> l.output_shape
    (None, 4, 3, 3)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1), pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, num_groups=1, **kwargs):
        super().__init__(incoming, num_filters, filter_size, stride, pad, untie_biases, W, b, nonlinearity,
                         flip_filters, num_groups, n=2, **kwargs)

    convolve = _plain_convolve


class Conv3DLayer(BaseConvLayer):
    """3-D convolution of (batch, channels, depth, rows, cols) inputs.

    Example
    -------
    >>> Conv3DLayer((None, 2, 6, 8, 8), 4, 3, pad=1).output_shape
    (None, 4, 6, 8, 8)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1, 1), pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, num_groups=1, **kwargs):
        super().__init__(incoming, num_filters, filter_size, stride, pad, untie_biases, W, b, nonlinearity,
                         flip_filters, num_groups, n=3, **kwargs)

    convolve = _plain_convolve


class DilatedConv2DLayer(BaseConvLayer):
    """2-D dilated (atrous) convolution: the filter taps are ``dilation`` apart.

    As in Lasagne: no padding (add a :class:`~theanompi.nn.PadLayer`
    before it), no filter flip, stride 1, and W is laid out (input channels,
    num_filters, filter_rows, filter_cols).

    Raises
    ------
    NotImplementedError
        For a pad other than 0 or ``flip_filters=True``.

    Example
    -------
    >>> l = DilatedConv2DLayer((None, 3, 10, 10), 4, 3, dilation=2)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 4, 6, 6), (3, 4, 3, 3))
    """

    def __init__(self, incoming, num_filters, filter_size, dilation=(1, 1), pad=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=False, **kwargs):
        self.dilation = _int_tuple(dilation, 2, "DilatedConv2DLayer: dilation", 1)
        if pad not in (0, (0, 0), [0, 0], "valid"):
            raise NotImplementedError(f"DilatedConv2DLayer requires pad=0 / (0, 0) / 'valid', got {pad!r}; for a "
                                      "padded dilated convolution, add a PadLayer")
        if flip_filters:
            raise NotImplementedError("DilatedConv2DLayer requires flip_filters=False")
        super().__init__(incoming, num_filters, filter_size, 1, 0, untie_biases, W, b, nonlinearity, False, n=2,
                         **kwargs)
        del self.stride

    def _check_sizes(self):
        for size, k, d in zip(self.input_shape[2:], self.filter_size, self.dilation):
            if size is not None and size < (k - 1) * d + 1:
                raise ValueError(f"DilatedConv2DLayer: the dilated filter ({k - 1} * {d} + 1) is larger than the "
                                 f"input (input shape {self.input_shape})")

    def get_W_shape(self):
        return (self.input_shape[1], self.num_filters) + self.filter_size

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters) + tuple(
            conv_output_length(size, (k - 1) * d + 1, 1, 0)
            for size, k, d in zip(input_shape[2:], self.filter_size, self.dilation))

    def convolve(self, input, **kwargs):
        return conv_nd(input, self.W.dimshuffle(1, 0, 2, 3), dilation=self.dilation)


class _TransposedConvLayer(BaseConvLayer):
    """Transposed convolution over ``n`` spatial axes (see :class:`TransposedConv2DLayer`)."""

    _pad_argname = "crop"

    def __init__(self, incoming, num_filters, filter_size, stride, crop, untie_biases, W, b, nonlinearity,
                 flip_filters, output_size, n, **kwargs):
        cls = type(self).__name__
        if output_size is None or isinstance(output_size, Variable):
            self.output_size = output_size
        else:
            self.output_size = _int_tuple(output_size, n, f"{cls}: output_size", 1)
        super().__init__(incoming, num_filters, filter_size, stride, crop, untie_biases, W, b, nonlinearity,
                         flip_filters, n=n, **kwargs)
        self.crop, self._crop = self.pad, self._pad
        del self.pad, self._pad

    def _check_sizes(self):
        cls = type(self).__name__
        for axis, (size, k, s, p) in enumerate(zip(self.input_shape[2:], self.filter_size, self.stride, self._pad),
                                               start=2):
            smallest = conv_input_length(size, k, s, p)
            if smallest is not None and smallest < 1:
                raise ValueError(f"{cls}: crop {p} leaves no output along axis {axis} (input shape "
                                 f"{self.input_shape}, filter size {k}, stride {s})")
            if self.output_size is None or isinstance(self.output_size, Variable):
                continue
            out = self.output_size[axis - 2]
            if out + 2 * p < k or (size is not None and conv_output_length(out, k, s, p) != size):
                raise ValueError(f"{cls}: output_size={self.output_size!r} is impossible for input shape "
                                 f"{self.input_shape}: along axis {axis} a convolution (filter {k}, stride {s}, "
                                 f"pad {p}) of {out} gives {conv_output_length(out, k, s, p)}, not {size}")

    def get_W_shape(self):
        return (self.input_shape[1], self.num_filters) + self.filter_size

    def _crop_amounts(self):
        return getattr(self, "_crop", None) or self._pad

    def get_output_shape_for(self, input_shape):
        if isinstance(self.output_size, Variable):
            return (input_shape[0], self.num_filters) + (None,) * self.n
        if self.output_size is not None:
            return (input_shape[0], self.num_filters) + self.output_size
        return (input_shape[0], self.num_filters) + tuple(
            conv_input_length(size, k, s, p)
            for size, k, s, p in zip(input_shape[2:], self.filter_size, self.stride, self._crop_amounts()))

    def _output_size(self, input):
        if isinstance(self.output_size, Variable):
            return tuple(self.output_size[i] for i in range(self.n))
        if self.output_size is not None:
            return self.output_size
        return tuple(conv_input_length(input.shape[2 + i], k, s, p) for i, (k, s, p)
                     in enumerate(zip(self.filter_size, self.stride, self._crop_amounts())))

    def _filters(self):
        # flip_filters=True: a true convolution over the dilated input = the transpose of an unflipped forward one
        if self.flip_filters:
            return self.W
        return self.W[(slice(None), slice(None)) + (slice(None, None, -1),) * self.n]

    def convolve(self, input, **kwargs):
        shape = (input.shape[0], self.num_filters) + tuple(self._output_size(input))
        return conv_nd_transpose(input, self._filters(), shape, self.stride, self._crop_amounts())

    def _fuses_bias(self, input):
        return False


class TransposedConv2DLayer(_TransposedConvLayer):
    """Transposed 2-D convolution ("deconvolution"): the gradient of a convolution with respect to its input.

    Each input pixel scatters ``W[c]`` (scaled by its value) into a
    ``stride``-spaced window of the output, the outer ``crop`` rows/columns are
    cut off, then ``b`` and ``nonlinearity`` apply. A convolution with the same
    ``W``, ``stride`` and ``pad=crop`` maps the output shape back to the input shape.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape (batch, channels, rows, columns); channels must be known.
    num_filters : int
        Number of output channels.
    filter_size, stride : int or (int, int)
    crop : int, (int, int), 'valid', 'full' or 'same'
        Rows/columns cut from each border of the full transposed convolution
        (the ``pad`` of the matching convolution).
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
        (the default here). False is Lasagne's default, the transpose of
        ``Conv2DLayer(flip_filters=True)``; pass it for weights trained with Lasagne.
    output_size : int, (int, int), scalar expression vector or None
        At stride > 1 several output sizes convolve back to the input size;
        this picks one. None: the smallest, ``(input - 1) * stride - 2 * crop + filter_size``.

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
        super().__init__(incoming, num_filters, filter_size, stride, crop, untie_biases, W, b, nonlinearity,
                         flip_filters, output_size, n=2, **kwargs)


class TransposedConv3DLayer(_TransposedConvLayer):
    """Transposed 3-D convolution (see :class:`TransposedConv2DLayer`), W (input channels, num_filters, k, k, k).

    Example
    -------
    >>> TransposedConv3DLayer((None, 2, 3, 3, 3), 4, 3, stride=2).output_shape
    (None, 4, 7, 7, 7)
    """

    def __init__(self, incoming, num_filters, filter_size, stride=(1, 1, 1), crop=0, untie_biases=False,
                 W=init.GlorotUniform(), b=init.Constant(0.0), nonlinearity=nonlinearities.rectify,
                 flip_filters=True, output_size=None, **kwargs):
        super().__init__(incoming, num_filters, filter_size, stride, crop, untie_biases, W, b, nonlinearity,
                         flip_filters, output_size, n=3, **kwargs)


#: Lasagne's aliases.
Deconv2DLayer = TransposedConv2DLayer
Deconv3DLayer = TransposedConv3DLayer
