import numpy as np
import pytest

from theanompi.core.errors import ConfigError
from theanompi.core.session_options import SessionOptions
from theanompi.models.contract import WorkerConfig, check_model_instance
from theanompi.models.mlp import MLP
from theanompi.session.recorder import Recorder


def config(**kw):
    base = dict(rank=0, size=1, seed=0, device="cpu0", model_options={"hidden": 16, "batch_size": 50})
    base.update(kw)
    return WorkerConfig(**base)


def test_linear_lr_scaling_with_warmup():
    model = MLP(config(size=4, options=SessionOptions(lr_scaling="linear", warmup_epochs=2.0)))
    assert [model.lr_multiplier(e) for e in (0.0, 1.0, 2.0, 7.0)] == [1.0, 2.5, 4.0, 4.0]
    assert MLP(config(size=4)).lr_multiplier(0.0) == 1.0
    model.compile_iter_fns("avg")
    model.adjust_hyperp(1)
    n = model.data.n_batch_train
    model.train_iter(n // 2, Recorder(None))  # half-way through epoch 1 of a 2-epoch warm-up
    assert model.lr.get_value() == pytest.approx(0.05 * (1 + 3 * (1 + (n // 2) / n) / 2), rel=1e-6)


def test_sqrt_lr_scaling_with_warmup():
    """LR_SCALING=sqrt: the factor sqrt(N), reached linearly over WARMUP_EPOCHS, on the rate the steps use."""
    model = MLP(config(size=9, options=SessionOptions(lr_scaling="sqrt", warmup_epochs=2.0)))
    assert [model.lr_multiplier(e) for e in (0.0, 1.0, 2.0, 7.0)] == [1.0, 2.0, 3.0, 3.0]
    model.compile_iter_fns("avg")
    model.adjust_hyperp(2)
    assert model.lr.get_value() == pytest.approx(0.05 * 3.0, rel=1e-6)


def test_options_checked():
    with pytest.raises(ConfigError, match="unknown model option 'dropout'"):
        MLP.validate_options({"dropout": 0.5})
    with pytest.raises(ConfigError, match="hidden='a,b'"):
        MLP.validate_options({"hidden": "a,b"})
    with pytest.raises(ConfigError, match="momentum=1.5"):
        MLP.validate_options({"momentum": 1.5})


def test_cdd_split_step_equals_local_step():
    """train_iter (gradient out) + apply_update(sum of 1 worker) == the one-function local step."""
    a, b = MLP(config()), MLP(config())
    a.compile_iter_fns("cdd")
    b.compile_iter_fns("local")
    check_model_instance(a, "cdd")
    rec = Recorder(None)
    for m in (a, b):
        m.adjust_hyperp(0)
    for count in range(5):
        a.apply_update(a.train_iter(count, rec))
        assert b.train_iter(count, rec) is None
    for p, q in zip(a.params, b.params):
        np.testing.assert_allclose(p.get_value(), q.get_value(), rtol=1e-5, atol=1e-6)


def test_training_reduces_loss():
    model = MLP(config())
    model.compile_iter_fns("local")
    rec = Recorder(None)
    losses = []
    for epoch in range(3):
        model.adjust_hyperp(epoch)
        for count in range(model.data.n_batch_train):
            model.train_iter(count, rec)
        losses.append(rec.train_means()[0])
        rec.end_epoch(epoch, {})
    assert losses[-1] < 0.5 * losses[0]
