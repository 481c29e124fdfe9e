"""Initializers: distributions, bounds, fan computations, the shared seeded generator."""

import numpy as np
import pytensor
import pytest

from theanompi.nn import init


@pytest.fixture(autouse=True)
def _seed():
    init.set_rng(np.random.default_rng(123))


def test_glorot_uniform_bounds_and_std_dense_and_conv():
    for shape, fans in (((300, 200), 500), ((32, 16, 3, 3), (32 + 16) * 9)):
        w = init.GlorotUniform().sample(shape)
        bound = np.sqrt(6.0 / fans)
        assert w.shape == shape and w.dtype == np.dtype(pytensor.config.floatX)
        assert np.abs(w).max() <= bound + 1e-7
        assert np.abs(w).max() > 0.95 * bound
        assert np.std(w) == pytest.approx(np.sqrt(2.0 / fans), rel=0.05)
        assert abs(np.mean(w)) < 0.05 * bound
    w = init.GlorotUniform(gain="relu").sample((300, 200))
    assert np.abs(w).max() <= np.sqrt(2) * np.sqrt(6.0 / 500) + 1e-7
    assert np.abs(w).max() > 0.95 * np.sqrt(2) * np.sqrt(6.0 / 500)


def test_glorot_normal_he_normal_he_uniform_std():
    assert np.std(init.GlorotNormal().sample((400, 600))) == pytest.approx(np.sqrt(2.0 / 1000), rel=0.03)
    assert np.std(init.HeNormal(gain="relu").sample((64, 8, 5, 5))) == pytest.approx(np.sqrt(2.0 / 200), rel=0.03)
    assert np.std(init.HeNormal().sample((500, 300))) == pytest.approx(np.sqrt(1.0 / 500), rel=0.03)
    w = init.HeUniform().sample((250, 400))
    assert np.abs(w).max() <= np.sqrt(3.0 / 250) + 1e-7
    assert np.std(w) == pytest.approx(np.sqrt(1.0 / 250), rel=0.03)


def test_normal_uniform_constant_orthogonal():
    w = init.Normal(std=0.5, mean=2.0).sample((200, 200))
    assert np.mean(w) == pytest.approx(2.0, abs=0.02) and np.std(w) == pytest.approx(0.5, rel=0.02)
    u = init.Uniform(0.3).sample((100, 100))
    assert -0.3 <= u.min() < -0.29 and 0.29 < u.max() <= 0.3
    u = init.Uniform((1.0, 2.0)).sample((1000,))
    assert 1.0 <= u.min() and u.max() <= 2.0
    u = init.Uniform(std=0.2, mean=1.0).sample((200, 200))
    assert np.std(u) == pytest.approx(0.2, rel=0.02) and np.mean(u) == pytest.approx(1.0, abs=0.01)
    c = init.Constant(0.25)((3, 2))
    assert c.dtype == np.dtype(pytensor.config.floatX) and np.all(c == 0.25)
    q = init.Orthogonal().sample((6, 2, 5)).reshape(6, 10).astype(np.float64)
    np.testing.assert_allclose(q @ q.T, np.eye(6), atol=1e-5)


def test_set_rng_makes_every_rank_identical():
    init.set_rng(np.random.RandomState(7))
    a = [init.GlorotUniform().sample((5, 4)), init.Normal().sample((3,))]
    init.set_rng(7)  # an int seed is accepted too: RandomState(7)
    b = [init.GlorotUniform().sample((5, 4)), init.Normal().sample((3,))]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    init.set_rng(np.random.default_rng(7))  # a numpy Generator works as well
    assert init.HeNormal().sample((4, 4)).shape == (4, 4)
    init.set_rng(8)
    assert not np.array_equal(init.GlorotUniform().sample((5, 4)), a[0])
    assert isinstance(init.get_rng(), np.random.RandomState)  # an int seed gives Lasagne's kind
    init.get_rng().seed(1)


def test_errors_quote_values():
    with pytest.raises(RuntimeError, match=r"at least 2 dimensions, got \(5,\)"):  # Lasagne's error type
        init.GlorotUniform().sample((5,))
    with pytest.raises(ValueError, match="gain must be .* got 'tanh'"):
        init.HeNormal(gain="tanh")
    with pytest.raises(ValueError, match="std must be >= 0, got -1"):
        init.Normal(std=-1)
    with pytest.raises(ValueError, match="got 'seed'"):
        init.set_rng("seed")
