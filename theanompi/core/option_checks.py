"""Cross-checks of a session's launch arguments, in the one validator style of :mod:`theanompi.core.options`.

A check looks at several values together (or at one value against the machine),
returns None, changes nothing, and raises :class:`~theanompi.core.errors.ConfigError`
whose one line starts with the key and the value at fault. The checks of one
option's own value are its parser (see :mod:`theanompi.core.options`); the checks that
need devices or libraries live beside them (``devices.check_local_devices``,
``compute.check_compute``, ``exchange.check_strategy``).

Example
-------
>>> check_model_reference("theanompi.models.mlp", "MLP")
>>> check_model_reference("theanompi.models.mlp", "M L P")
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: MODELCLASS='M L P' must be a class name
>>> check_worker_loss("BSP", supports_worker_loss=False, on_worker_loss="abort")
"""

from __future__ import annotations

import importlib.util
from typing import Any

from theanompi.core.errors import ConfigError


def check_model_reference(modelfile: Any, modelclass: Any) -> None:
    """MODELFILE names a module or a ``.py`` file and MODELCLASS is an identifier (before either is loaded)."""
    if not isinstance(modelfile, str) or not modelfile.strip():
        raise ConfigError(f"MODELFILE={modelfile!r} must name a module or a .py file")
    if not isinstance(modelclass, str) or not modelclass.isidentifier():
        raise ConfigError(f"MODELCLASS={modelclass!r} must be a class name")


def check_worker_loss(rule_name: str, supports_worker_loss: bool, on_worker_loss: str) -> None:
    """ON_WORKER_LOSS=continue only for a rule whose survivors can carry on without a lost worker.

    >>> check_worker_loss("GOSGD", supports_worker_loss=False, on_worker_loss="continue")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: ON_WORKER_LOSS=continue: RULE=GOSGD cannot carry on without a worker ...
    """
    if on_worker_loss == "continue" and not supports_worker_loss:
        raise ConfigError(f"ON_WORKER_LOSS=continue: RULE={rule_name} cannot carry on without a worker "
                          "(EASGD and ASGD can); use ON_WORKER_LOSS=abort")


def check_installed(key: str, enabled: bool, package: str) -> None:
    """An option that is on and needs ``package`` finds it installed (looked for, not imported).

    >>> check_installed("TENSORBOARD", False, "no_such_package_here")
    >>> check_installed("TENSORBOARD", True, "no_such_package_here")
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: TENSORBOARD=true needs the no_such_package_here package, ...
    """
    if enabled and importlib.util.find_spec(package) is None:
        raise ConfigError(f"{key}=true needs the {package} package, which is not installed here "
                          f"(pip install {package}); or set {key}=false")


def check_lr_schedule(options: Any) -> None:
    """LR_SCHEDULE=step names its milestones (LR_DECAY_EPOCHS).

    >>> from types import SimpleNamespace
    >>> check_lr_schedule(SimpleNamespace(lr_schedule="step", lr_decay_epochs=""))
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: LR_SCHEDULE='step' needs LR_DECAY_EPOCHS (the epochs at which ...
    """
    if options.lr_schedule == "step" and not options.lr_decay_epochs:
        raise ConfigError("LR_SCHEDULE='step' needs LR_DECAY_EPOCHS (the epochs at which the learning rate is "
                          "multiplied by LR_DECAY), e.g. LR_DECAY_EPOCHS=20,30")
