"""The table of every session option, and SessionOptions: a session's options as one typed, frozen object.

Every option is a field of a frozen dataclass: :class:`SessionOptions` holds those every rule takes, and one
subclass per rule adds the rule's own (:class:`BSPOptions`, :class:`EASGDOptions`, :class:`GOSGDOptions`,
:class:`ASGDOptions`; :data:`OPTIONS_BY_RULE` finds them by RULE). A field's metadata is its
:class:`~theanompi.core.options.Option`: cfg key, parser, help line.

Options flow one way. The launcher parses what the user gave -- cfg text (:meth:`SessionOptions.from_cfg`) or
``BSP().init(...)`` keywords (:meth:`SessionOptions.parse`) -- once, at the edge, into the rule's class; the plan fills
in what was left out (RUN_DIR, CHECKPOINT_DIR) with :meth:`SessionOptions.replace`; the object travels in
``RUN_DIR/session.json`` (:meth:`to_dict` / :meth:`from_dict`) and every rank reads it by attribute
(``options.checkpoint_every``). The default of each option lives here alone.

Example
-------
>>> options = BSPOptions.parse({"seed": "3", "compute": "C", "sync_type": "avg"})
>>> options.seed, options.compute, options.sync_type, options.checkpoint_every
(3, 'c', 'avg', 0)
>>> options.seed = 4
Traceback (most recent call last):
...
dataclasses.FrozenInstanceError: cannot assign to field 'seed'
>>> BSPOptions.parse({"tau": 2})
Traceback (most recent call last):
...
theanompi.core.errors.ConfigError: BSP: unknown option 'tau' (EASGD's); allowed: average_weights, avg_at_epoch_end, ...
>>> BSPOptions.from_dict(options.to_dict()) == options
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypeVar

from theanompi.core.errors import ConfigError
from theanompi.core.lr_schedule import SCALINGS, SCHEDULES
from theanompi.core.options import (
    MAX_EPOCHS,
    Option,
    boolean,
    choice,
    epoch_count,
    float_range,
    fraction,
    int_list,
    int_range,
    non_negative_float,
    option,
    path_value,
    positive_float,
    rule_default,
    seconds,
    unit_interval,
)

#: BSP_EXCH_STRATEGY's values: host-memory ones, then GPU-buffer ones (``theanompi.comm.exchange`` implements each)
HOST_EXCH_STRATEGIES = ("ar", "ar16")
GPU_EXCH_STRATEGIES = ("nccl32", "nccl16", "cudampi")
#: BSP_OUTER_OPTIMIZER's values (``rules.outer_optimizer``) and BSP_COMPRESSION's (``comm.compression``)
OUTER_OPTIMIZERS = ("none", "nesterov")
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd")
#: ASGD_UPDATER's values (``theanompi.comm.ps.updaters`` implements each)
UPDATER_NAMES = ("add", "sgd", "momentum", "adagrad")
#: ASGD_STALENESS's values (``theanompi.comm.ps.staleness`` implements each)
STALENESS_MODES = ("none", "scale", "compensate")
#: ASGD's defaults of WARMUP_EPOCHS and WARMUP_START_FACTOR (every other rule: 0 and 1, no warm-up)
ASGD_WARMUP_EPOCHS = 3.0
ASGD_WARMUP_START_FACTOR = 0.125
#: the largest SEED: NumPy's RandomState (and Keras's seeding through it) takes no more; PyTorch and JAX take it
MAX_SEED = 2**32 - 1
#: the most ranks a session starts (per host, MAX_RANKS_PER_HOST bounds them lower)
MAX_SESSION_RANKS = 65536
#: the most iterations between two events of a rule (exchanges, averages, pushes, TensorBoard points): more never
#: comes, and a grant travels in an int64
MAX_STEPS_BETWEEN = 10**9
#: the most restarts an elastic session makes (MAX_RESTARTS)
MAX_RESTART_COUNT = 10**6
#: the largest rank r of BSP's PowerSGD (a matrix's P Q^T; a matrix is never wider)
MAX_POWERSGD_RANK = 65536

Options = TypeVar("Options", bound="SessionOptions")
#: the epochs of a session when neither N_EPOCHS nor the model says
DEFAULT_EPOCHS = 10


@dataclass(frozen=True)
class SessionOptions:
    """The options every rule takes (and, through a subclass, the rule's own), typed and frozen.

    The constructor takes values that are already parsed (as :meth:`from_dict` does for ``session.json``);
    user input goes through :meth:`parse` or :meth:`from_cfg`.
    """

    #: the RULE whose options these are ('' for the common options alone, e.g. a model built outside a session)
    rule: ClassVar[str] = ""

    n_epochs: int | None = option("N_EPOCHS", epoch_count, None,
                                  "epochs to train (default: the model's n_epochs, else 10)")
    seed: int = option("SEED", int_range(0, MAX_SEED), 0,
                       "seed for initialisation and the common shuffle (NumPy, PyTorch and JAX all take it)")
    threads: int = option("THREADS_PER_WORKER", int_range(0, 1024), 0,
                          "BLAS/OpenMP threads per rank (0: cores / local ranks)")
    bind: str = option("BIND", choice("none", "core", "socket", "numa"), "none",
                       "bind each rank through mpiexec --bind-to")
    run_dir: str | None = option("RUN_DIR", path_value, None,
                                 "directory for logs, records and the final model (default runs/RULE-TIME)")
    log_level: str = option("LOG_LEVEL", choice("DEBUG", "INFO", "WARNING", "ERROR"), "INFO",
                            "logging level of rank 0")
    lr_scaling: str = option("LR_SCALING", choice(*SCALINGS), "none",
                             "linear: multiply the learning rate by the number of workers; sqrt: by its square root")
    warmup_epochs: float = option("WARMUP_EPOCHS", float_range(0.0, MAX_EPOCHS), 0.0,
                                  "epochs over which the learning rate ramps up to its (scaled) value from "
                                  "WARMUP_START_FACTOR times its 1-worker value")
    warmup_start_factor: float = option("WARMUP_START_FACTOR", fraction, 1.0,
                                        "the warm-up's first learning rate as a fraction of the 1-worker rate "
                                        "(1: only a scaled rate warms up; below 1: from a smaller rate, scaled or not)")
    # ----- learning at scale: the learning-rate schedule and averaged weights (issue 38) -----
    lr_schedule: str = option("LR_SCHEDULE", choice(*SCHEDULES), "constant",
                              "the learning rate over the session, on top of LR_SCALING and WARMUP_EPOCHS: constant, "
                              "step (times LR_DECAY at each of LR_DECAY_EPOCHS) or cosine (to LR_MIN at the end)")
    lr_decay_epochs: str | None = option("LR_DECAY_EPOCHS", int_list(minimum=1, allow_empty=True), None,
                                  "step: the epochs (from 0) at which the learning rate is multiplied by LR_DECAY")
    lr_decay: float = option("LR_DECAY", fraction, 0.1, "step: the factor at each of LR_DECAY_EPOCHS")
    lr_min: float = option("LR_MIN", non_negative_float, 0.0, "cosine: the learning rate at the session's end")
    average_weights: str = option("AVERAGE_WEIGHTS", choice("none", "ema"), "ema",
                                  "ema: also validate, checkpoint and save as the final model an exponential moving "
                                  "average of the rule's model")
    ema_decay: float = option("EMA_DECAY", unit_interval, 0.998,
                              "the average's decay per batch trained by one worker")
    ema_start_epoch: int = option("EMA_START_EPOCH", int_range(0, MAX_EPOCHS), 0,
                                  "the epoch (from 0) from which the average lags the model (before it: the model)")
    check_finite: bool = option("CHECK_FINITE", boolean, True, "stop on NaN/Inf in a buffer about to be exchanged")
    plots: bool = option("PLOTS", boolean, True,
                         "draw RUN_DIR/curves.png and breakdown.png at the end "
                         "(python -m theanompi.session.recorder RUN_DIR draws them later)")
    tensorboard: bool = option("TENSORBOARD", boolean, True,
                               "write TensorBoard event files into RUN_DIR/tensorboard: per epoch, per iteration, "
                               "the options")
    tensorboard_every: int = option("TENSORBOARD_EVERY", int_range(0, MAX_STEPS_BETWEEN), 10,
                                    "iterations between TensorBoard's training-loss points (0: per epoch only)")
    progress_every: float = option("PROGRESS_EVERY", seconds, 60.0,
                                   "seconds between progress lines inside an epoch when stdout is not a terminal "
                                   "(a terminal gets a progress bar; 0: neither)")
    watchdog: float = option("WATCHDOG", seconds, 300.0,
                             "seconds a rank may go without progress in any phase (a step, an exchange, validation, "
                             "a server's loop) before the session is stopped, naming it (0: never)")
    watchdog_build: float = option("WATCHDOG_BUILD", seconds, 600.0,
                                   "the same limit for building and compiling the model, which can take minutes "
                                   "(0: WATCHDOG)")
    # ----- start-up and the allocation's size (issue 39) ------------------------------------------------------------
    startup_timeout: float = option("STARTUP_TIMEOUT", seconds, 60.0,
                                    "seconds every rank has to report its start (a host that does not answer, a "
                                    "daemon or a Python that cannot start) before the session is ended, naming the "
                                    "hosts and the likely cause (0: never); ssh gets half of it as ConnectTimeout")
    max_ranks_per_host: int = option("MAX_RANKS_PER_HOST", int_range(0, MAX_SESSION_RANKS), 0,
                                     "the most ranks a host may get, above which an allocation, a hostfile or "
                                     "DEVICES is refused as a typo (0: 8 x this host's cores); set it to start more")
    checkpoint_every: int = option("CHECKPOINT_EVERY", int_range(0, MAX_EPOCHS), 0,
                                   "save a checkpoint every K epochs (0: never)")
    checkpoint_dir: str | None = option("CHECKPOINT_DIR", path_value, None,
                                        "where checkpoints go (default RUN_DIR/checkpoints)")
    resume: str | None = option("RESUME", path_value, None,
                                "continue from a checkpoint file or directory (its newest)")
    # ----- elastic sessions (theanompi.launch.elastic): restarts on a membership change, growth, checkpoints
    checkpoint_every_iters: int = option("CHECKPOINT_EVERY_ITERS", int_range(0, MAX_STEPS_BETWEEN), 0,
                                         "also save a checkpoint every K iterations, inside epochs, resumed at the "
                                         "same sample (0: only CHECKPOINT_EVERY's)")
    max_restarts: int = option("MAX_RESTARTS", int_range(0, MAX_RESTART_COUNT), 0,
                               "restarts from the newest checkpoint after a lost worker or host (0: a lost worker "
                               "ends the session)")
    min_workers: int = option("MIN_WORKERS", int_range(0, MAX_SESSION_RANKS), 0,
                              "fewest workers a restart may continue with (0: as many as the session started with)")
    max_workers: int = option("MAX_WORKERS", int_range(0, MAX_SESSION_RANKS), 0,
                              "most workers the session grows to when HOST_DISCOVERY offers more (0: no limit)")
    host_discovery: str | None = option("HOST_DISCOVERY", path_value, None,
                                        "an executable that prints the available hosts as 'host:slots' lines, "
                                        "read at start, at every restart and while the session runs")
    elastic_wait: float = option("ELASTIC_WAIT", seconds, 60.0,
                                 "seconds a restart waits for MIN_WORKERS workers before it gives up")
    elastic_cooldown: float = option("ELASTIC_COOLDOWN", seconds, 60.0,
                                     "seconds a failed device or host is left out of restarts")
    compute: str = option("COMPUTE", choice("auto", "c", "jax"), "auto",
                          "pytensor backend: c (C code on the CPU) or jax (JAX mode, params kept on the device); "
                          "auto: c on cpu, jax on cuda")
    on_worker_loss: str = option("ON_WORKER_LOSS", choice("abort", "continue"), "abort",
                                 "abort: a lost worker ends the session; continue (EASGD, ASGD): the others carry "
                                 "on without it")

    def epochs_for(self, model_epochs: int | None) -> int:
        """The session's epochs: N_EPOCHS if given, else the model's ``n_epochs``, else :data:`DEFAULT_EPOCHS`.

        >>> SessionOptions().epochs_for(3), SessionOptions(n_epochs=5).epochs_for(3), SessionOptions().epochs_for(None)
        (3, 5, 10)
        """
        return int(self.n_epochs or model_epochs or DEFAULT_EPOCHS)

    # ----- the table -----------------------------------------------------------------------
    @classmethod
    def schema(cls) -> dict[str, Option]:
        """Keyword -> :class:`Option` of every option of this class (common ones first).

        >>> list(EASGDOptions.schema())[-2:], EASGDOptions.schema()["tau"].cfg_key
        (['alpha', 'tau'], 'EASGD_TAU')
        """
        return {f.name: f.metadata["option"] for f in fields(cls)}

    @classmethod
    def defaults(cls: type[Options]) -> Options:
        """Every option at its default."""
        return cls()

    # ----- parsing user input, once --------------------------------------------------------
    @classmethod
    def parse(cls: type[Options], given: Mapping[str, Any], owner: str = "") -> Options:
        """Options from keyword values (``BSP().init(sync_type="avg")``), each converted by its parser; None keeps
        a default. ConfigError naming an unknown keyword (and the rule it belongs to) or a bad value."""
        schema = cls.schema()
        unknown = sorted(set(given) - set(schema))
        if unknown:
            owners = [rule for rule, other in OPTIONS_BY_RULE.items() if unknown[0] in other.schema()]
            belongs = f" ({owners[0]}'s)" if owners else ""
            raise ConfigError(f"{owner or cls.rule or 'session'}: unknown option {unknown[0]!r}{belongs}; "
                              f"allowed: {', '.join(sorted(schema))}")
        values = {name: schema[name].convert(value) for name, value in given.items() if value is not None}
        return cls(**values)

    @classmethod
    def from_cfg(cls: type[Options], raw: Mapping[str, str]) -> Options:
        """Options from cfg keys (``BSP_SYNC_TYPE`` -> ``sync_type``); the caller has checked that every key in
        ``raw`` is one of :meth:`cfg_keys`."""
        by_key = {opt.cfg_key: name for name, opt in cls.schema().items()}
        return cls.parse({by_key[key]: value for key, value in raw.items()})

    @classmethod
    def cfg_keys(cls) -> tuple[str, ...]:
        """The cfg keys of this class's options."""
        return tuple(opt.cfg_key for opt in cls.schema().values())

    # ----- what travels -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A plain dict of JSON values (what ``session.json`` holds)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[Options], values: Mapping[str, Any]) -> Options:
        """Options written by :meth:`to_dict` (already parsed); ConfigError for a name this class lacks."""
        unknown = sorted(set(values) - set(cls.schema()))
        if unknown:
            raise ConfigError(f"{cls.rule or 'session'} options have no option {unknown[0]!r}")
        return cls(**values)

    def replace(self: Options, **changes: Any) -> Options:
        """A copy with ``changes`` (values already parsed): how the launch plan fills in RUN_DIR and the like."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class BSPOptions(SessionOptions):
    """BSP's options: what is exchanged, how it travels, how often parameters are averaged."""

    rule: ClassVar[str] = "BSP"

    sync_type: str = option("BSP_SYNC_TYPE", choice("cdd", "avg"), "cdd",
                            "cdd: average update vectors every step; avg: average parameters every avg_freq steps")
    exch_strategy: str = option("BSP_EXCH_STRATEGY", choice(*HOST_EXCH_STRATEGIES, *GPU_EXCH_STRATEGIES), "ar",
                                "how buffers travel (ar: host MPI)")
    avg_freq: int = option("BSP_AVG_FREQ", int_range(1, MAX_STEPS_BETWEEN), 1,
                           "avg: iterations between parameter averages")
    avg_at_epoch_end: bool = option("BSP_AVG_AT_EPOCH_END", boolean, True,
                                    "avg: also average at every epoch's end; false: only every avg_freq iterations "
                                    "and after the last epoch (validation sees the last average)")
    bucket_mb: float = option("BSP_BUCKET_MB", float_range(0.001, 4096.0, zero=True), 1.0,
                              "cdd: megabytes per gradient bucket summed while backward still runs, for models "
                              "that offer it (PyTorch) on ar, cudampi or nccl32; 0: one allreduce after backward")
    # DiLoCo (avg's outer optimizer) and compression of what BSP exchanges
    outer_optimizer: str = option("BSP_OUTER_OPTIMIZER", choice(*OUTER_OPTIMIZERS), "none",
                                  "avg: none (the params averaged) or nesterov (DiLoCo: the mean pseudo-gradient "
                                  "theta_outer - theta_i applied by outer Nesterov-momentum SGD)")
    outer_lr: float = option("BSP_OUTER_LR", positive_float, 0.7, "nesterov: the outer learning rate")
    outer_momentum: float = option("BSP_OUTER_MOMENTUM", unit_interval, 0.9, "nesterov: the outer momentum")
    compression: str = option("BSP_COMPRESSION", choice(*COMPRESSIONS), "none",
                              "what BSP exchanges (cdd: update vectors, avg: pseudo-gradients) on the wire: "
                              "none, fp16 or bf16 (16-bit floats summed in fp32), powersgd (rank-r, error feedback)")
    powersgd_rank: int = option("BSP_POWERSGD_RANK", int_range(1, MAX_POWERSGD_RANK), 2,
                                "powersgd: the rank r of each matrix's P Q^T")
    powersgd_start_iter: int = option("BSP_POWERSGD_START_ITER", int_range(0, MAX_STEPS_BETWEEN), 0,
                                      "powersgd: iterations exchanged uncompressed before PowerSGD starts")


@dataclass(frozen=True)
class EASGDOptions(SessionOptions):
    """EASGD's options: the moving rate and the steps between exchanges."""

    rule: ClassVar[str] = "EASGD"

    alpha: float = option("EASGD_ALPHA", fraction, 0.5,
                          "moving rate: each exchange moves worker and centre alpha*(w - c) towards each other")
    tau: int = option("EASGD_TAU", int_range(1, MAX_STEPS_BETWEEN), 4,
                      "local steps between a worker's exchanges with the server")


@dataclass(frozen=True)
class GOSGDOptions(SessionOptions):
    """GOSGD's option: how often a worker gossips."""

    rule: ClassVar[str] = "GOSGD"

    p: float = option("GOSGD_P", fraction, 0.1, "probability that a worker pushes its params after a step")


@dataclass(frozen=True)
class ASGDOptions(SessionOptions):
    """ASGD's options: the parameter server's mode, shards, exchange frequency, updater and staleness handling."""

    rule: ClassVar[str] = "ASGD"

    sync: bool = option("ASGD_SYNC", boolean, False, "true: every worker's i-th pull returns the same values")
    n_servers: int = option("ASGD_SERVERS", int_range(1, MAX_SESSION_RANKS), 1,
                            "server ranks; parameters are sharded over them")
    push_freq: int = option("ASGD_FREQ", int_range(1, MAX_STEPS_BETWEEN), 1, "local steps between push/pull exchanges")
    updater: str = option("ASGD_UPDATER", choice(*UPDATER_NAMES), "add", "how the server applies a pushed delta")
    server_lr: float = option("ASGD_LR", positive_float, 0.05, "learning rate of the sgd/momentum/adagrad updaters")
    server_momentum: float = option("ASGD_MOMENTUM", unit_interval, 0.9, "momentum of the momentum updater")
    staleness: str = option("ASGD_STALENESS", choice(*STALENESS_MODES), "scale",
                            "how the server treats a stale push: none (as fresh), scale (divided by its staleness), "
                            "compensate (DC-ASGD's delay compensation)")
    dc_lambda: float = option("ASGD_DC_LAMBDA", positive_float, 2.0,
                              "lambda0 of ASGD_STALENESS=compensate (DC-ASGD-a's variance control)")
    max_staleness: int = option("ASGD_MAX_STALENESS", int_range(0, MAX_STEPS_BETWEEN), 0,
                                "bounded staleness: a worker more than this many steps ahead of the slowest one "
                                "waits at its pull (0: never waits)")
    momentum_correction: str = option("ASGD_MOMENTUM_CORRECTION", choice("none", "implicit"), "none",
                                      "implicit: lower the explicit momentum to 1 - N(1 - momentum), at least 0, "
                                      "for the momentum asynchrony adds (Mitliagkas et al. 2016)")
    # ASGD's own defaults of two common options: a warm-up from 1/8 of the rate over the first 3 epochs, which
    # asynchronous pushes at the full rate on a fresh model need (issue 38's measurements: docs/rules.md, "ASGD at
    # many workers"); WARMUP_EPOCHS=0 turns it off
    warmup_epochs: float = rule_default(SessionOptions, "warmup_epochs", ASGD_WARMUP_EPOCHS)
    warmup_start_factor: float = rule_default(SessionOptions, "warmup_start_factor", ASGD_WARMUP_START_FACTOR)


#: RULE -> the class of its options
OPTIONS_BY_RULE: dict[str, type[SessionOptions]] = {
    cls.rule: cls for cls in (BSPOptions, EASGDOptions, GOSGDOptions, ASGDOptions)
}


def rule_name(value: Any) -> str:
    """A RULE value's canonical name (case-insensitive); ConfigError listing the allowed ones.

    >>> rule_name("easgd")
    'EASGD'
    """
    text = str(value).strip().upper()
    if text not in OPTIONS_BY_RULE:
        raise ConfigError(f"RULE={value!r} is not allowed; use one of: {', '.join(OPTIONS_BY_RULE)}")
    return text


def options_of(rule: str) -> type[SessionOptions]:
    """The options class of RULE ``rule`` (any case).

    >>> options_of("gosgd").defaults().p
    0.1
    """
    return OPTIONS_BY_RULE[rule_name(rule)]
