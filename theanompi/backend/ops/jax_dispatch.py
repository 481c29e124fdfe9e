"""JAX implementations of theanompi's Ops (conv, pool, batch norm, momentum, dynamic slice, concrete scalar
arithmetic) for pytensor's JAX backend.

:func:`register` adds them to ``pytensor.link.jax.dispatch.jax_funcify`` when
that module imports (i.e. when jax is installed) and does nothing otherwise,
so this package imports fine without jax. Gradient Ops use ``jax.vjp`` of the
forward function, so they agree with JAX's own differentiation.

Example
-------
>>> from theanompi.backend.ops import jax_dispatch
>>> jax_dispatch.register() in (True, False)
True
"""

from __future__ import annotations

import logging

import numpy as np

from theanompi.backend.ops.batch_norm import BatchNormInfer, BatchNormTrain, BatchNormTrainGrad
from theanompi.backend.ops.concrete_scalars import ConcreteWhenPossible
from theanompi.backend.ops.conv import Conv2d, Conv2dGradBias, Conv2dGradInputs, Conv2dGradWeights
from theanompi.backend.ops.dynamic_slice import DynamicSlice
from theanompi.backend.ops.momentum import MomentumSGD
from theanompi.backend.ops.pool import Pool2d, Pool2dGrad

log = logging.getLogger(__name__)

_registered = False


def _lax_conv(stride, pad):
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    padding = [(pad[0], pad[0]), (pad[1], pad[1])]

    def conv(x, w):
        return jax.lax.conv_general_dilated(
            x, w, window_strides=stride, padding=padding,
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
        )

    return conv


def _lax_pool(pool_size, stride, pad, mode):
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    window = (1, 1, *pool_size)
    strides = (1, 1, *stride)
    padding = ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1]))

    def pool(x):
        # Python-scalar identities let JAX pick its differentiable monoid reducers
        # (reduce_window_max / reduce_window_sum); an array init gives the generic,
        # non-differentiable reduce_window.
        if mode == "max":
            return jax.lax.reduce_window(x, -float("inf"), jax.lax.max, window, strides, padding)
        total = jax.lax.reduce_window(x, 0.0, jax.lax.add, window, strides, padding)
        return total / jnp.array(pool_size[0] * pool_size[1], dtype=x.dtype)

    return pool


def _bn_forward(epsilon):
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    def batch_norm_train(x, gamma, beta):
        axes = (0,) + tuple(range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mean = jnp.mean(x, axis=axes)
        inv_std = 1 / jnp.sqrt(jnp.var(x, axis=axes) + jnp.asarray(epsilon, x.dtype))
        y = (x - mean.reshape(shape)) * (gamma * inv_std).reshape(shape) + beta.reshape(shape)
        return y, mean, inv_std

    return batch_norm_train


def register() -> bool:
    """Register the JAX implementations; return whether the JAX backend is available."""
    global _registered
    if _registered:
        return True
    try:
        import jax  # noqa: F401,PLC0415 - jax is optional (and ~1 s to import): only the JAX mode registers
        from pytensor.link.jax.dispatch import jax_funcify  # noqa: PLC0415 - imports jax
    except Exception as exc:  # ImportError without jax; anything else means a broken jax
        log.debug("JAX dispatch for theanompi ops not registered: %s", exc)
        return False
    _register_conv(jax_funcify)
    _register_pool(jax_funcify)
    _register_batch_norm(jax_funcify)
    _register_momentum(jax_funcify)
    _register_dynamic_slice(jax_funcify)
    _register_concrete_scalars(jax_funcify)
    _registered = True
    return True


def _register_conv(jax_funcify) -> None:
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    @jax_funcify.register(Conv2d)
    def _conv2d(op, **kwargs):
        conv = _lax_conv(op.stride, op.pad)

        def conv2d(x, w, *bias):
            y = conv(x, w)
            return y + bias[0][None, :, None, None] if bias else y

        return conv2d

    @jax_funcify.register(Conv2dGradBias)
    def _conv2d_grad_bias(op, **kwargs):
        def grad_bias(gy):
            return jnp.sum(gy, axis=(0, 2, 3))

        return grad_bias

    @jax_funcify.register(Conv2dGradInputs)
    def _conv2d_grad_inputs(op, **kwargs):
        conv = _lax_conv(op.stride, op.pad)

        def grad_inputs(x, w, gy):
            return jax.vjp(lambda x_: conv(x_, w), x)[1](gy)[0]

        return grad_inputs

    @jax_funcify.register(Conv2dGradWeights)
    def _conv2d_grad_weights(op, **kwargs):
        conv = _lax_conv(op.stride, op.pad)

        def grad_weights(x, w, gy):
            return jax.vjp(lambda w_: conv(x, w_), w)[1](gy)[0]

        return grad_weights


def _register_pool(jax_funcify) -> None:
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    @jax_funcify.register(Pool2d)
    def _pool2d(op, **kwargs):
        return _lax_pool(op.pool_size, op.stride, op.pad, op.mode)

    @jax_funcify.register(Pool2dGrad)
    def _pool2d_grad(op, **kwargs):
        pool = _lax_pool(op.pool_size, op.stride, op.pad, op.mode)

        def pool_grad(x, gy):
            return jax.vjp(pool, x)[1](gy)[0]

        return pool_grad


def _register_batch_norm(jax_funcify) -> None:
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    @jax_funcify.register(BatchNormTrain)
    def _batch_norm_train(op, **kwargs):
        return _bn_forward(op.epsilon)

    @jax_funcify.register(BatchNormTrainGrad)
    def _batch_norm_train_grad(op, **kwargs):
        forward = _bn_forward(op.epsilon)

        def batch_norm_train_grad(x, gamma, mean, inv_std, gy):
            # mean/inv_std are recomputed inside the vjp (same values): the cotangent goes through y only
            _, pullback = jax.vjp(lambda x_, g_, b_: forward(x_, g_, b_)[0], x, gamma, jnp.zeros_like(gamma))
            return pullback(gy)

        return batch_norm_train_grad

    @jax_funcify.register(BatchNormInfer)
    def _batch_norm_infer(op, **kwargs):
        def batch_norm_infer(x, gamma, beta, mean, inv_std):
            shape = (1, -1) + (1,) * (x.ndim - 2)
            scale = gamma * inv_std
            return x * scale.reshape(shape) + (beta - mean * scale).reshape(shape)

        return batch_norm_infer


def _register_momentum(jax_funcify) -> None:
    @jax_funcify.register(MomentumSGD)
    def _momentum_sgd(op, **kwargs):
        n, mu = op.n, op.momentum

        def momentum_sgd(lr, *tensors):
            params, velocities, grads = tensors[:n], tensors[n:2 * n], tensors[2 * n:]
            new_v = [(mu * v - lr.astype(v.dtype) * g).astype(v.dtype) for v, g in zip(velocities, grads)]
            return tuple(p + v for p, v in zip(params, new_v)) + tuple(new_v)

        return momentum_sgd


def _register_dynamic_slice(jax_funcify) -> None:
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)
    import jax.numpy as jnp  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    @jax_funcify.register(DynamicSlice)
    def _dynamic_slice(op, **kwargs):
        axis, length = op.axis, op.length

        def dynamic_slice(x, start):
            start = jnp.where(start < 0, start + x.shape[axis], start)  # Python's negative start
            return jax.lax.dynamic_slice_in_dim(x, start, length, axis=axis)

        return dynamic_slice


def _register_concrete_scalars(jax_funcify) -> None:
    import jax  # noqa: PLC0415 - jax is optional (and ~1 s to import)

    @jax_funcify.register(ConcreteWhenPossible)
    def _concrete_when_possible(op, node, **kwargs):
        inner = op.inner_node(node.inputs)
        traced = jax_funcify(op.op, node=inner, **kwargs)
        dtypes = [v.type.dtype for v in inner.inputs]

        def concrete_when_possible(*args):
            if any(isinstance(a, jax.Array) for a in args):  # a traced value: JAX computes it
                return traced(*args)
            storage = [[None] for _ in inner.outputs]  # shapes and constants: NumPy, so they stay concrete
            op.op.perform(inner, [np.asarray(a, dtype=d) for a, d in zip(args, dtypes)], storage)
            return storage[0][0] if len(storage) == 1 else tuple(out[0] for out in storage)

        return concrete_when_possible
