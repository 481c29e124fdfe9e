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
import os
from collections.abc import Iterable
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


#: MAX_RANKS_PER_HOST's default, per core of this host
RANKS_PER_CORE = 8


def ranks_per_host_limit(setting: int, cores: int | None = None) -> tuple[int, str]:
    """The most ranks a host may get, and how to say it: MAX_RANKS_PER_HOST when set, else :data:`RANKS_PER_CORE` x
    this host's cores (``cores``: default ``os.cpu_count()``).

    >>> ranks_per_host_limit(0, cores=2)
    (16, "MAX_RANKS_PER_HOST (by default 8 x this host's 2 cores = 16)")
    >>> ranks_per_host_limit(100)
    (100, 'MAX_RANKS_PER_HOST=100')
    """
    if setting:
        return setting, f"MAX_RANKS_PER_HOST={setting}"
    cores = cores or os.cpu_count() or 1
    limit = RANKS_PER_CORE * cores
    return limit, f"MAX_RANKS_PER_HOST (by default {RANKS_PER_CORE} x this host's {cores} cores = {limit})"


def check_ranks_per_host(counts: Iterable[tuple[str, int]], setting: int, key: str = "DEVICES") -> None:
    """Every (host, ranks) of ``counts`` within the per-host limit (:func:`ranks_per_host_limit`); ConfigError naming
    ``key``, the host and how to start them anyway.

    >>> check_ranks_per_host([("", 40)], 0, "DEVICES")          # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: DEVICES: 40 ranks on this host, more than MAX_RANKS_PER_HOST (...): a typo? \
To start them, set MAX_RANKS_PER_HOST=40
    """
    limit, said = ranks_per_host_limit(setting)
    for host, count in counts:
        if count > limit:
            raise ConfigError(f"{key}: {count} ranks on {host or 'this host'}, more than {said}: a typo? To start "
                              f"them, set MAX_RANKS_PER_HOST={count}")


def check_elastic(options: Any, n_workers: int, cwd: str = ".") -> None:
    """The elastic options (MAX_RESTARTS, MIN_WORKERS, MAX_WORKERS, HOST_DISCOVERY) of a session that starts
    ``n_workers`` workers agree with each other and with it.

    >>> from types import SimpleNamespace
    >>> elastic = dict(max_restarts=2, min_workers=0, max_workers=0, host_discovery=None, on_worker_loss="abort")
    >>> check_elastic(SimpleNamespace(**elastic), 3)
    >>> check_elastic(SimpleNamespace(**{**elastic, "min_workers": 4}), 3)
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: MIN_WORKERS=4: the session starts only 3 workers
    """
    if options.min_workers > n_workers:
        raise ConfigError(f"MIN_WORKERS={options.min_workers}: the session starts only {n_workers} workers")
    if options.max_workers and options.max_workers < n_workers:
        raise ConfigError(f"MAX_WORKERS={options.max_workers}: the session starts {n_workers} workers; give fewer "
                          "devices or a larger MAX_WORKERS")
    if options.max_restarts and options.on_worker_loss == "continue":
        raise ConfigError(f"MAX_RESTARTS={options.max_restarts} with ON_WORKER_LOSS=continue: a lost worker either "
                          "restarts the session or is left behind; choose one")
    script = options.host_discovery
    path = os.path.join(cwd, script) if script is not None else ""
    if script is not None and not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError(f"HOST_DISCOVERY={script!r} is not an executable file")


def check_lr_schedule(options: Any) -> None:
    """LR_SCHEDULE=step names its milestones (LR_DECAY_EPOCHS); a WARMUP_START_FACTOR below 1 has epochs to ramp
    over (WARMUP_EPOCHS), unless it is the rule's default (ASGD's, whose warm-up WARMUP_EPOCHS=0 turns off).

    >>> from types import SimpleNamespace
    >>> check_lr_schedule(SimpleNamespace(lr_schedule="step", lr_decay_epochs="", warmup_start_factor=1.0))
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: LR_SCHEDULE='step' needs LR_DECAY_EPOCHS (the epochs at which ...
    >>> check_lr_schedule(SimpleNamespace(lr_schedule="constant", warmup_start_factor=0.125, warmup_epochs=0.0))
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: WARMUP_START_FACTOR=0.125 needs WARMUP_EPOCHS (the epochs over which ...
    """
    if options.lr_schedule == "step" and not options.lr_decay_epochs:
        raise ConfigError("LR_SCHEDULE='step' needs LR_DECAY_EPOCHS (the epochs at which the learning rate is "
                          "multiplied by LR_DECAY), e.g. LR_DECAY_EPOCHS=20,30")
    rule_default = getattr(type(options), "warmup_start_factor", 1.0)  # ASGD's 1/8, with its warm-up
    if options.warmup_start_factor not in (1.0, rule_default) and options.warmup_epochs <= 0:
        raise ConfigError(f"WARMUP_START_FACTOR={options.warmup_start_factor:g} needs WARMUP_EPOCHS (the epochs over "
                          "which the learning rate ramps up from it), e.g. WARMUP_EPOCHS=3")
