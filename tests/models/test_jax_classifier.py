"""JAX (Flax) models (theanompi.models.jax_classifier, .jax_functional; theanompi.comm.array_cell) in one process.
(At launch and under a real mpiexec: tests/sessions/test_jax_models.py.)"""

import doctest
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")

from conftest import ROOT  # noqa: E402

from theanompi.comm.array_cell import ArrayCell  # noqa: E402
from theanompi.comm.fused_params import FusedParams  # noqa: E402
from theanompi.core.errors import ConfigError, ContractError  # noqa: E402
from theanompi.models.contract import WorkerConfig, check_model_instance  # noqa: E402
from theanompi.models.data.digits import load_digits_split  # noqa: E402
from theanompi.models.jax_classifier import JaxClassifierModel  # noqa: E402
from theanompi.models.loader import load_model_class  # noqa: E402
from theanompi.session.recorder import Recorder  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "jax_digits.py")


def digits_cnn(**model_options):
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    return cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=model_options))


def values(cells):
    return [np.asarray(c.value) for c in cells]


class DigitsWithState(JaxClassifierModel):
    """Dense - batch norm - dropout - dense: state the steps update (statistics, the dropout stream's counter)."""

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt, yt, xv, yv)

    def build_network(self):
        rngs = nnx.Rngs(self.config.seed)
        return nnx.Sequential(nnx.Linear(64, 32, rngs=rngs), nnx.BatchNorm(32, rngs=rngs), nnx.relu,
                              nnx.Dropout(0.2, rngs=rngs), nnx.Linear(32, 10, rngs=rngs))


def with_state(**model_options):
    return DigitsWithState(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=model_options))


def test_example_docstring():
    module = sys.modules[load_model_class(EXAMPLE, "DigitsCNN").__module__]
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_params_are_named_array_cells_of_the_modules_params():
    model = digits_cnn()
    assert [p.name for p in model.params] == ["conv.bias", "conv.kernel", "hidden.bias", "hidden.kernel", "out.bias",
                                              "out.kernel"]
    assert all(isinstance(p, ArrayCell) for p in model.params)
    assert [p.value.shape for p in model.params][:2] == [(16,), (3, 3, 1, 16)]
    assert [v.name for v in model.state_vars] == ["lr"] + [f"velocity of {p.name}" for p in model.params]
    assert sum(p.value.size for p in model.params) == 17258  # the PyTorch example's network
    check_model_instance(model)


def test_fused_params_read_and_write_array_cells():
    model = digits_cnn()
    fused = FusedParams(model.params)
    flat = fused.read()
    expected = np.concatenate([v.ravel() for v in values(model.params)])
    np.testing.assert_array_equal(flat, expected)
    fused.write(flat * 2, scale=0.25)
    assert all(isinstance(p.value, jax.Array) for p in model.params)  # new JAX arrays in the cells
    np.testing.assert_allclose(fused.read(), expected * 0.5, rtol=1e-6)
    bad = flat.copy()
    bad[16 + 5] = np.nan  # inside params[1]
    assert fused.non_finite(bad) == "'conv.kernel' (params[1])"


def test_cdd_split_step_equals_local_step():
    a, b = digits_cnn(weight_decay=1e-3), digits_cnn(weight_decay=1e-3)
    a.compile_iter_fns("cdd")
    b.compile_iter_fns("local")
    check_model_instance(a, "cdd")
    rec = Recorder(None)
    for m in (a, b):
        m.adjust_hyperp(0)
    for count in range(5):
        vector = a.train_iter(count, rec)
        assert isinstance(vector, np.ndarray) and vector.flags.c_contiguous and vector.shape == (17258,)
        assert np.shares_memory(vector, np.from_dlpack(a._flat_grad))  # a view of the JAX array, not a copy
        a.apply_update(vector)
        assert b.train_iter(count, rec) is None
    for p, q in zip(values(a.params), values(b.params)):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
    moved = max(float(np.abs(p - q).max()) for p, q in zip(values(a.params), values(digits_cnn().params)))
    assert moved > 1e-3


def test_apply_update_takes_the_mean_of_the_workers_sum():
    """Worker 0 of 2 given the sum of two equal gradients steps as one worker given one (lr * sum / 2)."""
    one = digits_cnn()
    two = load_model_class(EXAMPLE, "DigitsCNN")(WorkerConfig(rank=0, size=2, seed=0, device="cpu0"))
    for m in (one, two):
        m.compile_iter_fns("cdd")
        m.adjust_hyperp(0)
    rec = Recorder(None)
    g = one.train_iter(0, rec).copy()
    one.apply_update(g)
    two.apply_update(2 * g)  # (its own gradient step not taken: the update is what is compared)
    for p, q in zip(values(one.params), values(two.params)):
        np.testing.assert_allclose(p, q, rtol=1e-6, atol=1e-8)


def test_momentum_sgd_is_classifier_models_arithmetic():
    """Two steps with a constant gradient: v1 = -lr g, p1 = p0 + v1; v2 = mu v1 - lr g, p2 = p1 + v2."""
    model = digits_cnn(lr=0.1, momentum=0.5)
    model.compile_iter_fns("cdd")
    model.adjust_hyperp(0)
    start = values(model.params)
    g = np.linspace(-1, 1, 17258).astype("float32")
    model.apply_update(g)
    model.apply_update(g)
    expected = np.concatenate([s.ravel() for s in start]) - 0.1 * g + (0.5 * -0.1 * g - 0.1 * g)
    np.testing.assert_allclose(FusedParams(model.params).read(), expected, rtol=1e-5, atol=1e-6)


def test_weight_decay_is_added_to_the_weights_gradients_only():
    decayed, plain = digits_cnn(weight_decay=0.01), digits_cnn()
    for m in (decayed, plain):
        m.compile_iter_fns("cdd")
        m.adjust_hyperp(0)
    with_decay = decayed.train_iter(0, Recorder(None)).copy()
    without = plain.train_iter(0, Recorder(None)).copy()
    offset = 0
    for p in values(plain.params):
        n = p.size
        decay = 0.01 * p.ravel() if p.ndim > 1 else 0.0
        np.testing.assert_allclose(with_decay[offset:offset + n], without[offset:offset + n] + decay, rtol=1e-5,
                                   atol=1e-7)
        offset += n


def test_seed_builds_the_same_weights_on_every_rank():
    first, second = digits_cnn(), digits_cnn()
    for p, q in zip(values(first.params), values(second.params)):
        np.testing.assert_array_equal(p, q)
    other = load_model_class(EXAMPLE, "DigitsCNN")(WorkerConfig(rank=1, size=2, seed=5, device="cpu1"))
    assert not np.array_equal(values(first.params)[1], values(other.params)[1])


def test_options_checked_like_classifier_model():
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    assert cls.validate_options({})["batch_size"] == 16 and cls.defaults["momentum"] == 0.9
    with pytest.raises(ConfigError, match="model option momentum=1.5 is not allowed"):
        cls.validate_options({"momentum": 1.5})


def test_network_state_is_checkpointed_and_updated_by_the_steps():
    model = with_state()
    names = [c.name for c in model.model_state]
    assert names == ["layers.1.mean", "layers.1.var", "layers.3.rngs.count"]  # not the typed random key
    assert [c.name for c in model.state_vars][-3:] == names and model.running_stats() == model.model_state[:2]
    model.compile_iter_fns("local")
    model.adjust_hyperp(0)
    model.train_iter(0, Recorder(None))
    mean, _, count = values(model.model_state)
    assert int(count) == 1 and np.abs(mean).max() > 0  # dropout drew once; batch norm's mean moved
    before = values(model.params)
    model.val_iter(0, Recorder(None))  # evaluation mode: no dropout draw, statistics kept
    assert int(values(model.model_state)[2]) == 1
    assert all(np.array_equal(p, q) for p, q in zip(before, values(model.params)))
    trained = model.trained_network()
    np.testing.assert_array_equal(np.asarray(trained.layers[1].mean[...]), mean)


def test_restoring_state_vars_continues_bit_for_bit():
    """What RESUME does (worker_loop.restore: assign every param and state var) makes the next steps equal."""
    from theanompi.comm.param_access import assign, host_copy

    a = with_state(weight_decay=1e-4)
    rec = Recorder(None)
    a.compile_iter_fns("local")
    a.adjust_hyperp(0)
    for count in range(3):
        a.train_iter(count, rec)
    saved = [host_copy(v) for v in a.params], [host_copy(v) for v in a.state_vars]
    b = with_state(weight_decay=1e-4)
    b.compile_iter_fns("local")
    b.adjust_hyperp(0)
    for cells, arrays in zip((b.params, b.state_vars), saved):
        for cell, value in zip(cells, arrays):
            assign(cell, value)
    for count in range(3, 6):
        a.train_iter(count, rec)
        b.train_iter(count, rec)
    for p, q in zip(values(a.params) + values(a.state_vars), values(b.params) + values(b.state_vars)):
        np.testing.assert_array_equal(p, q)


def test_sync_state_averages_batch_norm_statistics_over_workers():
    class OtherWorkerHasThreeTimesMine:  # stands in for a 2-worker communicator
        def allreduce(self, buffer):
            return buffer * 4

        def Get_size(self):
            return 2

    model = with_state()
    model.model_state[0].value = jax.numpy.ones(32)
    model.sync_state(OtherWorkerHasThreeTimesMine())
    assert values(model.model_state)[0].tolist() == [2.0] * 32 and values(model.model_state)[1].tolist() == [2.0] * 32
    assert int(values(model.model_state)[2]) == 0  # the counter is not averaged


def test_a_build_network_that_returns_no_module_is_a_contract_error():
    class Layers(DigitsWithState):
        def build_network(self):
            return [nnx.Linear(64, 10, rngs=nnx.Rngs(0))]

    with pytest.raises(ContractError, match=r"^Layers.build_network must return a flax.nnx.Module .*not a list"):
        Layers(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))


def test_importing_theanompi_does_not_import_jax_flax_or_keras():
    code = ("import sys, theanompi, theanompi.runtime.worker_loop, theanompi.comm.param_access, theanompi.rules, "
            "theanompi.models.hyperparams; print(sorted(m for m in ('jax', 'flax', 'keras') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
