"""What every classifier base shares, whatever computes it: MODEL_* options, sharding, LR scaling.

:class:`ClassifierHyperParams` is the framework-free half of
:class:`theanompi.models.base.ClassifierModel` (pytensor) and
:class:`theanompi.models.torch_classifier.TorchClassifierModel` (PyTorch): the option
defaults and their checks (the launcher calls :meth:`validate_options` before
any rank starts), :meth:`shard` and the LR_SCALING / WARMUP_EPOCHS multiplier.
It imports neither pytensor nor torch.

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

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from theanompi.core.errors import ConfigError
from theanompi.core.options import InvalidValue, predicate_parser
from theanompi.models.data.base import ShardedArrayData

if TYPE_CHECKING:
    from theanompi.models.contract import WorkerConfig


def _positive_int(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _non_negative(v):
    """A finite number >= 0 (``inf`` and ``1e400``, which is read as ``inf``, are not: like NaN, they would train
    into NaN)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


CHECKS = {
    "batch_size": predicate_parser(_positive_int, "an integer >= 1"),
    "n_epochs": predicate_parser(_positive_int, "an integer >= 1"),
    "lr": predicate_parser(lambda v: _non_negative(v) and v > 0, "a finite number > 0"),
    "momentum": predicate_parser(lambda v: _non_negative(v) and v < 1, "a number in [0, 1)"),
    "weight_decay": predicate_parser(_non_negative, "a finite number >= 0"),
}


class ClassifierHyperParams:
    """Options, sharding and learning-rate scaling of a classifier trained with momentum SGD.

    A subclass's ``__init__`` sets ``self.config`` (a WorkerConfig) and ``self.hp``
    (``self.validate_options(config.model_options)``).
    """

    #: Hyper-parameters and their defaults; subclasses extend with ``{**ClassifierModel.defaults, ...}``.
    defaults: dict[str, Any] = {"batch_size": 32, "lr": 0.05, "momentum": 0.9, "weight_decay": 0.0, "n_epochs": 10}
    #: Extra per-option parsers of subclasses (name -> parser raising InvalidValue, theanompi.core.options' style).
    checks: dict[str, Callable[[Any], Any]] = {}
    #: set by the subclass's ``__init__`` (see above)
    config: WorkerConfig
    hp: dict[str, Any]

    @classmethod
    def validate_options(cls, model_options: dict[str, Any]) -> dict[str, Any]:
        """Defaults merged with ``model_options``; ConfigError for an unknown name or bad value."""
        unknown = sorted(set(model_options) - set(cls.defaults))
        if unknown:
            raise ConfigError(
                f"{cls.__name__}: unknown model option {unknown[0]!r} (cfg MODEL_{unknown[0].upper()}); "
                f"allowed: {', '.join(sorted(cls.defaults))}"
            )
        merged = {**cls.defaults, **model_options}
        for name, value in model_options.items():
            parse = {**CHECKS, **cls.checks}.get(name)
            if parse is None:
                continue
            try:
                merged[name] = parse(value)
            except InvalidValue as err:
                raise ConfigError(f"{cls.__name__}: model option {name}={value!r} is not allowed; {err}") from None
        return merged

    def shard(self, x_train, y_train, x_val, y_val) -> ShardedArrayData:
        """This worker's shard of in-memory arrays."""
        c = self.config
        return ShardedArrayData(x_train, y_train, x_val, y_val, self.hp["batch_size"], c.rank, c.size, c.seed)

    def lr_multiplier(self, epoch_progress: float) -> float:
        """LR_SCALING=linear multiplies by the worker count, ramping up over WARMUP_EPOCHS."""
        opts = self.config.options
        if opts.lr_scaling != "linear":
            return 1.0
        target = float(self.config.size)
        warmup = opts.warmup_epochs
        if warmup <= 0 or epoch_progress >= warmup:
            return target
        return 1.0 + (target - 1.0) * epoch_progress / warmup

    def warming_up(self, epoch: int) -> bool:
        """Whether the learning rate ramps up during ``epoch`` (LR_SCALING=linear with WARMUP_EPOCHS)."""
        opts = self.config.options
        return opts.lr_scaling == "linear" and epoch < opts.warmup_epochs
