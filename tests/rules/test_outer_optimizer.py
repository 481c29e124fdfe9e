"""DiLoCo's outer optimizer in one process: Nesterov SGD on the mean pseudo-gradient against a NumPy replay, lr 1
and momentum 0 as plain averaging, its state. (Under mpiexec: tests/sessions/test_bsp_diloco.py.)"""

import numpy as np
import pytest

from theanompi.core.errors import ContractError
from theanompi.rules.outer_optimizer import OuterOptimizer


def workers(step, n=3, size=50):
    return [np.random.default_rng([step, w]).standard_normal(size).astype(np.float32) for w in range(n)]


def test_three_outer_steps_equal_pytorch_style_nesterov_sgd_replayed_in_numpy():
    lr, mu = 0.7, 0.9
    start = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    outer = OuterOptimizer(start.copy(), lr=lr, momentum=mu)
    theta, buf = start.astype(np.float64), np.zeros(50)
    for step in range(3):
        locals_ = workers(step)
        deltas = [outer.pseudo_gradient(local.copy()) for local in locals_]
        outer.step(np.mean(deltas, axis=0).astype(np.float32))
        delta = np.mean([theta - local for local in locals_], axis=0)  # torch.optim.SGD(nesterov=True), b_0 = 0
        buf = mu * buf + delta
        theta = theta - lr * (delta + mu * buf)
        np.testing.assert_allclose(outer.params, theta, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(outer.momentum_buffer, buf, rtol=1e-5, atol=1e-5)


def test_lr_1_and_momentum_0_is_the_mean_of_the_workers():
    outer = OuterOptimizer(np.zeros(50, np.float32) + 3, lr=1.0, momentum=0.0)
    locals_ = workers(7)
    outer.step(np.mean([outer.pseudo_gradient(local.copy()) for local in locals_], axis=0))
    np.testing.assert_allclose(outer.params, np.mean(locals_, axis=0), rtol=1e-6, atol=1e-6)
    assert outer.momentum_buffer is None and sorted(outer.state()) == ["outer_params"]


def test_state_round_trips_and_refuses_another_size():
    outer = OuterOptimizer(np.ones(4, np.float32), lr=0.5, momentum=0.5)
    outer.step(np.full(4, 0.25, np.float32))
    state = outer.state()
    other = OuterOptimizer(np.zeros(4, np.float32), lr=0.5, momentum=0.5)
    other.load_state(state)
    np.testing.assert_array_equal(other.params, outer.params)
    np.testing.assert_array_equal(other.momentum_buffer, outer.momentum_buffer)
    state["outer_params"][0] = 99  # a copy: the checkpoint does not alias the optimizer
    assert outer.params[0] != 99
    with pytest.raises(ContractError, match="the checkpoint's outer_params has 4 values, the model's parameters 5"):
        OuterOptimizer(np.zeros(5, np.float32), lr=0.5, momentum=0.5).load_state(state)
