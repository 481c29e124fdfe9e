"""What every classifier base shares, whatever computes it: MODEL_* options, sharding, LR scaling, image data.

:class:`ClassifierHyperParams` is the framework-free half of
:class:`theanompi.models.base.ClassifierModel` (pytensor) and
:class:`theanompi.models.torch_classifier.TorchClassifierModel` (PyTorch): the options of momentum SGD (declared
as :mod:`theanompi.models.model_options` declares every ModelClass's; the launcher calls
:meth:`~theanompi.models.model_options.HasModelOptions.validate_options` before any rank starts),
:meth:`~ClassifierHyperParams.shard` and the learning rate: the session's schedule (LR_SCHEDULE with LR_SCALING and
WARMUP_EPOCHS, :mod:`theanompi.core.lr_schedule`), or the model's own (:attr:`~ClassifierHyperParams.own_lr_schedule`).
:class:`ImageClassifierHyperParams` adds the image data options (:mod:`theanompi.models.data.image_options`), the
loaders they choose (:mod:`theanompi.models.data.image_loaders`) and their step learning-rate decay: what the
pytensor zoo (:class:`theanompi.models.zoo.ImageClassifier`) and the Keras Wide ResNet share. Neither imports
pytensor nor torch.

Example
-------
>>> ClassifierHyperParams.validate_options({"lr": 0.1})["lr"], ClassifierHyperParams.defaults["batch_size"]
(0.1, 32)
>>> ClassifierHyperParams.validate_options({"momentum": 1.5})
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: ClassifierHyperParams: model option momentum=1.5 is not allowed; use a number in ...
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from theanompi.comm.fused_params import FlatLayout
from theanompi.comm.param_access import assign, host_copy
from theanompi.core.lr_schedule import LRSchedule
from theanompi.core.options import (
    model_option,
    non_negative_float,
    parse_int_list,
    positive_float,
    positive_int,
    unit_interval,
)
from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.image_loaders import build_image_data
from theanompi.models.data.image_options import DATA_KINDS, IMAGE_DATA_OPTIONS, DataKind, check_data_options
from theanompi.models.model_options import HasModelOptions, OptionTable

if TYPE_CHECKING:
    from theanompi.models.contract import WorkerConfig


class ClassifierHyperParams(HasModelOptions):
    """Options, sharding and learning-rate scaling of a classifier trained with momentum SGD.

    A subclass's ``__init__`` sets ``self.config`` (a WorkerConfig) and ``self.hp``
    (``self.validate_options(config.model_options)``).
    """

    declared_options = [
        model_option("batch_size", positive_int, 32, "images (samples) per worker and step"),
        model_option("lr", positive_float, 0.05, "learning rate (times the workers with LR_SCALING=linear)"),
        model_option("momentum", unit_interval, 0.9, "momentum of SGD (0: plain SGD)"),
        model_option("weight_decay", non_negative_float, 0.0, "L2 penalty on the weights (not the biases)"),
        model_option("n_epochs", positive_int, 10, "epochs to train, unless N_EPOCHS says otherwise"),
    ]
    #: set by the subclass's ``__init__`` (see above)
    config: WorkerConfig
    hp: dict[str, Any]
    data: Any
    #: the epoch under way (:meth:`start_epoch_lr` sets it; subclasses read it, as before the schedule), and
    #: whether its steps set their own learning rate
    _epoch: int = 0
    _lr_varies: bool = False

    def shard(self, x_train, y_train, x_val, y_val) -> ShardedArrayData:
        """This worker's shard of in-memory arrays."""
        c = self.config
        return ShardedArrayData(x_train, y_train, x_val, y_val, self.hp["batch_size"], c.rank, c.size, c.seed)

    @property
    def n_outputs(self) -> int:
        """Classes of the data (the width of the output layer)."""
        return int(self.hp.get("n_classes", 10))

    # ----- the learning rate -----------------------------------------------------------------
    @cached_property
    def session_lr_schedule(self) -> LRSchedule:
        """The session's schedule (LR_SCHEDULE, LR_SCALING, WARMUP_EPOCHS) over its epochs (N_EPOCHS, else the
        model's ``n_epochs``), for this session's worker count."""
        opts = self.config.options
        return LRSchedule.of_session(opts, self.config.size, opts.epochs_for(self.hp["n_epochs"]))

    @property
    def own_lr_schedule(self) -> str | None:
        """What names this model's own learning-rate schedule, or None when it follows the session's LR_SCHEDULE.

        A subclass that overrides :meth:`lr_multiplier` schedules its own rate (and keeps it): it says so by
        default; it overrides this property to say what its schedule is, or None where it has none (e.g. its decay
        option is off)."""
        if type(self).lr_multiplier is not ClassifierHyperParams.lr_multiplier:
            return f"{type(self).__name__}.lr_multiplier"
        return None

    def lr_multiplier(self, epoch_progress: float) -> float:
        """LR_SCALING multiplies by the worker count (linear) or its square root (sqrt), ramping up over
        WARMUP_EPOCHS from WARMUP_START_FACTOR (a model with a schedule of its own multiplies this by its decay)."""
        return self.session_lr_schedule.ramp(epoch_progress)

    def scheduled_lr(self, epoch_progress: float) -> float:
        """The learning rate at ``epoch_progress`` (epochs, fractional): the model's own schedule if it has one,
        else the session's (:mod:`theanompi.core.lr_schedule`) applied to MODEL_LR."""
        if self.own_lr_schedule:
            return float(self.hp["lr"]) * self.lr_multiplier(epoch_progress)
        return self.session_lr_schedule.lr(float(self.hp["lr"]), epoch_progress)

    def lr_varies_within(self, epoch: int) -> bool:
        """Whether the rate changes between the steps of ``epoch`` (then it is set at every step)."""
        if self.own_lr_schedule:
            return self.session_lr_schedule.warming_up(epoch)
        return self.session_lr_schedule.varies_within(epoch)

    def set_lr(self, lr: float) -> None:
        """Set the learning rate the next steps use (the base classes' variable)."""
        raise NotImplementedError

    def start_epoch_lr(self, epoch: int) -> None:
        """At ``epoch``'s start: its learning rate, and whether each step sets its own."""
        self._epoch = epoch
        self._lr_varies = self.lr_varies_within(epoch)
        self.set_lr(self.scheduled_lr(float(epoch)))

    def step_lr(self, count: int) -> None:
        """Before step ``count`` of the epoch: the rate at ``epoch + count / n_batch_train`` where it varies."""
        if self._lr_varies:
            self.set_lr(self.scheduled_lr(self._epoch + count / self.data.n_batch_train))

    def cleanup(self) -> None:
        """Close the data (stops a prefetch thread, closes files)."""
        close = getattr(getattr(self, "data", None), "close", None)
        if callable(close):
            close()


def mean_over_workers(variables: Sequence[Any], comm: Any) -> None:
    """Set each of ``variables`` (anything :mod:`theanompi.comm.param_access` reads and writes) to its mean over
    the workers of ``comm``: one allreduce of one float64 buffer (the models' ``sync_state`` of batch-norm
    statistics). Nothing to do, and no collective, without variables.

    >>> import numpy as np, pytensor
    >>> class TwoWorkers:                              # the other worker holds twice these values
    ...     def allreduce(self, buffer): return buffer * 3
    ...     def Get_size(self): return 2
    >>> stats = [pytensor.shared(np.ones(2, "float32")), pytensor.shared(np.zeros(1, "float32"))]
    >>> mean_over_workers(stats, TwoWorkers())
    >>> stats[0].get_value().tolist(), stats[1].get_value().tolist()
    ([1.5, 1.5], [0.0])
    """
    if not variables:
        return
    values = [host_copy(v) for v in variables]
    layout = FlatLayout([v.shape for v in values])
    packed = layout.pack(values, np.empty(layout.total, dtype=np.float64))
    total = np.asarray(comm.allreduce(packed), dtype=np.float64) / comm.Get_size()
    for variable, value in zip(variables, layout.views(total)):
        assign(variable, value)


class ImageClassifierHyperParams(ClassifierHyperParams):
    """A classifier whose data the image data options choose (:mod:`theanompi.models.data.image_options`).

    Subclasses set :attr:`data_choices`, which the ``data`` option then accepts (and change defaults:
    ``defaults = {"data": "cifar10"}``); :attr:`data_dtype` is the float type of in-memory images.

    Example
    -------
    >>> from theanompi.models.contract import WorkerConfig
    >>> class Digits(ImageClassifierHyperParams):
    ...     def __init__(self, config):
    ...         self.config, self.hp = config, self.validate_options(config.model_options)
    >>> data = Digits(WorkerConfig(rank=0, size=2, seed=0, device="cpu0")).build_data()
    >>> data.input_shape, data.n_batch_train
    ((1, 8, 8), 24)
    """

    declared_options = list(IMAGE_DATA_OPTIONS)
    #: Values of the ``data`` option this model accepts.
    data_choices: tuple[str, ...] = DATA_KINDS
    #: dtype of in-memory images (the pytensor models: floatX)
    data_dtype: str = "float32"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        data = cls.option_table["data"].with_parser(DataKind(cls.data_choices))
        cls.option_table = OptionTable({**cls.option_table, "data": data}.values())
        cls.checks = {**cls.checks, "data": data.option.parse}

    @classmethod
    def check_options(cls, hp: dict[str, Any]) -> None:
        super().check_options(hp)
        check_data_options(cls.__name__, hp, cls.data_choices)

    @property
    def own_lr_schedule(self) -> str | None:
        """MODEL_LR_DECAY_EPOCHS, where it names milestones: the zoo's step schedule, kept."""
        milestones = self.hp["lr_decay_epochs"]
        return f"MODEL_LR_DECAY_EPOCHS={milestones}" if milestones else None

    def lr_multiplier(self, epoch_progress: float) -> float:
        """The base's multiplier (LR_SCALING) times ``lr_decay`` per passed ``lr_decay_epochs`` milestone."""
        passed = sum(1 for e in parse_int_list(self.hp["lr_decay_epochs"]) if epoch_progress >= e)
        return super().lr_multiplier(epoch_progress) * float(self.hp["lr_decay"]) ** passed

    def build_data(self):
        """The loader the data options choose (:func:`~theanompi.models.data.image_loaders.build_image_data`)."""
        return build_image_data(self.hp, self.config, self.shard, self.data_dtype)
