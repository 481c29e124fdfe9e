"""The fused batch-norm ops: NumPy reference, the graph version, verify_grad, JAX, bad input."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad

import theanompi.nn as L
from theanompi.backend.ops import BatchNormTrain, BatchNormTrainGrad, batch_norm_infer, batch_norm_train
from theanompi.backend.ops.batch_norm import batch_norm_infer_numpy, batch_norm_train_grad_numpy, batch_norm_train_numpy

PY_MODE = Mode(linker="py", optimizer="fast_run")
TOL = {"float32": {"rtol": 2e-4, "atol": 2e-5}, "float64": {"rtol": 1e-9, "atol": 1e-10}}
SHAPES = [(6, 3, 5, 4), (40, 16, 9, 8), (12, 5)]  # small, above the OpenMP threshold, dense
SHAPE_IDS = ["conv", "conv-large", "dense"]


def _data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 + 2).astype(dtype)
    gamma, beta = rng.uniform(0.5, 2, shape[1]).astype(dtype), rng.standard_normal(shape[1]).astype(dtype)
    return x, gamma, beta, rng.standard_normal(shape).astype(dtype)


def _fused_fn(ndim, dtype, eps, mode=None):
    x, gy = pt.tensor("x", dtype=dtype, shape=(None,) * ndim), pt.tensor("gy", dtype=dtype, shape=(None,) * ndim)
    gamma, beta = pt.vector("gamma", dtype=dtype), pt.vector("beta", dtype=dtype)
    y, mean, inv_std = batch_norm_train(x, gamma, beta, eps)
    grads = pytensor.grad((y * gy).sum(), [x, gamma, beta])
    return pytensor.function([x, gamma, beta, gy], [y, mean, inv_std, *grads], mode=mode)


def _independent_reference(x, gamma, beta, gy, eps):
    """Forward and gradient written out in float64, independently of the op's module."""
    x64 = x.astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = x64.mean(axis=axes)
    var = x64.var(axis=axes)
    inv_std = 1 / np.sqrt(var + eps)
    xhat = (x64 - mean.reshape(shape)) * inv_std.reshape(shape)
    y = xhat * gamma.reshape(shape) + beta.reshape(shape)
    m = x.size // x.shape[1]
    dbeta = gy.sum(axis=axes, dtype=np.float64)
    dgamma = (gy * xhat).sum(axis=axes)
    dxhat = gy * gamma.reshape(shape)
    dx = inv_std.reshape(shape) / m * (m * dxhat - dxhat.sum(axis=axes).reshape(shape)
                                       - xhat * (dxhat * xhat).sum(axis=axes).reshape(shape))
    return y, mean, inv_std, dx, dgamma, dbeta


@pytest.mark.parametrize("linker", ["c", "python"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_fused_batch_norm_matches_reference(shape, dtype, linker):
    x, gamma, beta, gy = _data(shape, dtype)
    got = _fused_fn(len(shape), dtype, 1e-3, PY_MODE if linker == "python" else None)(x, gamma, beta, gy)
    for value, expected in zip(got, _independent_reference(x, gamma, beta, gy, 1e-3)):
        assert value.dtype == dtype
        np.testing.assert_allclose(value, expected, **TOL[dtype])


@pytest.mark.parametrize("shape", SHAPES[:1] + SHAPES[2:], ids=["conv", "dense"])
def test_fused_batch_norm_verify_grad(shape):
    x, gamma, beta, _ = _data(shape, "float64", seed=1)
    rng = np.random.default_rng(2)
    verify_grad(lambda x_, g_, b_: batch_norm_train(x_, g_, b_, 1e-3)[0], [x, gamma, beta], rng=rng)
    # the statistics are outputs too; their gradients must hold as well
    verify_grad(lambda x_: batch_norm_train(x_, pt.constant(gamma), pt.constant(beta), 1e-3)[1], [x], rng=rng)
    verify_grad(lambda x_: batch_norm_train(x_, pt.constant(gamma), pt.constant(beta), 1e-3)[2], [x], rng=rng)


def test_grad_op_matches_its_numpy_reference():
    x, gamma, _, gy = _data((5, 4, 3, 3), "float64", seed=3)
    _, mean, inv_std = batch_norm_train_numpy(x, gamma, np.zeros_like(gamma), 1e-3)
    args = [pt.constant(a) for a in (x, gamma, mean, inv_std, gy)]
    got = pytensor.function([], BatchNormTrainGrad(1e-3)(*args))()
    for value, expected in zip(got, batch_norm_train_grad_numpy(x, gamma, mean, inv_std, gy)):
        np.testing.assert_allclose(value, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("input_shape", [(None, 6, 5, 5), (None, 6)], ids=["conv", "dense"])
@pytest.mark.parametrize("with_params", [True, False], ids=["gamma-beta", "no-params"])
def test_layer_fused_output_equals_graph_version(input_shape, with_params):
    """BatchNormLayer: same output, parameter gradients and running statistics with and without the fused op."""
    rng = np.random.default_rng(4)
    x_value = (rng.standard_normal((8, *input_shape[1:])) * 2 + 1).astype("float32")
    results = {}
    for fused in (True, False):
        L.init.set_rng(np.random.default_rng(5))
        kwargs = {} if with_params else {"beta": None, "gamma": None}
        l_in = L.InputLayer(input_shape)
        bn = L.BatchNormLayer(l_in, alpha=0.3, beta=L.init.Normal(1.0), gamma=L.init.Uniform((0.5, 2)), **kwargs) \
            if with_params else L.BatchNormLayer(l_in, alpha=0.3, **kwargs)
        out = L.get_output(bn, batch_norm_fused=fused)
        params = L.get_all_params(bn, trainable=True)
        cost = (out * pt.constant(np.linspace(-1, 1, x_value.size, dtype="float32").reshape(x_value.shape))).sum()
        f = pytensor.function([l_in.input_var], [out, *pytensor.grad(cost, [l_in.input_var, *params])])
        kinds = {type(node.op).__name__ for node in f.maker.fgraph.toposort()}
        assert ("BatchNormTrain" in kinds) == fused
        values = f(x_value)
        values += [bn.mean.get_value(), bn.inv_std.get_value()]  # running statistics after one step
        results[fused] = values
    for a, b in zip(results[True], results[False]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
    assert not np.allclose(results[True][-2], 0)  # the running mean moved


def test_layer_keeps_graph_version_where_the_op_does_not_apply():
    l_in = L.InputLayer((None, 4, 3, 3))
    per_position = L.BatchNormLayer(l_in, axes=(0,))  # statistics per (channel, position): not the op's axes
    kinds = {type(n.op).__name__ for n in pytensor.function([l_in.input_var], L.get_output(per_position))
             .maker.fgraph.toposort()}
    assert "BatchNormTrain" not in kinds
    per_position_inference = L.get_output(per_position, deterministic=True)
    assert "BatchNormInfer" not in {type(n.op).__name__ for n in pytensor.function(
        [l_in.input_var], per_position_inference).maker.fgraph.toposort()}


def _inference_data(shape, dtype, seed=0):
    x, gamma, beta, gy = _data(shape, dtype, seed)
    rng = np.random.default_rng(seed + 1)
    return x, gamma, beta, rng.standard_normal(shape[1]).astype(dtype), rng.uniform(0.2, 3, shape[1]).astype(dtype), gy


def _infer_fn(ndim, dtype, mode=None):
    x, gy = pt.tensor("x", dtype=dtype, shape=(None,) * ndim), pt.tensor("gy", dtype=dtype, shape=(None,) * ndim)
    vectors = [pt.vector(name, dtype=dtype) for name in ("gamma", "beta", "mean", "inv_std")]
    y = batch_norm_infer(x, *vectors)
    grads = pytensor.grad((y * gy).sum(), [x, *vectors])
    return pytensor.function([x, *vectors, gy], [y, *grads], mode=mode)


@pytest.mark.parametrize("linker", ["c", "python"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_inference_op_matches_reference(shape, dtype, linker):
    x, gamma, beta, mean, inv_std, gy = _inference_data(shape, dtype)
    f = _infer_fn(len(shape), dtype, mode=PY_MODE if linker == "python" else None)
    kinds = {type(node.op).__name__ for node in f.maker.fgraph.toposort()}
    assert "BatchNormInfer" in kinds
    y, dx, dgamma, dbeta, dmean, dinv_std = f(x, gamma, beta, mean, inv_std, gy)
    axes = (0,) + tuple(range(2, len(shape)))
    per = (1, -1) + (1,) * (len(shape) - 2)
    x64, gy64 = x.astype(np.float64), gy.astype(np.float64)
    centred = x64 - mean.reshape(per)
    want = centred * (gamma * inv_std.astype(np.float64)).reshape(per) + beta.reshape(per)
    tol = TOL[dtype]
    np.testing.assert_allclose(y, want, **tol)
    np.testing.assert_allclose(batch_norm_infer_numpy(x, gamma, beta, mean, inv_std), want, **tol)
    np.testing.assert_allclose(dx, gy64 * (gamma * inv_std.astype(np.float64)).reshape(per), **tol)
    np.testing.assert_allclose(dgamma, (gy64 * centred).sum(axis=axes) * inv_std, **tol)
    np.testing.assert_allclose(dbeta, gy64.sum(axis=axes), **tol)
    np.testing.assert_allclose(dmean, -gy64.sum(axis=axes) * gamma * inv_std, **tol)
    np.testing.assert_allclose(dinv_std, (gy64 * centred).sum(axis=axes) * gamma, **tol)


@pytest.mark.parametrize("shape", [(3, 2, 3, 2), (4, 3)], ids=["conv", "dense"])
def test_inference_op_verify_grad(shape):
    x, gamma, beta, mean, inv_std, _ = _inference_data(shape, "float64", seed=3)
    verify_grad(lambda *args: batch_norm_infer(*args), [x, gamma, beta, mean, inv_std],
                rng=np.random.default_rng(0))


@pytest.mark.parametrize("input_shape", [(None, 6, 5, 5), (None, 6)], ids=["conv", "dense"])
@pytest.mark.parametrize("with_params", [True, False], ids=["gamma-beta", "no-params"])
def test_layer_inference_output_equals_graph_version(input_shape, with_params):
    """deterministic=True: the fused inference op gives the graph version's output and gradients."""
    rng = np.random.default_rng(7)
    x_value = (rng.standard_normal((5, *input_shape[1:])) * 2 + 1).astype("float32")
    results = {}
    for fused in (True, False):
        L.init.set_rng(np.random.default_rng(8))
        l_in = L.InputLayer(input_shape)
        bn = (L.BatchNormLayer(l_in, beta=L.init.Normal(1.0), gamma=L.init.Uniform((0.5, 2)),
                               mean=L.init.Normal(1.0), inv_std=L.init.Uniform((0.5, 2)))
              if with_params else L.BatchNormLayer(l_in, beta=None, gamma=None, mean=L.init.Normal(1.0)))
        out = L.get_output(bn, deterministic=True, batch_norm_fused=fused)
        params = L.get_all_params(bn, trainable=True)
        f = pytensor.function([l_in.input_var], [out, *pytensor.grad((out ** 2).sum(), [l_in.input_var, *params])])
        assert ("BatchNormInfer" in {type(node.op).__name__ for node in f.maker.fgraph.toposort()}) == fused
        results[fused] = f(x_value)
    for a, b in zip(results[True], results[False]):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_fused_batch_norm_under_jax_matches_c():
    pytest.importorskip("jax")
    from theanompi.backend.ops import jax_dispatch

    assert jax_dispatch.register()
    x, gamma, beta, gy = _data((6, 3, 4, 4), "float32", seed=6)
    c_out = _fused_fn(4, "float32", 1e-3)(x, gamma, beta, gy)
    jax_out = _fused_fn(4, "float32", 1e-3, mode="JAX")(x, gamma, beta, gy)
    for a, b in zip(jax_out, c_out):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4)
    inference = _inference_data((6, 3, 4, 4), "float32", seed=6)
    c_out = _infer_fn(4, "float32")(*inference)
    jax_out = _infer_fn(4, "float32", mode="JAX")(*inference)
    for a, b in zip(jax_out, c_out):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make, message", [
    (lambda: batch_norm_train(pt.vector(), pt.vector(), pt.vector()), r"ndim >= 2\), got ndim=1"),
    (lambda: batch_norm_train(pt.imatrix(), pt.ivector(), pt.ivector()), r"float32 or float64, got 'int32'"),
    (lambda: batch_norm_train(pt.matrix(), pt.matrix(), pt.vector()), r"gamma must be a vector"),
    (lambda: batch_norm_train(pt.dmatrix(), pt.fvector(), pt.dvector()), r"inputs must share one dtype"),
    (lambda: BatchNormTrain(0.0), r"epsilon must be > 0, got 0.0"),
    (lambda: batch_norm_infer(pt.vector(), *[pt.vector()] * 4), r"batch_norm_infer: x must have a batch"),
    (lambda: batch_norm_infer(pt.matrix(), pt.vector(), pt.matrix(), pt.vector(), pt.vector()),
     r"beta must be a vector"),
    (lambda: batch_norm_infer(pt.tensor(shape=(None, 3)), *[pt.tensor(shape=(2,))] * 4),
     r"gamma has 2 entries but x has 3 channels"),
])
def test_bad_symbolic_input_raises_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_runtime_channel_mismatch_raises_value_error():
    x, gamma, beta = pt.dmatrix(), pt.dvector(), pt.dvector()
    f = pytensor.function([x, gamma, beta], batch_norm_train(x, gamma, beta)[0])
    with pytest.raises(ValueError, match=r"gamma must have shape \(3,\)"):
        f(np.ones((4, 3)), np.ones(2), np.ones(3))
    with pytest.raises(ValueError, match=r"no values to normalise over"):
        f(np.ones((0, 3)), np.ones(3), np.ones(3))
    x, vectors = pt.dmatrix(), [pt.dvector() for _ in range(4)]
    g = pytensor.function([x, *vectors], batch_norm_infer(x, *vectors))
    with pytest.raises(ValueError, match=r"batch_norm_infer: inv_std must have shape \(3,\)"):
        g(np.ones((4, 3)), np.ones(3), np.ones(3), np.ones(3), np.ones(2))
    assert g(np.ones((0, 3)), *[np.ones(3)] * 4).shape == (0, 3)  # an empty batch is fine for inference
