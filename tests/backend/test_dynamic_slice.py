"""Slices of computed bounds and fixed length (theanompi.backend.ops.dynamic_slice) and concrete shape arithmetic
(theanompi.backend.ops.concrete_scalars): what lets JAX mode compile Theano-MPI's sub-batch idiom and the layers
that reshape and flatten."""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from theanompi.backend.compute import pytensor_mode
from theanompi.backend.ops.dynamic_slice import DynamicSlice, fixed_length

jax = pytest.importorskip("jax")

i = pt.iscalar("i")
j = pt.iscalar("j")
half = i // 2  # not affine: an opaque term (a compiled graph merges equal terms before the rewrite reads them)


@pytest.mark.parametrize("index, length", [
    (slice(i * 32, (i + 1) * 32), 32),               # Theano-MPI's sub-batch
    (slice(i, i + 5), 5),
    (slice(3 * i - 2, 3 * i + 4 - 1), 5),
    (slice(half * 4, half * 4 + 4), 4),              # the same opaque term on both sides cancels
    (slice(i + j, j + i + 1), 1),
    (slice(i * 32, (i + 1) * 32, 1), 32),
])
def test_fixed_length_found(index, length):
    assert fixed_length(index) == length


@pytest.mark.parametrize("index", [
    slice(i, 2 * i),                 # the length depends on i
    slice(None, i),                  # starts at 0, ends at i
    slice(i, None),                  # runs to the end
    slice(2, 5),                     # constant bounds: JAX takes them as they are
    slice(i * j, (i + 1) * j),       # a product of two variables is not affine
    slice(i, i + 4, 2),              # a step
    slice(i + 4, i),                 # negative length (empty in NumPy)
])
def test_fixed_length_refused(index):
    assert fixed_length(index) is None


def _sub_batch_graph():
    data = pytensor.shared(np.arange(48, dtype="float32").reshape(12, 4), name="data")
    labels = pytensor.shared(np.arange(12, dtype="int64"), name="labels")
    part = slice(i * 4, (i + 1) * 4)
    x, y = data[part], labels[part]
    return [x.sum(axis=1), y, data[(i // 2) * 2:(i // 2) * 2 + 2, 1], x.reshape((-1, 2)).sum(axis=0)]


def test_sub_batches_compile_in_jax_mode_and_equal_the_c_backend():
    outputs = _sub_batch_graph()
    jax_fn = pytensor.function([i], outputs, mode=pytensor_mode("jax"))
    c_fn = pytensor.function([i], outputs)
    assert any(isinstance(node.op, DynamicSlice) for node in jax_fn.maker.fgraph.toposort())
    for k in range(3):
        for a, b in zip(jax_fn(k), c_fn(k)):
            np.testing.assert_array_equal(np.asarray(a), b)


def test_without_the_rewrite_jax_refuses_the_slice():
    """What the rewrite is for: pytensor's own JAX backend cannot compile a slice of computed bounds."""
    from theanompi.backend.ops.dynamic_slice import TAG

    fn = pytensor.function([i], _sub_batch_graph()[0], mode=pytensor_mode("jax").excluding(TAG))
    with pytest.raises(IndexError, match="static"):
        fn(1)


def test_gradient_through_a_sub_batch_conv_and_flatten_in_jax_mode():
    """Sub-batch i of a shared batch, reshaped to images (``-1``), convolved, flattened (Lasagne's DenseLayer):
    the gradient's shape arithmetic stays concrete (theanompi.backend.ops.concrete_scalars); without that rewrite
    JAX refuses it as a shape."""
    from theanompi.backend.ops import conv2d
    from theanompi.backend.ops.concrete_scalars import TAG

    data = pytensor.shared(np.linspace(-1, 1, 12 * 64, dtype="float32").reshape(12, 64))
    w = pytensor.shared(np.full((2, 1, 3, 3), 0.1, "float32"), name="w")
    dense = pytensor.shared(np.full((128, 3), 0.01, "float32"), name="dense")
    x = data[i * 4:(i + 1) * 4].reshape((-1, 1, 8, 8))
    h = conv2d(x, w, pad=1)
    loss = pt.sum(pt.tanh(h.reshape((x.shape[0], -1)) @ dense) ** 2)
    updates = [(w, w - 0.1 * pytensor.grad(loss, w)), (dense, dense - 0.1 * pytensor.grad(loss, dense))]
    fns = {name: pytensor.function([i], loss, updates=updates, mode=mode)
           for name, mode in (("jax", pytensor_mode("jax")), ("c", None))}
    values = {}
    for name, fn in fns.items():
        w.set_value(np.full((2, 1, 3, 3), 0.1, "float32"))
        dense.set_value(np.full((128, 3), 0.01, "float32"))
        values[name] = [float(fn(k)) for k in (0, 1, 2, 1)], w.get_value(), dense.get_value()
    np.testing.assert_allclose(values["jax"][0], values["c"][0], rtol=1e-5)
    for a, b in zip(values["jax"][1:], values["c"][1:]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    traced = pytensor.function([i], loss, updates=updates, mode=pytensor_mode("jax").excluding(TAG))
    with pytest.raises(TypeError, match="concrete"):
        traced(0)


def test_a_shared_variable_set_to_another_shape_recompiles_in_jax_mode():
    data = pytensor.shared(np.zeros((4, 2), "float32"))
    fn = pytensor.function([], pytensor.grad(pt.sum(data.reshape((-1, 1)) ** 2), data), mode=pytensor_mode("jax"))
    assert np.asarray(fn()).shape == (4, 2)
    data.set_value(np.ones((3, 2), "float32"))
    np.testing.assert_array_equal(np.asarray(fn()), np.full((3, 2), 2.0))


def test_dynamic_slice_perform_follows_jax_semantics():
    x = pt.matrix("x")
    start = pt.iscalar("start")
    out = DynamicSlice(axis=1, length=2)(x, start)
    assert out.type.shape == (None, 2)
    value = np.arange(12, dtype=pytensor.config.floatX).reshape(3, 4)
    c_fn = pytensor.function([x, start], out)
    jax_fn = pytensor.function([x, start], out, mode=pytensor_mode("jax"))
    for s in (0, 1, 2, 3, -1, -4, 9):  # a start past the end moves back; a negative one counts from the end
        np.testing.assert_array_equal(c_fn(value, s), np.asarray(jax_fn(value, s)))
    np.testing.assert_array_equal(c_fn(value, 3), value[:, 2:4])
    np.testing.assert_array_equal(c_fn(value, -3), value[:, 1:3])
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        DynamicSlice(axis=2, length=1)(x, start)
    with pytest.raises(TypeError, match="integer scalar"):
        DynamicSlice(axis=0, length=1)(x, pt.scalar("f"))
