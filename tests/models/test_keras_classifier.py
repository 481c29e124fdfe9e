"""Keras 3 models (theanompi.models.keras_classifier, .keras_torch) in one process, on the Keras backend of this
process (torch unless KERAS_BACKEND says jax); the last test runs this file again on the other backend.
(At launch and under a real mpiexec: tests/sessions/test_jax_keras.py.)"""

import os
import re
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")  # before keras is imported (as theanompi.models.keras_classifier)
pytest.importorskip("keras")

from classifier_checks import (
    check_example_docstring,
    check_momentum_arithmetic,
    check_restore_continues_bit_for_bit,
    check_seed_and_options,
    check_split_step_equals_local_step,
    check_sync_state_averages_the_statistics,
    check_two_workers_average_to_the_double_batch,
    values,
)
from conftest import ROOT

from theanompi.comm.fused_params import FusedParams
from theanompi.comm.param_access import param_name
from theanompi.core.errors import ContractError
from theanompi.models.contract import WorkerConfig, check_model_instance
from theanompi.models.data.digits import load_digits_split
from theanompi.models.loader import load_model_class
from theanompi.session.recorder import Recorder

keras_classifier = pytest.importorskip("theanompi.models.keras_classifier")
keras, BACKEND, KerasClassifierModel = keras_classifier.keras, keras_classifier.BACKEND, \
    keras_classifier.KerasClassifierModel
EXAMPLE = str(ROOT / "examples" / "keras_digits.py")


def make(rank=0, size=1, **model_options):
    """The example's model as worker ``rank`` of ``size`` builds it."""
    cls = load_model_class(EXAMPLE, "DigitsCNN")
    return cls(WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", model_options=model_options))


class DigitsWithState(KerasClassifierModel):
    """Dense - batch norm - dropout - dense: state the steps update (statistics, the dropout seed's state: a seeded
    Dropout draws from it on both backends; an unseeded one on torch draws from torch's global generator)."""

    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt, yt, xv, yv)

    def build_network(self):
        layers = keras.layers
        return keras.Sequential([keras.Input((64,)), layers.Dense(32), layers.BatchNormalization(),
                                 layers.Activation("relu"), layers.Dropout(0.2, seed=self.config.seed),
                                 layers.Dense(10)])


def make_with_state(rank=0, size=1, **model_options):
    return DigitsWithState(WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", model_options=model_options))


def test_example_docstring():
    check_example_docstring(load_model_class(EXAMPLE, "DigitsCNN"))


def test_params_are_the_trainable_variables_in_the_backends_kind_named_by_keras():
    model = make()
    kinds = {"torch": "Parameter", "jax": "ArrayCell"}
    assert {type(p).__name__ for p in model.params} == {kinds[BACKEND]}
    variables = model.keras_model.trainable_variables
    assert [param_name(p) for p in model.params] == [v.path for v in variables]  # (sequential_N/conv2d_M/kernel, ...)
    assert [tuple(p.shape) for p in values(model.params)] == [tuple(v.shape) for v in variables]
    assert sum(v.size for v in values(model.params)) == 17258  # the PyTorch example's network
    check_model_instance(model)


def test_fused_params_read_and_write():
    model = make()
    fused = FusedParams(model.params)
    flat = fused.read().copy()  # (read() refills the fused buffer)
    np.testing.assert_array_equal(flat, np.concatenate([v.ravel() for v in values(model.params)]))
    fused.write(flat * 2, scale=0.25)
    np.testing.assert_allclose(fused.read(), flat * 0.5, rtol=1e-6)
    bad = flat.copy()
    bad[3 * 3 * 16 + 2] = np.nan  # the conv's bias, params[1]
    assert re.fullmatch(r"'sequential(_\d+)?/conv2d(_\d+)?/bias' \(params\[1\]\)", fused.non_finite(bad))


def test_cdd_split_step_equals_local_step():
    assert all(v.shape == (17258,) for v in check_split_step_equals_local_step(make))


def test_two_workers_mean_gradient_is_the_double_batchs():
    check_two_workers_average_to_the_double_batch(make)


def test_momentum_sgd_is_classifier_models_arithmetic():
    check_momentum_arithmetic(make)


def test_seed_builds_the_same_weights_on_every_rank_and_options_are_checked():
    check_seed_and_options(load_model_class(EXAMPLE, "DigitsCNN"), make, index=0)


def test_non_trainable_variables_are_checkpointed_and_updated_by_the_steps():
    model = make_with_state()
    assert [tuple(v.shape) for v in values(model.model_state)] == [(32,), (32,), (2,)]  # BN mean, variance; seed
    assert len(model.state_vars) == 1 + 6 + 3 and len(model.running_stats()) == 2  # lr, 6 momenta, the state
    model.compile_iter_fns("local")
    model.adjust_hyperp(0)
    seed_before = values(model.model_state)[2]
    model.train_iter(0, Recorder(None))
    mean, _, seed = values(model.model_state)
    assert np.abs(mean).max() > 0 and not np.array_equal(seed, seed_before)  # statistics moved; dropout drew


def test_restoring_state_vars_continues_bit_for_bit():
    check_restore_continues_bit_for_bit(make_with_state)


def test_sync_state_averages_batch_norm_statistics_over_workers():
    check_sync_state_averages_the_statistics(make_with_state())


def test_a_build_network_that_returns_no_model_is_a_contract_error():
    class Layers(DigitsWithState):
        def build_network(self):
            return [keras.layers.Dense(10)]

    class Unbuilt(DigitsWithState):
        def build_network(self):
            return keras.Sequential([keras.layers.Dense(10)])

    with pytest.raises(ContractError, match=r"^Layers.build_network must return a keras.Model .*not a list"):
        Layers(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))
    with pytest.raises(ContractError, match=r"^Unbuilt.build_network returned a keras.Model without weights"):
        Unbuilt(WorkerConfig(rank=0, size=1, seed=0, device="cpu0"))


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("THEANOMPI_KERAS_OTHER_BACKEND") == "1", reason="this run is the other backend's")
def test_the_same_checks_pass_on_the_other_backend():
    other = "jax" if BACKEND == "torch" else "torch"
    pytest.importorskip(other)
    env = {**os.environ, "KERAS_BACKEND": other, "THEANOMPI_KERAS_OTHER_BACKEND": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " passed" in proc.stdout and "skipped" in proc.stdout, proc.stdout[-500:]
