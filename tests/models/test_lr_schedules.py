"""The session's learning-rate schedule reaches every kind of model at every step (pytensor, PyTorch, Theano-MPI's
``shared_lr``), against the closed form; a model with a schedule of its own keeps it, and says so."""

import numpy as np
import pytensor
import pytest
import torch

from theanompi.core.errors import ConfigError
from theanompi.core.lr_schedule import LRSchedule
from theanompi.core.session_options import SessionOptions
from theanompi.models.contract import WorkerConfig
from theanompi.models.data.digits import load_digits_split
from theanompi.models.hyperparams import ImageClassifierHyperParams
from theanompi.models.mlp import MLP
from theanompi.models.theano_mpi_adapter import TheanoMPIModel
from theanompi.models.torch_classifier import TorchClassifierModel
from theanompi.runtime.model_build import lr_schedule_note
from theanompi.session.recorder import Recorder

COSINE = SessionOptions(lr_schedule="cosine", lr_min=0.001, lr_scaling="linear", warmup_epochs=1.0, n_epochs=3)
STEP = SessionOptions(lr_schedule="step", lr_decay_epochs="1,2", lr_decay=0.5, n_epochs=3)
#: a warm-up from a quarter of the rate, unscaled, over 2 of 3 epochs (then constant)
WARM_START = SessionOptions(warmup_epochs=2.0, warmup_start_factor=0.25, n_epochs=3)


def closed_form(options, n_workers, base, progress):
    """The documented formula, written out again."""
    full = n_workers if options.lr_scaling == "linear" else 1.0
    start = options.warmup_start_factor
    ramp = full if progress >= options.warmup_epochs else start + (full - start) * progress / options.warmup_epochs
    peak = base * ramp
    if options.lr_schedule == "constant":
        return peak
    if options.lr_schedule == "cosine":
        return options.lr_min + (peak - options.lr_min) * 0.5 * (1 + np.cos(np.pi * min(progress / 3, 1.0)))
    return peak * 0.5 ** sum(progress >= m for m in (1, 2))


def rates_seen(model, read_lr, sync_type="local"):
    """(progress, the rate the step ran with) over two epochs' first, middle and last steps."""
    model.compile_iter_fns(sync_type)
    n, seen = model.data.n_batch_train, []
    for epoch in (0, 1, 2):
        model.adjust_hyperp(epoch)
        for count in (0, n // 2, n - 1):
            model.train_iter(count, Recorder(None))
            seen.append((epoch + count / n, read_lr()))
    return seen


@pytest.mark.parametrize("options", [COSINE, STEP, WARM_START], ids=["cosine", "step", "warm-start"])
@pytest.mark.parametrize("sync_type", ["local", "cdd"])
def test_pytensor_model_steps_at_the_scheduled_rate(options, sync_type):
    model = MLP(WorkerConfig(rank=0, size=2, seed=0, device="cpu0", options=options,
                             model_options={"hidden": 8, "batch_size": 100}))
    assert model.own_lr_schedule is None
    for progress, lr in rates_seen(model, lambda: float(model.lr.get_value()), sync_type):
        assert lr == pytest.approx(closed_form(options, 2, 0.05, progress), rel=1e-6)
    assert model.learning_rate() == pytest.approx(lr)


class TorchSoftmax(TorchClassifierModel):
    def build_data(self):
        (xt, yt), (xv, yv) = load_digits_split()
        return self.shard(xt, yt, xv, yv)

    def build_network(self):
        return torch.nn.Linear(64, 10)


@pytest.mark.parametrize("options", [COSINE, STEP, WARM_START], ids=["cosine", "step", "warm-start"])
def test_torch_model_steps_at_the_scheduled_rate(options):
    model = TorchSoftmax(WorkerConfig(rank=0, size=2, seed=0, device="cpu0", options=options,
                                      model_options={"batch_size": 100, "lr": 0.1}))
    for progress, lr in rates_seen(model, lambda: float(model.lr)):
        assert lr == pytest.approx(closed_form(options, 2, 0.1, progress), rel=1e-6)


class _Data:
    n_batch_train, n_batch_val = 4, 1


class _TheanoMPIStyle:
    """A Theano-MPI-style model: its rate in ``shared_lr``, a step per call."""

    def __init__(self, decays_itself=False):
        self.params, self.data, self.n_subb, self.epoch = [], _Data(), 1, None
        self.shared_lr = pytensor.shared(np.float32(0.01))
        self.decays_itself, self.seen = decays_itself, []

    def compile_iter_fns(self, *args): ...
    def reset_iter(self, mode): ...
    def cleanup(self): ...
    def val_iter(self, count, recorder): ...

    def train_iter(self, count, recorder):
        self.seen.append(float(self.shared_lr.get_value()))

    def adjust_hyperp(self, epoch):
        if self.decays_itself:
            self.shared_lr.set_value(np.float32(self.shared_lr.get_value() / 10))


def test_theanompi_models_shared_lr_follows_the_schedule():
    inner = _TheanoMPIStyle()
    model = TheanoMPIModel(inner, WorkerConfig(rank=0, size=2, seed=0, device="cpu0", options=COSINE))
    seen = rates_seen(model, lambda: inner.seen[-1])
    assert model.own_lr_schedule is None
    for progress, lr in seen:
        assert lr == pytest.approx(closed_form(COSINE, 2, 0.01, progress), rel=1e-6)


def test_theanompi_model_that_changes_shared_lr_keeps_its_own():
    inner = _TheanoMPIStyle(decays_itself=True)
    model = TheanoMPIModel(inner, WorkerConfig(rank=0, size=1, seed=0, device="cpu0", options=STEP))
    rates_seen(model, lambda: inner.seen[-1])
    assert model.own_lr_schedule == "_TheanoMPIStyle.adjust_hyperp changes shared_lr"
    assert inner.seen[-1] == pytest.approx(0.01 / 10 / 10, rel=1e-6)  # from epoch 1 on, its own decays


@pytest.mark.parametrize("scaling, warmup, start, factors", [
    ("linear", 0.0, 1.0, [4, 4, 4]), ("sqrt", 0.0, 1.0, [2, 2, 2]),
    ("linear", 2.0, 1.0, [1, 2, 4]), ("sqrt", 2.0, 1.0, [1, 2 ** 0.5, 2]),  # Theano-MPI's warm-up: size ** (epoch / w)
    ("none", 2.0, 0.25, [0.25, 0.5, 1]), ("linear", 2.0, 0.25, [0.25, 1, 4]),  # from the start factor, geometrically
])
def test_theanompi_model_with_its_own_schedule_scales_shared_lr(scaling, warmup, start, factors):
    """LR_SCALING on a model that keeps its own schedule (here: a tenfold decay every epoch), on 4 workers."""
    inner = _TheanoMPIStyle(decays_itself=True)
    options = SessionOptions(lr_scaling=scaling, warmup_epochs=warmup, warmup_start_factor=start)
    model = TheanoMPIModel(inner, WorkerConfig(rank=0, size=4, seed=0, device="cpu0", options=options))
    seen = [lr for _, lr in rates_seen(model, lambda: inner.seen[-1])]
    expected = [0.01 * factors[epoch] / 10 ** epoch for epoch in (0, 1, 2) for _ in range(3)]
    assert seen == pytest.approx(expected, rel=1e-6)


def test_sqrt_scaling_needs_shared_lr():
    class ScaleLrOnly(_TheanoMPIStyle):
        def __init__(self):
            super().__init__(decays_itself=True)
            self.rate = self.shared_lr
            del self.shared_lr

        def adjust_hyperp(self, epoch): ...
        def scale_lr(self, size): ...

    model = TheanoMPIModel(ScaleLrOnly(), WorkerConfig(rank=0, size=4, seed=0, device="cpu0",
                                                       options=SessionOptions(lr_scaling="sqrt")))
    with pytest.raises(ConfigError, match="LR_SCALING=sqrt: ModelClass 'ScaleLrOnly' has no shared_lr"):
        rates_seen(model, lambda: 0.0)
    model = TheanoMPIModel(ScaleLrOnly(), WorkerConfig(rank=0, size=4, seed=0, device="cpu0", options=WARM_START))
    with pytest.raises(ConfigError, match="WARMUP_START_FACTOR=0.25: ModelClass 'ScaleLrOnly' has no shared_lr"):
        rates_seen(model, lambda: 0.0)


def test_a_model_with_its_own_schedule_keeps_it_and_the_line_says_so():
    class OwnDecay(MLP):
        def lr_multiplier(self, epoch_progress):
            return 0.1 if epoch_progress >= 1 else 1.0

    model = OwnDecay(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", options=COSINE,
                                  model_options={"hidden": 8}))
    assert model.own_lr_schedule == "OwnDecay.lr_multiplier"
    assert [model.scheduled_lr(p) for p in (0.5, 1.5)] == pytest.approx([0.05, 0.005])
    assert lr_schedule_note(model, COSINE, "OwnDecay") == ("LR_SCHEDULE=cosine is off for ModelClass 'OwnDecay': it "
                                                           "schedules its own learning rate (OwnDecay.lr_multiplier)")
    assert lr_schedule_note(model, SessionOptions(), "OwnDecay") is None  # no schedule asked: nothing to say
    assert "no own_lr_schedule member" in lr_schedule_note(object(), COSINE, "Custom")


def test_the_zoos_step_schedule_is_its_own_unless_emptied():
    class Zoo(ImageClassifierHyperParams):
        def __init__(self, config):
            self.config, self.hp = config, self.validate_options(config.model_options)

    def zoo(milestones):
        return Zoo(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", options=COSINE,
                                model_options={"lr_decay_epochs": milestones, "n_epochs": 3}))

    assert zoo("2").own_lr_schedule == "MODEL_LR_DECAY_EPOCHS=2"
    assert zoo("2").scheduled_lr(2.5) == pytest.approx(0.05 * 0.1)
    assert zoo("").own_lr_schedule is None
    assert zoo("").scheduled_lr(1.5) == pytest.approx(LRSchedule.of_session(COSINE, 1, 3).lr(0.05, 1.5))
