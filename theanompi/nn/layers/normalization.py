"""Batch normalization (:class:`BatchNormLayer`, :func:`batch_norm`) and its running statistics.

Running statistics in data-parallel training (the policy)
---------------------------------------------------------
``mean`` and ``inv_std`` are *state*, not parameters: they are registered with
``trainable=False, regularizable=False``, so
``get_all_params(net, trainable=True)`` leaves them out while
``get_all_params(net)`` and ``get_all_param_values(net)`` include them (saving
and loading a whole model keeps them).

* A ModelClass exposes ``get_all_params(net, trainable=True)`` as ``params``.
  Then no rule (BSP ``cdd``/``avg``, EASGD, GOSGD, ASGD) exchanges or averages
  the statistics: every worker updates its own running statistics from its own
  shard's batches during training (and normalises each training batch with
  that local batch's statistics, so BSP ``cdd`` with batch norm is *not*
  bit-equal to one process with N× the batch: its normalisation batch is the
  local one).
* Where one model is needed (before validating with ``deterministic=True``,
  before saving the final model) call :func:`sync_running_stats` on every
  worker with a communicator over the workers: every worker then holds the
  pooled statistics — the mean of the workers' means and the variance of the
  mixture of their distributions,
  ``var = mean_i(var_i + mean_i**2) - mean**2``, ``inv_std = 1/sqrt(var + eps)``.
* Do not put ``mean``/``inv_std`` in a ModelClass's ``params``: BSP ``cdd``
  would ask for their gradient (they are not differentiable parameters) and the
  averaging rules would average ``inv_std`` linearly instead of pooling variances.

Example
-------
>>> from theanompi.nn import InputLayer, DenseLayer, BatchNormLayer, get_all_params
>>> net = BatchNormLayer(DenseLayer(InputLayer((None, 8)), 4, b=None))
>>> [p.name for p in get_all_params(net, trainable=True)]
['W', 'beta', 'gamma']
>>> [p.name for p in get_all_params(net)]
['W', 'beta', 'gamma', 'mean', 'inv_std']
"""

from __future__ import annotations

import numbers

import numpy as np
import pytensor.tensor as pt

from theanompi.backend.ops import batch_norm_infer, batch_norm_train
from theanompi.nn import init, nonlinearities
from theanompi.nn.layers.base import Layer, attach_update
from theanompi.nn.layers.dense import NonlinearityLayer
from theanompi.nn.layers.helper import get_all_layers
from theanompi.nn.layers.special import BiasLayer, ScaleLayer

__all__ = [
    "BatchNormLayer", "LocalResponseNormalization2DLayer", "StandardizationLayer", "batch_norm", "get_running_stats",
    "instance_norm", "layer_norm", "pool_running_stats", "sync_running_stats",
]


class BatchNormLayer(Layer):
    """Batch normalization (Ioffe & Szegedy 2015), Lasagne semantics.

    ``y = (x - mean) * inv_std * gamma + beta``, where ``mean``/``inv_std`` are
    the batch's statistics over ``axes`` in training and the running averages
    with ``deterministic=True``.

    Parameters
    ----------
    incoming : Layer or tuple
    axes : 'auto', int or tuple of int
        Axes to normalise over; 'auto' = all but the second (features/channels):
        (0,) for dense input, (0, 2, 3) for convolutional input.
    epsilon : float
        Added to the variance for numerical stability.
    alpha : float
        Running averages: ``running = (1 - alpha) * running + alpha * batch``.
    beta, gamma : initializer, array, shared variable or None
        Shift (``regularizable=False``) and scale (``regularizable=True``); None
        leaves it out.
    mean, inv_std : initializer, array or shared variable
        Running averages; ``trainable=False``, ``regularizable=False``. Training
        outputs (``deterministic=False``) update them through
        :func:`~theanompi.nn.layers.base.attach_update` when compiled with
        ``pytensor.function``. See the module docstring for the policy in
        data-parallel training.

    Notes
    -----
    Data-parallel policy: ``mean``/``inv_std`` are not trainable, so they are
    not in ``get_all_params(net, trainable=True)`` (a ModelClass's ``params``)
    and no rule exchanges them; each worker keeps running statistics of its own
    shard until :func:`sync_running_stats` pools them over the workers (call it
    before a deterministic validation and before saving the final model).

    ``get_output`` keywords: ``batch_norm_use_averages`` (default:
    ``deterministic``), ``batch_norm_update_averages`` (default: not
    ``deterministic``) and ``batch_norm_fused`` (default True: with ``axes``
    all but axis 1 — the 'auto' axes — the output is computed by a fused C op,
    :func:`~theanompi.backend.ops.batch_norm_train` with the batch's statistics,
    :func:`~theanompi.backend.ops.batch_norm_infer` with the running averages;
    False builds the same formula from generic pytensor ops).

    Example
    -------
    >>> l = BatchNormLayer((None, 16, 8, 8))
    >>> l.axes, l.mean.get_value().shape
    ((0, 2, 3), (16,))
    """

    def __init__(self, incoming, axes="auto", epsilon=1e-4, alpha=0.1, beta=init.Constant(0.0),
                 gamma=init.Constant(1.0), mean=init.Constant(0.0), inv_std=init.Constant(1.0), **kwargs):
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if axes == "auto":
            axes = (0,) + tuple(range(2, ndim))
        elif isinstance(axes, numbers.Integral):
            axes = (int(axes),)
        try:
            axes = tuple(int(a) % ndim if -ndim <= int(a) < ndim else None for a in axes)
        except TypeError:
            raise ValueError(f"BatchNormLayer: axes must be 'auto', an int or a tuple of ints, got {axes!r}") from None
        if None in axes or len(set(axes)) != len(axes):
            raise ValueError(f"BatchNormLayer: axes {axes!r} are invalid for input shape {self.input_shape}")
        self.axes = axes
        if not epsilon > 0:
            raise ValueError(f"BatchNormLayer: epsilon must be > 0, got {epsilon!r}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"BatchNormLayer: alpha must be in [0, 1], got {alpha!r}")
        self.epsilon, self.alpha = float(epsilon), float(alpha)
        shape = tuple(size for axis, size in enumerate(self.input_shape) if axis not in self.axes)
        if any(size is None for size in shape):
            raise ValueError(f"BatchNormLayer needs specified input sizes for all axes not normalized over, got "
                             f"input shape {self.input_shape} with axes {self.axes}")
        self.beta = None if beta is None else self.add_param(beta, shape, "beta", trainable=True,
                                                             regularizable=False)
        self.gamma = None if gamma is None else self.add_param(gamma, shape, "gamma", trainable=True,
                                                               regularizable=True)
        self.mean = self.add_param(mean, shape, "mean", trainable=False, regularizable=False, batch_norm_stat=True)
        self.inv_std = self.add_param(inv_std, shape, "inv_std", trainable=False, regularizable=False,
                                      batch_norm_stat=True)

    def get_output_for(self, input, deterministic=False, batch_norm_use_averages=None,
                       batch_norm_update_averages=None, batch_norm_fused=True, **kwargs):
        dtype = input.dtype
        eps = np.asarray(self.epsilon, dtype=dtype)
        use_averages = deterministic if batch_norm_use_averages is None else batch_norm_use_averages
        update_averages = (not deterministic) if batch_norm_update_averages is None else batch_norm_update_averages
        if batch_norm_fused and self._fusable(input):
            if not use_averages:
                return self._fused_output(input, update_averages)
            if not update_averages:
                return self._fused_inference_output(input)
        if not update_averages:
            if use_averages:
                mean, inv_std = self.mean, self.inv_std
            else:
                mean = input.mean(self.axes)
                inv_std = pt.reciprocal(pt.sqrt(input.var(self.axes) + eps))
        else:
            input_mean = input.mean(self.axes)
            input_inv_std = pt.reciprocal(pt.sqrt(input.var(self.axes) + eps))
            running_mean, running_inv_std = self._running_aliases(input_mean, input_inv_std)
            if use_averages:
                mean, inv_std = running_mean, running_inv_std
            else:
                # Put the aliases into the graph so pytensor.function applies their updates.
                zero = np.asarray(0, dtype=dtype)
                mean = input_mean + zero * running_mean
                inv_std = input_inv_std + zero * running_inv_std
        param_axes = iter(range(input.ndim - len(self.axes)))
        pattern = ["x" if axis in self.axes else next(param_axes) for axis in range(input.ndim)]
        beta = 0 if self.beta is None else self.beta.dimshuffle(pattern)
        gamma = 1 if self.gamma is None else self.gamma.dimshuffle(pattern)
        return (input - mean.dimshuffle(pattern)) * (gamma * inv_std.dimshuffle(pattern)) + beta

    def _fusable(self, input) -> bool:
        """Whether the fused ops (``batch_norm_train``, ``batch_norm_infer``) compute this layer's output."""
        return self.axes == (0,) + tuple(range(2, input.ndim)) and input.dtype in ("float32", "float64")

    def _running_aliases(self, batch_mean, batch_inv_std):
        """Aliases of ``mean``/``inv_std`` that move them towards the batch's statistics when compiled."""
        a = np.asarray(self.alpha, dtype=self.mean.dtype)
        one_minus_a = np.asarray(1.0 - self.alpha, dtype=self.mean.dtype)
        return (attach_update(self.mean, lambda r: one_minus_a * r + a * batch_mean.astype(r.dtype)),
                attach_update(self.inv_std, lambda r: one_minus_a * r + a * batch_inv_std.astype(r.dtype)))

    def _gamma_beta(self, input):
        """gamma and beta in ``input``'s dtype (ones and zeros for a layer without them)."""
        dtype = input.dtype
        channels = input.shape[1]
        gamma = pt.ones((channels,), dtype=dtype) if self.gamma is None else pt.cast(self.gamma, dtype)
        beta = pt.zeros((channels,), dtype=dtype) if self.beta is None else pt.cast(self.beta, dtype)
        return gamma, beta

    def _fused_inference_output(self, input):
        """Output with the running averages through the fused op (one C pass)."""
        gamma, beta = self._gamma_beta(input)
        return batch_norm_infer(input, gamma, beta, pt.cast(self.mean, input.dtype), pt.cast(self.inv_std, input.dtype))

    def _fused_output(self, input, update_averages: bool):
        """Training output through the fused op (one C pass forward, one backward)."""
        dtype = input.dtype
        gamma, beta = self._gamma_beta(input)
        out, batch_mean, batch_inv_std = batch_norm_train(input, gamma, beta, self.epsilon)
        if update_averages:
            running_mean, running_inv_std = self._running_aliases(batch_mean, batch_inv_std)
            # Put the aliases into the graph so pytensor.function applies their updates.
            zero = np.asarray(0, dtype=dtype)
            out = out + zero * (running_mean.sum() + running_inv_std.sum())
        return out


def _take_over(layer, suffix, name):
    """Make ``layer`` linear and bias-free for a normalization on top: ``(its nonlinearity, the stack's name)``.

    The nonlinearity (None if it had none) is replaced by the identity; the
    bias is removed from the layer and its parameters. The name is ``name``,
    else the layer's name with ``suffix``, else None.
    """
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is not None:
        layer.nonlinearity = nonlinearities.identity
    if getattr(layer, "b", None) is not None:
        del layer.params[layer.b]
        layer.b = None
    return nonlinearity, name or (f"{layer.name}{suffix}" if getattr(layer, "name", None) else None)


def _suffixed(name, suffix):
    return f"{name}{suffix}" if name else None


def batch_norm(layer, **kwargs):
    """Insert batch normalization before ``layer``'s nonlinearity (Lasagne's ``batch_norm``).

    Removes the layer's bias (beta replaces it) and nonlinearity, stacks a
    :class:`BatchNormLayer` (``kwargs``) and, if there was a nonlinearity, a
    :class:`~theanompi.nn.NonlinearityLayer` on top. Returns the top layer.

    Example
    -------
    >>> from theanompi.nn import DenseLayer, get_all_layers
    >>> top = batch_norm(DenseLayer((None, 10), 5))
    >>> [type(l).__name__ for l in get_all_layers(top)]
    ['DenseLayer', 'BatchNormLayer', 'NonlinearityLayer']
    """
    nonlinearity, name = _take_over(layer, "_bn", kwargs.pop("name", None))
    layer = BatchNormLayer(layer, name=name, **kwargs)
    if nonlinearity is not None and nonlinearity is not nonlinearities.identity:
        layer = NonlinearityLayer(layer, nonlinearity, name=_suffixed(name, "_nonlin"))
    return layer


class StandardizationLayer(Layer):
    """Standardizes each example on its own: ``(x - mean) / sqrt(var + epsilon)`` over ``axes`` (no parameters).

    Unlike batch normalization, the statistics are the example's own (no
    batch axis, nothing kept between batches), the same in training and inference.

    Parameters
    ----------
    incoming : Layer or tuple
    axes : 'auto', 'spatial', 'features', int or tuple of int
        ``'spatial'``: all axes after the second (instance normalization);
        ``'features'``: all after the first (layer normalization); ``'auto'``:
        ``'spatial'``, or axis 1 for a 2-D input.
    epsilon : float
        Added to the variance.

    Example
    -------
    >>> x = pt.constant(np.array([[1.0, 3.0], [0.0, 4.0]], "float32"))
    >>> np.round(StandardizationLayer((None, 2), epsilon=0).get_output_for(x).eval(), 6).tolist()
    [[-1.0, 1.0], [-1.0, 1.0]]
    """

    def __init__(self, incoming, axes="auto", epsilon=1e-4, **kwargs):
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if axes == "auto":
            axes = (1,) if ndim == 2 else tuple(range(2, ndim))
        elif axes == "spatial":
            axes = tuple(range(2, ndim))
        elif axes == "features":
            axes = tuple(range(1, ndim))
        elif isinstance(axes, numbers.Integral):
            axes = (int(axes),)
        self.axes = tuple(axes)
        self.epsilon = epsilon

    def get_output_for(self, input, **kwargs):
        mean = input.mean(self.axes, keepdims=True)
        std = pt.sqrt(input.var(self.axes, keepdims=True) + np.asarray(self.epsilon, dtype=input.dtype))
        return (input - mean) / std


def _learned_affine(layer, name, learn_scale, learn_bias, nonlinearity):
    """``layer`` topped by a :class:`ScaleLayer`, a :class:`BiasLayer` and a NonlinearityLayer, as asked."""
    if learn_scale:
        layer = ScaleLayer(layer, shared_axes="auto", name=_suffixed(name, "_scale"))
    if learn_bias:
        layer = BiasLayer(layer, shared_axes="auto", name=_suffixed(name, "_bias"))
    if nonlinearity is not None:
        layer = NonlinearityLayer(layer, nonlinearity, name=_suffixed(name, "_nonlin"))
    return layer


def instance_norm(layer, learn_scale=True, learn_bias=True, **kwargs):
    """Instance normalization (Ulyanov et al. 2016) before ``layer``'s nonlinearity.

    Like :func:`batch_norm`: the layer's bias and nonlinearity are taken
    over; on top come a :class:`StandardizationLayer` over the spatial axes
    (``kwargs``), a learned per-channel :class:`ScaleLayer` and
    :class:`BiasLayer` (unless ``learn_scale`` / ``learn_bias`` are False) and
    the nonlinearity. Names: ``name`` (or the layer's name + ``'_in'``) with
    ``_scale``, ``_bias``, ``_nonlin``.

    Example
    -------
    >>> from theanompi.nn import Conv2DLayer, get_all_layers
    >>> top = instance_norm(Conv2DLayer((None, 3, 8, 8), 4, 3, name="conv"))
    >>> [layer.name for layer in get_all_layers(top)[1:]]
    ['conv_in', 'conv_in_scale', 'conv_in_bias', 'conv_in_nonlin']
    """
    nonlinearity, name = _take_over(layer, "_in", kwargs.pop("name", None))
    layer = StandardizationLayer(layer, axes="spatial", name=name, **kwargs)
    return _learned_affine(layer, name, learn_scale, learn_bias, nonlinearity)


def layer_norm(layer, **kwargs):
    """Layer normalization (Ba et al. 2016) before ``layer``'s nonlinearity.

    As :func:`instance_norm`, with the statistics over all axes but the first
    (``'features'``) and always a learned scale and bias. Names: ``name`` (or
    the layer's name + ``'_ln'``) with ``_scale``, ``_bias``, ``_nonlin``.

    Example
    -------
    >>> from theanompi.nn import DenseLayer
    >>> top = layer_norm(DenseLayer((None, 10), 5))
    >>> type(top).__name__, type(top.input_layer).__name__
    ('NonlinearityLayer', 'BiasLayer')
    """
    nonlinearity, name = _take_over(layer, "_ln", kwargs.pop("name", None))
    layer = StandardizationLayer(layer, axes="features", name=name, **kwargs)
    return _learned_affine(layer, name, True, True, nonlinearity)


def get_running_stats(layer_or_layers):
    """The (mean, inv_std) shared variables of every BatchNormLayer in the network, in layer order.

    Example
    -------
    >>> [v.name for v in get_running_stats(BatchNormLayer((None, 3)))]
    ['mean', 'inv_std']
    """
    out = []
    for layer in get_all_layers(layer_or_layers):
        if isinstance(layer, BatchNormLayer):
            out += [layer.mean, layer.inv_std]
    return out


def pool_running_stats(means, inv_stds, epsilon):
    """Pool per-worker running statistics into one (mean, inv_std) (float64 arrays).

    ``mean = average(means)``; ``var = average(var_i + mean_i**2) - mean**2`` with
    ``var_i = 1/inv_std_i**2 - epsilon``; ``inv_std = 1/sqrt(var + epsilon)``.

    Example
    -------
    >>> m, s = pool_running_stats([np.zeros(1), np.full(1, 2.0)], [np.ones(1), np.ones(1)], 0.0)
    >>> m.tolist(), s.tolist()
    ([1.0], [0.7071067811865475])
    """
    means = np.asarray(means, dtype=np.float64)
    inv_stds = np.asarray(inv_stds, dtype=np.float64)
    if means.shape != inv_stds.shape:
        raise ValueError(f"pool_running_stats: means have shape {means.shape} but inv_stds {inv_stds.shape}")
    var = np.maximum(1.0 / inv_stds**2 - epsilon, 0.0)
    mean = means.mean(axis=0)
    pooled_var = np.maximum((var + means**2).mean(axis=0) - mean**2, 0.0)
    return mean, 1.0 / np.sqrt(pooled_var + epsilon)


def sync_running_stats(layer_or_layers, comm):
    """Replace every worker's batch-norm running statistics by the pooled ones (collective).

    Call on every worker of ``comm`` (an ``mpi4py`` communicator over the
    workers only, or anything with ``allreduce(array)`` summing numpy arrays and
    ``Get_size()``). One allreduce of one float64 buffer carries all layers'
    statistics; the result is :func:`pool_running_stats` of the workers' values,
    identical on every worker. Returns the number of BatchNormLayers synced.

    Example
    -------
    >>> from mpi4py import MPI                               # doctest: +SKIP
    >>> sync_running_stats(net, MPI.COMM_WORLD)             # doctest: +SKIP
    3
    """
    bn = [lay for lay in get_all_layers(layer_or_layers) if isinstance(lay, BatchNormLayer)]
    if not bn:
        return 0
    parts = []
    for layer in bn:
        m = layer.mean.get_value().astype(np.float64).ravel()
        s = layer.inv_std.get_value().astype(np.float64).ravel()
        var = np.maximum(1.0 / s**2 - layer.epsilon, 0.0)
        parts += [m, var + m**2]
    buffer = np.concatenate(parts)
    total = np.asarray(comm.allreduce(buffer), dtype=np.float64) / comm.Get_size()
    if total.shape != buffer.shape:
        raise ValueError(f"sync_running_stats: workers disagree on the statistics' size: local {buffer.shape}, "
                         f"reduced {total.shape}")
    start = 0
    for layer in bn:
        shape = layer.mean.get_value(borrow=True).shape
        n = int(np.prod(shape))
        mean, second = total[start:start + n], total[start + n:start + 2 * n]
        start += 2 * n
        var = np.maximum(second - mean**2, 0.0)
        floatX = layer.mean.dtype
        layer.mean.set_value(mean.reshape(shape).astype(floatX))
        layer.inv_std.set_value((1.0 / np.sqrt(var + layer.epsilon)).reshape(shape).astype(layer.inv_std.dtype))
    return len(bn)


class LocalResponseNormalization2DLayer(Layer):
    """Local response normalization across channels (Krizhevsky et al. 2012), Lasagne's parametrisation.

    ``y[:, c] = x[:, c] / (k + alpha * sum(x[:, j] ** 2 for j in the n channels centred on c)) ** beta``;
    channels beyond the first and last count as zeros. ``alpha`` is not divided
    by ``n`` (Caffe's ``alpha`` equals ``n`` times this one).

    Parameters
    ----------
    incoming : Layer or tuple
        4-D input (batch, channels, rows, cols).
    alpha, k, beta : float
        Scale, offset (> 0) and exponent of the denominator.
    n : int
        Number of channels in the window; odd and positive.

    Raises
    ------
    ValueError
        For a non-4-D input, a non-positive ``n`` or ``k <= 0``.
    NotImplementedError
        For an even ``n`` (as Lasagne).

    Example
    -------
    >>> l = LocalResponseNormalization2DLayer((None, 16, 8, 8), alpha=1e-4, n=5)
    >>> l.output_shape, l.params
    ((None, 16, 8, 8), OrderedDict())
    """

    def __init__(self, incoming, alpha=1e-4, k=2.0, beta=0.75, n=5, **kwargs):
        super().__init__(incoming, **kwargs)
        cls = "LocalResponseNormalization2DLayer"
        if len(self.input_shape) != 4:
            raise ValueError(f"{cls}: input must be 4-D (batch, channels, rows, cols), got shape {self.input_shape}")
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"{cls}: n must be an odd positive int (the window is centred), got {n!r}")
        if n % 2 == 0:
            raise NotImplementedError(f"{cls}: only odd n are supported (the window is centred), got {n!r}")
        if not k > 0:
            raise ValueError(f"{cls}: k must be > 0, got {k!r}")
        self.alpha, self.k, self.beta, self.n = float(alpha), float(k), float(beta), int(n)

    def get_output_for(self, input, **kwargs):
        dtype = input.dtype
        half = self.n // 2
        squares = pt.square(input)
        if half:
            zeros = pt.zeros((input.shape[0], half, input.shape[2], input.shape[3]), dtype=dtype)
            squares = pt.concatenate([zeros, squares, zeros], axis=1)
        channels = input.shape[1]
        window_sum = squares[:, 0:channels]
        for offset in range(1, self.n):
            window_sum = window_sum + squares[:, offset:offset + channels]
        scale = np.asarray(self.k, dtype) + np.asarray(self.alpha, dtype) * window_sum
        return input * inverse_power(scale, self.beta)


def inverse_power(base, beta: float):
    """``base ** -beta``, through square roots for the usual exponents (0.5, 0.75, 1): C's ``powf`` made
    AlexNet's two LRN layers (beta 0.75) 39 % of its training step, the square roots cost a quarter of that.

    Example
    -------
    >>> import pytensor
    >>> s = pt.vector("s")
    >>> f = pytensor.function([s], [inverse_power(s, 0.75), s ** -0.75])
    >>> fast, generic = f(np.array([1.0, 2.0, 16.0], dtype=s.dtype))
    >>> bool(np.allclose(fast, generic, rtol=1e-6)), float(fast[2])
    (True, 0.125)
    """
    if beta == 1.0:
        return 1.0 / base
    if beta == 0.5:
        return 1.0 / pt.sqrt(base)
    if beta == 0.75:
        root = pt.sqrt(base)
        return 1.0 / (root * pt.sqrt(root))
    return base ** np.asarray(-beta, base.dtype)
