"""Checks a classifier ModelClass built on a framework (JAX, Keras) passes in one process, shared by
test_jax_classifier.py and test_keras_classifier.py. Each takes ``make(rank=0, size=1, **model_options)``, which
builds the model as a rank does (``WorkerConfig(rank, size, seed=0, device=f"cpu{rank}")``)."""

import doctest
import sys

import numpy as np
import pytest

from theanompi.comm.fused_params import FusedParams
from theanompi.comm.param_access import assign, host_copy
from theanompi.core.errors import ConfigError
from theanompi.models.contract import WorkerConfig, check_model_instance
from theanompi.session.recorder import Recorder


def values(variables):
    """Host copies of params or state vars, whatever kind."""
    return [host_copy(v) for v in variables]


def compiled(model, sync_type):
    model.compile_iter_fns(sync_type)
    model.adjust_hyperp(0)
    return model


class TwoWorkersComm:
    """Stands in for a 2-worker communicator whose other worker holds three times this one's values."""

    def allreduce(self, buffer):
        return buffer * 4

    def Get_size(self):
        return 2


def check_split_step_equals_local_step(make, steps: int = 5) -> list:
    """``cdd``'s gradient then apply_update equals the local step (weight decay on); the update vectors."""
    a, b = compiled(make(weight_decay=1e-3), "cdd"), compiled(make(weight_decay=1e-3), "local")
    check_model_instance(a, "cdd")
    rec, vectors = Recorder(None), []
    for count in range(steps):
        vector = a.train_iter(count, rec)
        vectors.append(vector)
        assert vector.ndim == 1 and vector.dtype == np.float32 and vector.flags.c_contiguous
        a.apply_update(vector)
        assert b.train_iter(count, rec) is None
    for p, q in zip(values(a.params), values(b.params)):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
    assert max(float(np.abs(p - q).max()) for p, q in zip(values(a.params), values(make().params))) > 1e-3  # moved
    return vectors


def check_two_workers_average_to_the_double_batch(make, steps: int = 3) -> None:
    """BSP cdd's arithmetic: workers 0 and 1 of 2 (batch 16 each) average to one process's batch of 32."""
    one = compiled(make(batch_size=32), "cdd")
    two = [compiled(make(rank=r, size=2, batch_size=16), "cdd") for r in (0, 1)]
    rec = Recorder(None)
    for count in range(steps):
        alone = one.train_iter(count, rec).copy()
        total = sum(m.train_iter(count, rec).copy() for m in two)
        np.testing.assert_allclose(total / 2, alone, rtol=1e-4, atol=1e-6)
        one.apply_update(alone)
        for m in two:
            m.apply_update(total)
    for p, q in zip(values(one.params), values(two[0].params)):
        np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)


def check_momentum_arithmetic(make) -> None:
    """Two updates with one gradient g: v1 = -lr g, p1 = p0 + v1; v2 = mu v1 - lr g, p2 = p1 + v2
    (ClassifierModel's momentum SGD)."""
    model = compiled(make(lr=0.1, momentum=0.5), "cdd")
    start = FusedParams(model.params).read().copy()
    g = np.linspace(-1, 1, start.size).astype("float32")
    model.apply_update(g.copy())
    model.apply_update(g.copy())
    np.testing.assert_allclose(FusedParams(model.params).read(), start - 0.1 * g + (0.5 * -0.1 * g - 0.1 * g),
                               rtol=1e-5, atol=1e-6)


def check_restore_continues_bit_for_bit(make) -> None:
    """What RESUME does (worker_loop.restore: assign every param and state var) makes the next steps equal."""
    a, rec = compiled(make(weight_decay=1e-4), "local"), Recorder(None)
    for count in range(3):
        a.train_iter(count, rec)
    saved = values(a.params), values(a.state_vars)
    b = compiled(make(weight_decay=1e-4), "local")
    for variables, arrays in zip((b.params, b.state_vars), saved):
        for variable, value in zip(variables, arrays):
            assign(variable, value)
    for count in range(3, 6):
        a.train_iter(count, rec)
        b.train_iter(count, rec)
    for p, q in zip(values(a.params) + values(a.state_vars), values(b.params) + values(b.state_vars)):
        np.testing.assert_array_equal(p, q)


def check_sync_state_averages_the_statistics(model) -> None:
    """``sync_state`` averages the floating-point model state (the first two: batch norm's mean and variance, set
    to 1 here) over the workers and leaves the rest (random counters, seed states) alone."""
    for stat in model.model_state[:2]:
        assign(stat, np.ones(np.shape(host_copy(stat)), "float32"))
    others = values(model.model_state[2:])
    model.sync_state(TwoWorkersComm())
    for stat in values(model.model_state[:2]):
        assert stat.tolist() == [2.0] * stat.size
    for before, after in zip(others, values(model.model_state[2:])):
        np.testing.assert_array_equal(before, after)


def check_seed_and_options(cls, make, index: int) -> None:
    """Every rank builds the same initial weights from SEED (another seed, another ``params[index]``), and the
    MODEL_* options are checked as ClassifierModel's (``cls``: the example's ModelClass, whose batch size is 16)."""
    first, second = make(), make()
    for p, q in zip(values(first.params), values(second.params)):
        np.testing.assert_array_equal(p, q)
    other = cls(WorkerConfig(rank=1, size=2, seed=5, device="cpu1"))
    assert not np.array_equal(values(first.params)[index], values(other.params)[index])
    assert cls.validate_options({})["batch_size"] == 16 and cls.defaults["momentum"] == 0.9
    with pytest.raises(ConfigError, match="model option momentum=1.5 is not allowed"):
        cls.validate_options({"momentum": 1.5})


def check_example_docstring(cls) -> None:
    """The docstring examples of the module defining ``cls`` (an example's ModelClass) run and pass."""
    result = doctest.testmod(sys.modules[cls.__module__])
    assert result.attempted > 0 and result.failed == 0
