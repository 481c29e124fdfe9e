"""The one-node momentum-SGD op: NumPy reference, the per-parameter graph it replaces, in place and not,
JAX, and bad input."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import get_default_mode

from theanompi.backend.ops import MomentumSGD, momentum_sgd
from theanompi.backend.ops.momentum import INPLACE_TAG

SHAPES = [(3, 2, 3, 3), (5,), (4, 3)]


def momentum_sgd_numpy(lr, momentum, params, velocities, grads):
    """NumPy reference: (new params, new velocities); mu*v in float64, lr*g in the parameter's dtype."""
    new_v = [(momentum * v.astype(np.float64) - (np.asarray(lr, p.dtype) * g)).astype(p.dtype)
             for p, v, g in zip(params, velocities, grads)]
    return [p + v for p, v in zip(params, new_v)], new_v


def _setup(dtype, seed=0):
    rng = np.random.default_rng(seed)
    params = [pytensor.shared(rng.standard_normal(s).astype(dtype), name=f"p{k}", shape=s)
              for k, s in enumerate(SHAPES)]
    velocities = [pytensor.shared(rng.standard_normal(s).astype(dtype), name=f"v{k}", shape=s)
                  for k, s in enumerate(SHAPES)]
    grads = [pt.tensor(f"g{k}", dtype=dtype, shape=s) for k, s in enumerate(SHAPES)]
    lr = pytensor.shared(np.asarray(0.05, dtype=dtype), name="lr")
    feeds = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(3)]
    return params, velocities, grads, lr, feeds


def _values(variables):
    return [v.get_value() for v in variables]


def _op_nodes(fn):
    return [node for node in fn.maker.fgraph.toposort() if isinstance(node.op, MomentumSGD)]


@pytest.mark.parametrize("inplace", [True, False], ids=["inplace", "copy"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_numpy_reference_and_the_per_parameter_graph(dtype, inplace):
    params, velocities, grads, lr, feeds = _setup(dtype)
    start_p, start_v = _values(params), _values(velocities)
    new_p, new_v = momentum_sgd(params, velocities, grads, lr, 0.9)
    mode = get_default_mode() if inplace else get_default_mode().excluding(INPLACE_TAG)
    step = pytensor.function(grads, [], updates=list(zip(params, new_p)) + list(zip(velocities, new_v)), mode=mode)
    (node,) = _op_nodes(step)
    assert node.op.inplace == inplace
    ref_p, ref_v = start_p, start_v
    for feed in feeds:
        step(*feed)
        ref_p, ref_v = momentum_sgd_numpy(np.asarray(0.05, dtype), 0.9, ref_p, ref_v, feed)
    for got, want in zip(_values(params) + _values(velocities), ref_p + ref_v):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
        assert got.dtype == np.dtype(dtype)

    # the graph it replaces (what sgd_updates built per parameter), from the same start
    for var, value in zip(params + velocities, start_p + start_v):
        var.set_value(value)
    updates = []
    for p, v, g in zip(params, velocities, grads):
        v_new = (0.9 * v - lr * g).astype(dtype)
        updates += [(v, v_new), (p, (p + v_new).astype(dtype))]
    graph_step = pytensor.function(grads, [], updates=updates)
    for feed in feeds:
        graph_step(*feed)
    for got, want in zip(_values(params) + _values(velocities), ref_p + ref_v):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_a_parameter_read_in_the_same_step_sees_its_old_value():
    """In place or not, outputs computed from p in the step use p before the update."""
    params, velocities, grads, lr, feeds = _setup("float64", seed=1)
    before = params[0].get_value()
    new_p, new_v = momentum_sgd(params, velocities, grads, lr, 0.5)
    step = pytensor.function(grads, [params[0] * 2, params[0].sum()],
                             updates=list(zip(params, new_p)) + list(zip(velocities, new_v)))
    doubled, total = step(*feeds[0])
    np.testing.assert_allclose(doubled, before * 2)
    np.testing.assert_allclose(total, before.sum())
    assert not np.allclose(params[0].get_value(), before)


def test_model_updates_use_one_node():
    from theanompi.models.contract import WorkerConfig
    from theanompi.models.mlp import MLP

    model = MLP(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={"n_epochs": 1}))
    model.compile_iter_fns(None)
    (node,) = _op_nodes(model._train_fn)
    assert node.op.n == len(model.params) and node.op.inplace
    before = _values(model.params)
    model._train_fn(model.data.x_train[:32], model.data.y_train[:32])
    assert all(not np.allclose(a, b) for a, b in zip(before, _values(model.params)))


def test_under_jax_matches_c():
    pytest.importorskip("jax")
    from theanompi.backend.ops import jax_dispatch

    assert jax_dispatch.register()
    results = {}
    for mode in (None, "JAX"):
        params, velocities, grads, lr, feeds = _setup("float32", seed=2)
        new_p, new_v = momentum_sgd(params, velocities, grads, lr, 0.9)
        step = pytensor.function(grads, new_p + new_v, mode=mode)
        results[mode] = [np.asarray(out) for out in step(*feeds[0])]
    for a, b in zip(results["JAX"], results[None]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: MomentumSGD(0, 0.9), r"needs at least one parameter, got n=0"),
    (lambda: MomentumSGD(1, float("nan")), r"momentum must be a finite number"),
    (lambda: MomentumSGD(2, 0.9)(pt.scalar(), pt.vector(), pt.vector(), pt.vector()),
     r"expected 2 params, velocities and gradients \(6 tensors\), got 3"),
    (lambda: MomentumSGD(1, 0.9)(pt.vector(), pt.vector(), pt.vector(), pt.vector()), r"lr must be a float scalar"),
    (lambda: MomentumSGD(1, 0.9)(pt.scalar(), pt.vector(), pt.matrix(), pt.vector()),
     r"parameter 0 .*the velocity must have the parameter's type"),
    (lambda: momentum_sgd([pt.vector()], [pt.vector(), pt.vector()], [pt.vector()], 0.1, 0.9), r"must pair up"),
])
def test_bad_symbolic_input_raises_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_runtime_shape_mismatch_raises_value_error():
    p, v, g = pt.dvector("p"), pt.dvector("v"), pt.dvector("g")
    f = pytensor.function([p, v, g], list(MomentumSGD(1, 0.9)(np.float64(0.1), p, v, g)))
    with pytest.raises(ValueError, match=r"parameter 0, its velocity and its gradient must have one shape"):
        f(np.ones(3), np.ones(3), np.ones(2))
