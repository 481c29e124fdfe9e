"""theanompi.lib.opt, as a model written for Theano-MPI uses it: the two-phase step of N workers equals one process
with N x the batch. (Such models in sessions under a real mpiexec: tests/sessions/test_theanompi_compat.py.)"""

import importlib.util

import numpy as np
import pytest
from conftest import ASSETS

from theanompi.models import current_config
from theanompi.models.contract import WorkerConfig

IDIOM = ASSETS / "theanompi_idiom_models.py"


def _idiom_module():
    spec = importlib.util.spec_from_file_location("theanompi_idiom_models_test", IDIOM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(module, cls_name, rank, size, sync_type):
    config = WorkerConfig(rank=rank, size=size, seed=0, device=f"cpu{rank}", sync_type=sync_type)
    current_config.set_current(config)
    try:
        model = getattr(module, cls_name)(config)
        model.compile_iter_fns(sync_type)
    finally:
        current_config.set_current(None)
    return model


def _load(model, x, y):
    padded_x = np.zeros(model.shared_x.get_value().shape, dtype="float32")
    padded_y = np.zeros(model.shared_y.get_value().shape, dtype="int64")
    padded_x[:len(x)], padded_y[:len(y)] = x, y
    model.shared_x.set_value(padded_x)
    model.shared_y.set_value(padded_y)


@pytest.mark.slow
@pytest.mark.parametrize("cls_name, nesterov", [("DigitsMLP", False), ("DigitsMLP", True),
                                                 ("DigitsMLPPlainSGD", False)])
def test_two_phase_step_equals_one_process_with_twice_the_batch(cls_name, nesterov):
    module = _idiom_module()
    workers = [_build(module, cls_name, r, 2, "cdd") for r in range(2)]
    module.batch_size = module.file_batch_size = 64  # the reference sees both workers' batches at once
    reference = _build(module, cls_name, 0, 1, "local")
    for m in workers + [reference]:
        m.use_nesterov_momentum = nesterov
    if nesterov:  # rebuild the steps with Nesterov momentum
        workers = [_rebuild(m, "cdd", 2) for m in workers]
        reference = _rebuild(reference, "local", 1)
    assert all(len(m.vels) == 4 for m in workers) and reference.vels == []
    x, y = workers[0].data.train[0]
    for step in range(3):
        for r, w in enumerate(workers):
            _load(w, x[32 * r:32 * (r + 1)], y[32 * r:32 * (r + 1)])
            w.get_vel(0)
        for i in range(4):  # the exchange: vels2 = sum over workers of vels
            total = sum(w.vels[i].get_value() for w in workers)
            for w in workers:
                w.vels2[i].set_value(total)
        for w in workers:
            w.descent_vel()
        _load(reference, x, y)
        reference.get_vel(0)
        for w in workers:
            for p, q in zip(w.params, reference.params):
                np.testing.assert_allclose(p.get_value(), q.get_value(), rtol=2e-5, atol=2e-6,
                                           err_msg=f"{cls_name} nesterov={nesterov} step {step} {p.name}")


def _rebuild(model, sync_type, size):
    config = WorkerConfig(rank=model.rank, size=size, seed=0, device="cpu0", sync_type=sync_type)
    current_config.set_current(config)
    try:
        model.compile_iter_fns(sync_type)
    finally:
        current_config.set_current(None)
    return model
