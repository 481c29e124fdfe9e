"""Training-mode batch normalization as one fused Op (forward and gradient in C).

``batch_norm_train(x, gamma, beta, epsilon)`` normalises ``x`` (N, C, ...)
over every axis but the channel axis 1 with the batch's statistics and
returns ``(y, mean, inv_std)``::

    mean = x.mean(axes)    inv_std = 1 / sqrt(x.var(axes) + epsilon)
    y = (x - mean) * (gamma * inv_std) + beta

— the graph :class:`~theanompi.nn.BatchNormLayer` builds, in two
passes over memory instead of a dozen generic elementwise and reduction ops.
The gradient is a second fused Op, :class:`BatchNormTrainGrad`, returning
``(dx, dgamma, dbeta)``. Both have NumPy ``perform`` fallbacks and JAX
implementations (:mod:`~theanompi.backend.ops.jax_dispatch`).

Example
-------
>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from theanompi.backend.ops import batch_norm_train
>>> x = pt.tensor4("x"); gamma = pt.vector("gamma"); beta = pt.vector("beta")
>>> y, mean, inv_std = batch_norm_train(x, gamma, beta, epsilon=1e-4)
>>> f = pytensor.function([x, gamma, beta], y)
>>> data = np.arange(16.0, dtype=x.dtype).reshape(2, 2, 2, 2)
>>> out = f(data, np.ones(2, x.dtype), np.zeros(2, x.dtype))
>>> bool(np.allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-6)), bool(np.allclose(out.std(axis=(0, 2, 3)), 1, atol=1e-3))
(True, True)
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type, grad_not_implemented
from pytensor.graph.basic import Apply
from pytensor.link.c.op import COp

from theanompi.backend.ops import _batch_norm_c
from theanompi.backend.ops._common import FLOAT_DTYPES, check_same_dtype

__all__ = ["BatchNormInfer", "BatchNormTrain", "BatchNormTrainGrad", "batch_norm_infer", "batch_norm_train"]


def _reduce_axes(ndim: int) -> tuple[int, ...]:
    return (0,) + tuple(range(2, ndim))


def _per_channel(v, ndim: int):
    """A (C,) vector reshaped to broadcast against an (N, C, ...) array."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def batch_norm_train_numpy(x, gamma, beta, epsilon):
    """NumPy reference of :class:`BatchNormTrain`: (y, mean, inv_std)."""
    axes = _reduce_axes(x.ndim)
    mean = x.mean(axis=axes, dtype=np.float64)
    var = ((x - _per_channel(mean, x.ndim)) ** 2).mean(axis=axes)
    inv_std = 1.0 / np.sqrt(var + epsilon)
    y = (x - _per_channel(mean, x.ndim)) * _per_channel(gamma * inv_std, x.ndim) + _per_channel(beta, x.ndim)
    return y.astype(x.dtype), mean.astype(x.dtype), inv_std.astype(x.dtype)


def batch_norm_train_grad_numpy(x, gamma, mean, inv_std, gy):
    """NumPy reference of :class:`BatchNormTrainGrad`: (dx, dgamma, dbeta)."""
    axes = _reduce_axes(x.ndim)
    count = x.size // x.shape[1]
    xhat = (x.astype(np.float64) - _per_channel(mean, x.ndim)) * _per_channel(inv_std, x.ndim)
    dbeta = gy.sum(axis=axes, dtype=np.float64)
    dgamma = (gy * xhat).sum(axis=axes)
    dx = _per_channel(gamma * inv_std, x.ndim) * (
        gy - _per_channel(dbeta / count, x.ndim) - xhat * _per_channel(dgamma / count, x.ndim))
    return dx.astype(x.dtype), dgamma.astype(x.dtype), dbeta.astype(x.dtype)


def batch_norm_infer_numpy(x, gamma, beta, mean, inv_std):
    """NumPy reference of :class:`BatchNormInfer`."""
    scale = gamma.astype(np.float64) * inv_std
    y = x * _per_channel(scale, x.ndim) + _per_channel(beta - mean * scale, x.ndim)
    return y.astype(x.dtype)


def _check_input(x, op_name: str):
    x = pt.as_tensor_variable(x)
    if x.ndim < 2:
        raise ValueError(f"{op_name}: x must have a batch and a channel axis (ndim >= 2), got ndim={x.ndim}")
    if x.dtype not in FLOAT_DTYPES:
        raise ValueError(f"{op_name}: x must have dtype float32 or float64, got {x.dtype!r}")
    return x


def _check_vector(v, op_name: str, name: str):
    v = pt.as_tensor_variable(v)
    if v.ndim != 1:
        raise ValueError(f"{op_name}: {name} must be a vector (one value per channel), got ndim={v.ndim}")
    return v


class _BatchNormC(COp):
    """The C side shared by the batch-norm ops: support code, cache key, OpenMP."""

    def c_support_code(self, **kwargs):
        return _batch_norm_c.SUPPORT_CODE

    def c_code_cache_version(self):
        return _batch_norm_c.cache_version()

    def c_compile_args(self, **kwargs):
        return ["-fopenmp"]  # channels are shared out over OMP_NUM_THREADS threads

    def c_libraries(self, **kwargs):
        return ["gomp"]

    def grad(self, inputs, output_grads):
        """Legacy entry point; pytensor 3 calls :meth:`pullback`."""
        return self.pullback(inputs, self.make_node(*inputs).outputs, output_grads)


class _BatchNormOpBase(_BatchNormC):
    __props__ = ("epsilon",)

    def __init__(self, epsilon: float = 1e-4):
        if not float(epsilon) > 0:
            raise ValueError(f"batch_norm_train: epsilon must be > 0, got {epsilon!r}")
        self.epsilon = float(epsilon)


class BatchNormTrain(_BatchNormOpBase):
    """``BatchNormTrain(epsilon)(x, gamma, beta)`` -> (y, mean, inv_std), statistics of the batch.

    Example
    -------
    >>> BatchNormTrain(1e-5).epsilon
    1e-05
    """

    def make_node(self, x, gamma, beta):
        x = _check_input(x, "batch_norm_train")
        gamma = _check_vector(gamma, "batch_norm_train", "gamma")
        beta = _check_vector(beta, "batch_norm_train", "beta")
        check_same_dtype("batch_norm_train", x=x, gamma=gamma, beta=beta)
        channels = x.type.shape[1]
        outputs = [x.type(), pt.tensor(dtype=x.dtype, shape=(channels,)), pt.tensor(dtype=x.dtype, shape=(channels,))]
        return Apply(self, [x, gamma, beta], outputs)

    def perform(self, node, inputs, output_storage):
        for storage, value in zip(output_storage, batch_norm_train_numpy(*inputs, self.epsilon)):
            storage[0] = value

    def infer_shape(self, fgraph, node, input_shapes):
        x_shape = input_shapes[0]
        return [tuple(x_shape), (x_shape[1],), (x_shape[1],)]

    def connection_pattern(self, node):
        return [[True, True, True], [True, False, False], [True, False, False]]  # inputs x outputs

    def c_code(self, node, name, inputs, outputs, sub):
        x, gamma, beta = inputs
        y, mean, inv_std = outputs
        return (f"if (tmpi_bn_forward({x}, {gamma}, {beta}, &{y}, &{mean}, &{inv_std}, {self.epsilon!r}) != 0) "
                f"{{ {sub['fail']} }}\n")

    def pullback(self, inputs, outputs, cotangents):
        x, gamma, beta = inputs
        y, mean, inv_std = outputs
        gy, g_mean, g_inv_std = cotangents
        ndim = x.ndim
        if isinstance(gy.type, DisconnectedType):  # only the statistics are used
            dx, dgamma, dbeta = pt.zeros_like(x), disconnected_type(), disconnected_type()
        else:
            dx, dgamma, dbeta = BatchNormTrainGrad(self.epsilon)(x, gamma, mean, inv_std, gy)
        count = pt.cast(x.size // x.shape[1], x.dtype)
        # The statistics are outputs too: their (rarely used) gradients flow back through the graph.
        if not isinstance(g_mean.type, DisconnectedType):
            dx = dx + _per_channel_symbolic(g_mean / count, ndim)
        if not isinstance(g_inv_std.type, DisconnectedType):
            scale = -(inv_std ** 3) * g_inv_std / count
            dx = dx + (x - _per_channel_symbolic(mean, ndim)) * _per_channel_symbolic(scale, ndim)
        return [dx, dgamma, dbeta]


def _per_channel_symbolic(v, ndim: int):
    return v.dimshuffle(["x", 0] + ["x"] * (ndim - 2))


class BatchNormTrainGrad(_BatchNormOpBase):
    """``BatchNormTrainGrad(epsilon)(x, gamma, mean, inv_std, gy)`` -> (dx, dgamma, dbeta).

    Example
    -------
    >>> BatchNormTrainGrad().epsilon
    0.0001
    """

    def make_node(self, x, gamma, mean, inv_std, gy):
        op_name = "batch_norm_train_grad"
        x = _check_input(x, op_name)
        gy = _check_input(gy, op_name)
        gamma, mean, inv_std = (_check_vector(v, op_name, n) for v, n in
                                ((gamma, "gamma"), (mean, "mean"), (inv_std, "inv_std")))
        check_same_dtype(op_name, x=x, gamma=gamma, mean=mean, inv_std=inv_std, gy=gy)
        if gy.ndim != x.ndim:
            raise ValueError(f"{op_name}: gy must have x's ndim {x.ndim}, got {gy.ndim}")
        channels = x.type.shape[1]
        outputs = [x.type(), pt.tensor(dtype=x.dtype, shape=(channels,)), pt.tensor(dtype=x.dtype, shape=(channels,))]
        return Apply(self, [x, gamma, mean, inv_std, gy], outputs)

    def perform(self, node, inputs, output_storage):
        for storage, value in zip(output_storage, batch_norm_train_grad_numpy(*inputs)):
            storage[0] = value

    def infer_shape(self, fgraph, node, input_shapes):
        x_shape = input_shapes[0]
        return [tuple(x_shape), (x_shape[1],), (x_shape[1],)]

    def c_code(self, node, name, inputs, outputs, sub):
        args = ", ".join(inputs) + ", " + ", ".join(f"&{out}" for out in outputs)
        return f"if (tmpi_bn_backward({args}) != 0) {{ {sub['fail']} }}\n"

    def pullback(self, inputs, outputs, cotangents):
        return [grad_not_implemented(self, i, v, "second derivative of the fused batch norm")
                for i, v in enumerate(inputs)]


def batch_norm_train(x, gamma, beta, epsilon: float = 1e-4):
    """Normalise ``x`` over every axis but axis 1 with its own statistics; return (y, mean, inv_std).

    Parameters
    ----------
    x : TensorVariable
        (N, C, ...) float32/float64.
    gamma, beta : TensorVariable
        (C,) scale and shift, ``x``'s dtype.
    epsilon : float
        Added to the (biased) variance.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> y, mean, inv_std = batch_norm_train(pt.matrix("x"), pt.vector("g"), pt.vector("b"))
    >>> y.ndim, mean.ndim
    (2, 1)
    """
    return BatchNormTrain(epsilon)(x, gamma, beta)


class BatchNormInfer(_BatchNormC):
    """``BatchNormInfer()(x, gamma, beta, mean, inv_std)`` -> y, normalised with the given statistics.

    ``y = (x - mean) * (gamma * inv_std) + beta`` over channel axis 1: the output
    of :class:`~theanompi.nn.BatchNormLayer` with its running averages
    (validation), one C pass instead of four broadcasts and an elementwise op.

    Example
    -------
    >>> import pytensor.tensor as pt
    >>> y = BatchNormInfer()(pt.tensor4("x"), *[pt.vector(n) for n in ("gamma", "beta", "mean", "inv_std")])
    >>> y.type.ndim, type(y.owner.op).__name__
    (4, 'BatchNormInfer')
    """

    __props__ = ()

    def make_node(self, x, gamma, beta, mean, inv_std):
        op_name = "batch_norm_infer"
        x = _check_input(x, op_name)
        vectors = [_check_vector(v, op_name, n) for v, n in
                   ((gamma, "gamma"), (beta, "beta"), (mean, "mean"), (inv_std, "inv_std"))]
        check_same_dtype(op_name, x=x, **dict(zip(("gamma", "beta", "mean", "inv_std"), vectors)))
        channels = x.type.shape[1]
        for name, v in zip(("gamma", "beta", "mean", "inv_std"), vectors):
            if channels is not None and v.type.shape[0] not in (None, channels):
                raise ValueError(f"{op_name}: {name} has {v.type.shape[0]} entries but x has {channels} channels")
        return Apply(self, [x, *vectors], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = batch_norm_infer_numpy(*inputs)

    def infer_shape(self, fgraph, node, input_shapes):
        return [tuple(input_shapes[0])]

    def c_code(self, node, name, inputs, outputs, sub):
        return f"if (tmpi_bn_infer({', '.join(inputs)}, &{outputs[0]}) != 0) {{ {sub['fail']} }}\n"

    def pullback(self, inputs, outputs, cotangents):
        x, gamma, beta, mean, inv_std = inputs
        (gy,) = cotangents
        ndim = x.ndim
        axes = _reduce_axes(ndim)
        centred = x - _per_channel_symbolic(mean, ndim)
        sum_gy = gy.sum(axis=axes)
        sum_gy_centred = (gy * centred).sum(axis=axes)
        return [gy * _per_channel_symbolic(gamma * inv_std, ndim),
                sum_gy_centred * inv_std,
                sum_gy,
                -sum_gy * gamma * inv_std,
                sum_gy_centred * gamma]


def batch_norm_infer(x, gamma, beta, mean, inv_std):
    """Normalise ``x`` over every axis but axis 1 with the given statistics (see :class:`BatchNormInfer`).

    Example
    -------
    >>> import numpy as np, pytensor, pytensor.tensor as pt
    >>> x = pt.matrix("x"); v = [pt.vector(n) for n in ("gamma", "beta", "mean", "inv_std")]
    >>> f = pytensor.function([x, *v], batch_norm_infer(x, *v))
    >>> one = np.ones(2, x.dtype)
    >>> f(np.full((1, 2), 3, x.dtype), one, one, one, one * 0.5).tolist()
    [[2.0, 2.0]]
    """
    return BatchNormInfer()(x, gamma, beta, mean, inv_std)
