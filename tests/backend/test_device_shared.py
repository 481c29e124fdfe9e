"""Shared variables on jax's device (theanompi.backend.device_shared) and JAX mode as a process's default
(theanompi.backend.compute.set_default_compute), on a CPU jax. (In sessions: tests/sessions/test_jax_session.py.)"""

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from theanompi.backend import compute, device_shared
from theanompi.backend.device_shared import DeviceSharedVariable

jax = pytest.importorskip("jax")


@pytest.fixture
def on_device():
    device_shared.install()
    yield
    device_shared.uninstall()


@pytest.fixture
def jax_default(monkeypatch):
    """JAX mode as this process's default for one test; the C backend again after it."""
    monkeypatch.setattr(pytensor.config, "mode", pytensor.config.mode)
    monkeypatch.setattr(compute, "_default", "c")
    compute.set_default_compute("jax", "cpu0")
    yield
    device_shared.uninstall()


@pytest.mark.parametrize("value, dtype, host_dtype", [
    (np.zeros((2, 3), "float32"), "float32", "float32"),
    (np.arange(4, dtype="int64"), "int32", "int64"),      # jax holds 32 bits (x64 off); the host view keeps int64
    (np.float32(0.5), "float32", "float32"),
    (0.5, "float32", "float64"),
    (3, "int32", "int64"),
])
def test_shared_values_live_on_the_device(on_device, value, dtype, host_dtype):
    var = pytensor.shared(value, name="v")
    assert isinstance(var, DeviceSharedVariable)
    stored = var.get_value(borrow=True)
    assert isinstance(stored, jax.Array) and str(stored.dtype) == dtype
    host = var.get_value()
    assert isinstance(host, np.ndarray) and str(host.dtype) == host_dtype
    np.testing.assert_array_equal(host, np.asarray(value))
    var.set_value(np.asarray(value) * 2)
    assert isinstance(var.get_value(borrow=True), jax.Array)
    np.testing.assert_array_equal(var.get_value(), np.asarray(value) * 2)


def test_set_value_is_checked_like_pytensor_and_moved_once(on_device):
    var = pytensor.shared(np.zeros((2, 2), "float32"))
    with pytest.raises(TypeError):
        var.set_value(np.zeros(3, "float32"))  # wrong number of dimensions
    with pytest.raises(TypeError):
        var.set_value(np.zeros((2, 2), "float64"))  # a downcast pytensor refuses
    with jax.transfer_guard("disallow"):  # set_value's transfer is explicit (jax.device_put)
        var.set_value(np.ones((2, 2), "float32"))
    on_jax = jax.numpy.full((2, 2), 3.0, dtype="float32")
    var.set_value(on_jax)
    assert var.get_value(borrow=True) is on_jax


def test_other_shared_variables_are_untouched(on_device):
    rng = pytensor.shared(np.random.default_rng(0))
    assert not isinstance(rng, DeviceSharedVariable)
    device_shared.uninstall()
    assert type(pytensor.shared(np.zeros(2))).__name__ == "TensorSharedVariable"


def test_jax_mode_step_needs_no_host_transfer(on_device):
    """A step whose state is all shared: no host-to-device transfer per call, its updates stay jax arrays."""
    w = pytensor.shared(np.ones(3, "float32"), name="w")
    v = pytensor.shared(np.zeros(3, "float32"), name="v")
    lr = pytensor.shared(np.float32(0.1), name="lr")
    grad = pytensor.grad(pt.sum(w ** 2), w)
    step = pytensor.function([], [], updates=[(v, 0.9 * v - lr * grad), (w, w + 0.9 * v - lr * grad)],
                             mode=compute.pytensor_mode("jax"))
    with jax.transfer_guard("disallow"):
        for _ in range(3):
            step()
    assert all(isinstance(s.get_value(borrow=True), jax.Array) for s in (w, v, lr))
    ref_w, ref_v = np.ones(3, "float32"), np.zeros(3, "float32")
    for _ in range(3):
        g = 2 * ref_w
        ref_w, ref_v = ref_w + 0.9 * ref_v - np.float32(0.1) * g, 0.9 * ref_v - np.float32(0.1) * g
    np.testing.assert_allclose(w.get_value(), ref_w, rtol=1e-6)


def test_set_default_compute_jax_makes_functions_jitted_and_shared_on_device(jax_default):
    assert compute.default_compute() == "jax"
    w = pytensor.shared(np.ones(2, "float32"))
    f = pytensor.function([], [], updates=[(w, w * 2)])  # no mode given: the default
    assert type(f.maker.linker).__name__ == "JAXLinker"
    f()
    assert isinstance(w.get_value(borrow=True), jax.Array) and w.get_value().tolist() == [2.0, 2.0]


def test_set_default_compute_c_changes_nothing():
    mode = pytensor.config.mode
    compute.set_default_compute("c", "cpu0")
    assert pytensor.config.mode == mode and not device_shared.is_installed() and compute.default_compute() == "c"


def test_cuda_device_without_a_gpu_jax_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    mode = pytensor.config.mode
    with pytest.raises(RuntimeError, match=r"cuda0: jax sees 1 cpu device\(s\) \(CUDA_VISIBLE_DEVICES=0\)"):
        compute.set_default_compute("jax", "cuda0")
    assert pytensor.config.mode == mode and not device_shared.is_installed()
