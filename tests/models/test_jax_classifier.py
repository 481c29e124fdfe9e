"""JAX (Flax) models (theanompi.models.jax_classifier, .jax_functional; theanompi.comm.array_cell) in one process.
(At launch and under a real mpiexec: tests/sessions/test_jax_keras.py.)"""

import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")

from classifier_checks import (  # noqa: E402
    check_example_docstring,
    check_momentum_arithmetic,
    check_restore_continues_bit_for_bit,
    check_seed_and_options,
    check_split_step_equals_local_step,
    check_sync_state_averages_the_statistics,
    check_two_workers_average_to_the_double_batch,
    values,
)
from conftest import ROOT  # noqa: E402

from theanompi.comm.array_cell import ArrayCell  # noqa: E402
from theanompi.comm.fused_params import FusedParams  # noqa: E402
from theanompi.core.errors import ContractError  # noqa: E402
from theanompi.models.contract import WorkerConfig, check_model_instance  # noqa: E402
from theanompi.models.data.digits import load_digits_split  # noqa: E402
from theanompi.models.jax_classifier import JaxClassifierModel  # noqa: E402
from theanompi.models.loader import load_model_class  # noqa: E402
from theanompi.session.recorder import Recorder  # noqa: E402

EXAMPLE = str(ROOT / "examples" / "jax_digits.py")


def make(rank=0, size=1, **model_options):
    """The example's model as worker ``rank`` of ``size`` builds it."""
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    return cls(WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", model_options=model_options))


class DigitsWithState(JaxClassifierModel):
    """Dense - batch norm - dropout - dense: state the steps update (statistics, the dropout stream's counter)."""

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt, yt, xv, yv)

    def build_network(self):
        rngs = nnx.Rngs(self.config.seed)
        return nnx.Sequential(nnx.Linear(64, 32, rngs=rngs), nnx.BatchNorm(32, rngs=rngs), nnx.relu,
                              nnx.Dropout(0.2, rngs=rngs), nnx.Linear(32, 10, rngs=rngs))


def make_with_state(rank=0, size=1, **model_options):
    return DigitsWithState(WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", model_options=model_options))


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_example_docstring():
    check_example_docstring(load_model_class(EXAMPLE, "DigitsCNN"))


def test_params_are_named_array_cells_of_the_modules_params():
    model = make()
    assert [p.name for p in model.params] == ["conv.bias", "conv.kernel", "hidden.bias", "hidden.kernel", "out.bias",
                                              "out.kernel"]
    assert all(isinstance(p, ArrayCell) for p in model.params)
    assert [p.value.shape for p in model.params][:2] == [(16,), (3, 3, 1, 16)]
    assert [v.name for v in model.state_vars] == ["lr"] + [f"velocity of {p.name}" for p in model.params]
    assert sum(p.value.size for p in model.params) == 17258  # the PyTorch example's network
    check_model_instance(model)


def test_fused_params_read_and_write_array_cells():
    model = make()
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


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_cdd_split_step_equals_local_step():
    model = make()
    model.compile_iter_fns("cdd")
    vector = model.train_iter(0, Recorder(None))
    assert np.shares_memory(vector, np.from_dlpack(model._flat_grad))  # a view of the JAX array, not a copy
    assert not vector.flags.writeable  # (JAX arrays are read-only: the exchange stages it)
    vectors = check_split_step_equals_local_step(make)
    assert all(v.shape == (17258,) for v in vectors)


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_two_workers_mean_gradient_is_the_double_batchs():
    check_two_workers_average_to_the_double_batch(make)


def test_momentum_sgd_is_classifier_models_arithmetic():
    check_momentum_arithmetic(make)


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_weight_decay_is_added_to_the_weights_gradients_only():
    decayed, plain = make(weight_decay=0.01), make()
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


def test_seed_builds_the_same_weights_on_every_rank_and_options_are_checked():
    check_seed_and_options(load_model_class(EXAMPLE, "DigitsCNN"), make, index=1)


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_network_state_is_checkpointed_and_updated_by_the_steps():
    model = make_with_state()
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


@pytest.mark.slow  # compiles JAX steps (seconds)
def test_restoring_state_vars_continues_bit_for_bit():
    check_restore_continues_bit_for_bit(make_with_state)


def test_sync_state_averages_batch_norm_statistics_over_workers():
    model = make_with_state()
    assert [c.name for c in model.model_state] == ["layers.1.mean", "layers.1.var", "layers.3.rngs.count"]
    check_sync_state_averages_the_statistics(model)


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
