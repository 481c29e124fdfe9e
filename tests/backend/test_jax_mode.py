"""COMPUTE=jax on a CPU jax: parameters stay jax arrays between steps, fused buffers.
(A real BSP session in JAX mode: tests/sessions/test_jax_session.py.)"""

import numpy as np
import pytensor
import pytest

from theanompi.backend.compute import resolve_compute
from theanompi.comm.fused_params import FusedParams, assign
from theanompi.core.session_options import SessionOptions
from theanompi.models.contract import WorkerConfig

jax = pytest.importorskip("jax")


class _Recorder:
    def timer(self, name):
        import contextlib

        return contextlib.nullcontext()

    def record_train(self, loss, error, n):
        self.last = (float(loss), float(error), n)


def _mlp(compute, sync_type, size=1):
    from theanompi.models.mlp import MLP

    config = WorkerConfig(rank=0, size=size, seed=3, device="cpu0", options=SessionOptions(compute=compute),
                          model_options={"hidden": 32})
    model = MLP(config)
    model.compile_iter_fns(sync_type)
    model.adjust_hyperp(0)
    return model


def _storages(model):
    return [v.get_value(borrow=True) for v in model.params + model.state_vars]


def test_resolve_compute_defaults_by_device():
    assert resolve_compute("auto", "cpu0") == "c"
    assert resolve_compute("auto", "node1:cuda3") == "jax"
    assert resolve_compute(None, "cuda0") == "jax"
    assert resolve_compute("jax", "cpu1") == "jax"


@pytest.mark.parametrize("sync_type", ["cdd", "local"])
def test_jax_step_keeps_params_as_device_arrays_and_matches_c(sync_type):
    """Params, velocities and the learning rate are jax.Arrays after compile and after every step;
    the steps compute what the C backend computes."""
    models = {c: _mlp(c, sync_type) for c in ("jax", "c")}
    model = models["jax"]
    assert all(isinstance(s, jax.Array) for s in _storages(model))
    before = [id(s) for s in _storages(model)]
    rec = _Recorder()
    for count in range(5):
        for m in models.values():
            vector = m.train_iter(count, rec)
            if sync_type == "cdd":
                if m is model:
                    assert isinstance(vector, jax.Array) and vector.ndim == 1
                m.apply_update(vector)
    storages = _storages(model)
    assert all(isinstance(s, jax.Array) for s in storages)
    assert [id(s) for s in storages[:len(model.params)]] != before[:len(model.params)]  # updated by the steps
    model._set_lr(0.5)  # a new learning rate stays on the device too
    assert isinstance(model.lr.get_value(borrow=True), jax.Array)
    for a, b in zip(models["jax"].params, models["c"].params):
        np.testing.assert_allclose(np.asarray(a.get_value()), b.get_value(), rtol=1e-5, atol=1e-6)


def test_fused_params_on_jax_arrays():
    shapes = [(2, 3), (4,)]
    params = [pytensor.shared(np.arange(np.prod(s), dtype="float32").reshape(s), name=f"p{i}")
              for i, s in enumerate(shapes)]
    for p in params:
        p.container.storage[0] = jax.device_put(p.get_value(borrow=True))
    for where in ("host", "device"):
        fused = FusedParams(params, where=where)
        assert fused.xp is np and not fused.on_gpu  # a CPU jax's device memory is host memory
        flat = fused.read()
        np.testing.assert_array_equal(flat, np.concatenate([np.arange(6), np.arange(4)]))
        fused.write(flat, scale=2.0)
        flat[:] = -1  # write() copied: the params do not alias the buffer
        assert all(isinstance(p.get_value(borrow=True), jax.Array) for p in params)
        np.testing.assert_array_equal(np.asarray(params[1].get_value()), np.arange(4) * 2)
        fused.write(fused.read(), scale=0.5)
        staged = fused.stage(jax.numpy.arange(10, dtype="float32"))
        assert staged is fused.buffer and staged.flags.writeable and staged[9] == 9
        assert fused.non_finite(jax.numpy.full(10, np.nan, dtype="float32")) == "'p0' (params[0])"
    assign(params[0], np.ones((2, 3), "float32"))
    assert isinstance(params[0].get_value(borrow=True), jax.Array)


def test_dropout_masks_change_between_calls_in_jax_mode_without_a_warning():
    """pytensor's JAX linker runs each function on its own copy of a shared RNG; the copy advances every call."""
    import warnings

    import pytensor.tensor as pt

    from theanompi.backend.compute import pytensor_mode
    from theanompi.nn import DropoutLayer, InputLayer, get_output

    x = pt.matrix("x")
    y = get_output(DropoutLayer(InputLayer((8, 16), x), p=0.5))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step = pytensor.function([x], y, mode=pytensor_mode("jax"))
    assert not [w for w in caught if "RandomType" in str(w.message)]
    ones = np.ones((8, 16), "float32")
    masks = [np.asarray(step(ones)) != 0 for _ in range(3)]
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    assert 0.25 < np.mean(masks) < 0.75
