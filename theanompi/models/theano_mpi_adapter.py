"""Theano-MPI's ModelClass contract, run by theanompi's rules unchanged.

A ModelClass written for Theano-MPI (it has ``reset_iter``, which Theano-MPI
required) is wrapped in :class:`TheanoMPIModel`, which presents theanompi's
contract to every rule and keeps Theano-MPI's loop semantics:

* **sub-batches**: ``n_subb`` calls of ``train_iter``/``val_iter`` per file batch
  (``file_batch_size // batch_size``); each call is one iteration (one exchange).
* **epoch order**: ``model.epoch`` is set at each epoch start;
  ``adjust_hyperp(e)`` runs after epoch ``e``'s validation (before epoch ``e+1``),
  then ``print_info(recorder)`` if the model has it; ``reset_iter('train')`` after
  the last training call of an epoch, ``reset_iter('val')`` after validation.
* **BSP cdd**: ``theanompi.lib.opt.pre_model_iter_fn`` splits the step; the
  workers' ``vels`` are summed into ``vels2`` (one allreduce of a fused buffer
  laid out like ``params``; batch-norm parameters are stepped locally). In JAX
  mode (a cuda rank, or ``COMPUTE=jax``) the ``vels`` are packed and the sum
  unpacked into ``vels2`` by jitted functions on the device: nothing of the step
  goes through the host (:class:`DeviceVels`).
* **LR_SCALING=linear**: ``scale_lr(size)`` once, or ``shared_lr`` multiplied by
  ``size**(epoch/WARMUP_EPOCHS)`` epoch by epoch while warming up (as Theano-MPI's
  BSP worker ramped it); **LR_SCALING=sqrt**: ``shared_lr`` the same way with
  ``sqrt(size)`` (it needs ``shared_lr``: ``scale_lr`` scales linearly);
  **WARMUP_START_FACTOR=f** (below 1): the ramp starts from ``f`` times ``shared_lr``,
  geometrically up to the scaled value (or to ``shared_lr`` itself without LR_SCALING).
* **LR_SCHEDULE** (step, cosine): ``shared_lr`` is set at every epoch start, and at every step where it varies, to
  the session's schedule (with LR_SCALING and WARMUP_EPOCHS) of its value when the model was built
  (:class:`SharedLRSchedule`) -- unless the model declares ``own_lr_schedule`` (a text naming its schedule), or its
  ``adjust_hyperp`` changes ``shared_lr`` itself: then the model keeps its own and one line says so.
* **recorder**: Theano-MPI's ``start``/``end``/``train_error``/``val_error``; one
  call counts ``model.batch_size`` samples.
* **checkpoints** hold ``shared_lr`` and the step's ``vels``/``vels2`` (unless the
  model lists ``state_vars`` itself).
* **options**: such a model reads its own settings; ``MODEL_*`` keys reach it unchecked in
  ``config.model_options``, and the one theanompi reads for it is :data:`THEANO_MPI_OPTIONS`' ``data_dir``
  (theanompi's Theano-MPI DataClasses, ``Cifar10_data``, ``ImageNet_data``, ``MNIST_data``, load from it).

Example
-------
>>> class Old:
...     def reset_iter(self, mode): pass
>>> follows_theanompi_contract(Old), follows_theanompi_contract(object)
(True, False)
"""

from __future__ import annotations

import inspect
import logging
from functools import cached_property
from typing import Any

import numpy as np

from theanompi.backend import arrays
from theanompi.comm.fused_params import FlatLayout, assign
from theanompi.core.errors import ConfigError, ContractError
from theanompi.core.lr_schedule import LRSchedule, scaling_factor
from theanompi.core.options import directory_path, model_option
from theanompi.core.session_options import SessionOptions
from theanompi.models.contract import WorkerConfig
from theanompi.models.model_options import OptionTable

log = logging.getLogger("theanompi")


#: The options of a ModelClass written for Theano-MPI that theanompi itself reads (other MODEL_* keys pass unchecked).
THEANO_MPI_OPTIONS = OptionTable([
    model_option("data_dir", directory_path, "",
                 "the data set's directory, read by Theano-MPI's DataClasses (Cifar10_data, ImageNet_data, "
                 "MNIST_data); default: the environment's MODEL_DATA_DIR"),
])


def follows_theanompi_contract(model_or_class) -> bool:
    """True for a ModelClass written for Theano-MPI (it has ``reset_iter``)."""
    return callable(getattr(model_or_class, "reset_iter", None))


def _accepts_arguments(method) -> bool:
    try:
        return bool(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return True


#: What a ModelClass copied from Theano-MPI's ImageNet models must change (see :func:`calls_gpu_sync`).
GPU_SYNC_HINT = ("ModelClass {name!r}: train_iter calls .sync() on a parameter's value (Theano-MPI's "
                 "'for p in self.params: p.container.value.sync()', which waited for the GPU); pytensor keeps "
                 "parameters in numpy arrays, which have no sync: delete that line")


def calls_gpu_sync(err: AttributeError) -> bool:
    """Whether ``err`` is Theano-MPI's ``p.container.value.sync()`` (a pygpu array's method) failing on numpy.

    Example
    -------
    >>> import numpy as np
    >>> try:
    ...     np.zeros(2).sync()
    ... except AttributeError as err:
    ...     calls_gpu_sync(err)
    True
    """
    return getattr(err, "name", None) == "sync" and isinstance(getattr(err, "obj", None), np.ndarray)


class SubBatchData:
    """A Theano-MPI model's data seen by the rules: batch counts include the sub-batches."""

    def __init__(self, data, n_subb: int):
        self._data = data
        self.n_subb = n_subb

    @property
    def n_batch_train(self) -> int:
        return int(self._data.n_batch_train) * self.n_subb

    @property
    def n_batch_val(self) -> int:
        return int(self._data.n_batch_val) * self.n_subb

    def __getattr__(self, name: str) -> Any:
        return getattr(self._data, name)


class DeviceVels:
    """The ``vels`` packed into one update vector, and a sum unpacked into ``vels2``, as jax arrays on the device.

    ``slots`` are ``(param index, vel, vel2)``; the vector is laid out like all the params, zeros where a
    param's slot is missing (batch-norm parameters stepped locally). Both are ``jax.jit`` functions of static
    shapes: no host transfer, one dispatch each.

    Example
    -------
    >>> import pytensor
    >>> v = pytensor.shared(np.ones(2, "float32")); v2 = pytensor.shared(np.zeros(2, "float32"))
    >>> vels = DeviceVels(FlatLayout([(3,), (2,)]), [(1, v, v2)], "float32")
    >>> vels.pack().tolist()                            # param 0 has no vel: zeros
    [0.0, 0.0, 0.0, 1.0, 1.0]
    >>> vels.unpack_into_vels2(np.arange(5, dtype="float32")); v2.get_value().tolist()
    [3.0, 4.0]
    """

    def __init__(self, layout: FlatLayout, slots: list[tuple[int, Any, Any]], dtype) -> None:
        import jax  # noqa: PLC0415 - JAX mode only
        import jax.numpy as jnp  # noqa: PLC0415 - JAX mode only

        self.slots = slots
        self.dtype = np.dtype(dtype)
        owner = {i: k for k, (i, _, _) in enumerate(slots)}

        def pack(*vels):
            return jnp.concatenate([vels[owner[i]].reshape(-1).astype(self.dtype) if i in owner
                                    else jnp.zeros(layout.sizes[i], self.dtype) for i in range(len(layout.sizes))])

        def unpack(total):
            return [total[layout.offsets[i]:layout.offsets[i + 1]].reshape(layout.shapes[i]) for i, _, _ in slots]

        self._pack, self._unpack = jax.jit(pack), jax.jit(unpack)

    def pack(self):
        return self._pack(*(vel.get_value(borrow=True) for _, vel, _ in self.slots))

    def unpack_into_vels2(self, vector_sum) -> None:
        """``vector_sum`` (NumPy, CuPy through DLPack, or jax) split into the ``vels2`` storages."""
        parts = self._unpack(arrays.to_jax(vector_sum, dtype=self.dtype))
        for (_, _, vel2), part in zip(self.slots, parts):
            storage = vel2.get_value(borrow=True)
            vel2.container.storage[0] = part if part.dtype == storage.dtype else part.astype(storage.dtype)


class SharedLRSchedule:
    """The session's learning-rate schedule applied to a Theano-MPI model's ``shared_lr`` (see the module doc).

    ``active`` while the session's schedule drives ``shared_lr``; ``own`` says why it does not (None while it does,
    or when there is no schedule to apply).

    Example
    -------
    >>> import pytensor
    >>> from theanompi.core.lr_schedule import LRSchedule
    >>> lr = pytensor.shared(np.float32(0.1))
    >>> sched = SharedLRSchedule(lr, LRSchedule("step", n_epochs=4, decay_epochs="2"), own=None, name="Old")
    >>> sched.start_epoch(2, log_to=False); round(float(lr.get_value()), 4)
    0.01
    >>> lr.set_value(np.float32(0.5))                        # the model's adjust_hyperp changed it
    >>> sched.start_epoch(3, log_to=False); sched.active, sched.own, float(lr.get_value())
    (False, 'Old.adjust_hyperp changes shared_lr', 0.5)
    """

    def __init__(self, shared_lr: Any, schedule: LRSchedule | None, own: str | None, name: str) -> None:
        self.shared_lr = shared_lr
        self.schedule = schedule
        self.own = own
        self.name = name
        self.base = float(shared_lr.get_value()) if shared_lr is not None else 0.0  # the model's own rate
        self.epoch = 0
        self.varies = False
        self.last: Any = None  # the value last set

    @classmethod
    def for_model(cls, model: Any, config: WorkerConfig) -> SharedLRSchedule:
        """The schedule of ``model`` in a session of ``config``: inactive without LR_SCHEDULE (constant)."""
        options, name = config.options, type(model).__name__
        shared_lr = getattr(model, "shared_lr", None)
        declared = getattr(model, "own_lr_schedule", None)
        if options.lr_schedule == "constant":
            return cls(shared_lr, None, declared, name)
        if declared:
            return cls(shared_lr, None, str(declared), name)
        if shared_lr is None:
            return cls(None, None, "it has no shared_lr, Theano-MPI's learning-rate variable", name)
        n_epochs = options.epochs_for(getattr(model, "n_epochs", None))
        return cls(shared_lr, LRSchedule.of_session(options, config.size, n_epochs), None, name)

    @property
    def active(self) -> bool:
        return self.schedule is not None

    def _set(self, progress: float) -> None:
        assert self.schedule is not None
        dtype = self.shared_lr.get_value().dtype
        assign(self.shared_lr, np.asarray(self.schedule.lr(self.base, progress), dtype=dtype))
        self.last = self.shared_lr.get_value()

    def start_epoch(self, epoch: int, log_to: bool) -> None:
        """At ``epoch``'s start (after the model's ``adjust_hyperp``): its rate, unless the model changed
        ``shared_lr`` itself since the last step (then the schedule is off from now on, and ``log_to`` says so)."""
        if self.schedule is None:
            return
        if self.last is not None and self.shared_lr.get_value() != self.last:
            self.schedule, self.own = None, f"{self.name}.adjust_hyperp changes shared_lr"
            if log_to:
                log.warning("LR_SCHEDULE is off for ModelClass %r from epoch %d: %s", self.name, epoch + 1, self.own)
            return
        self.epoch, self.varies = epoch, self.schedule.varies_within(epoch)
        self._set(float(epoch))

    def step(self, fraction: float) -> None:
        """Before a step ``fraction`` of the way through the epoch: the rate there, where it varies."""
        if self.varies and self.schedule is not None:
            self._set(self.epoch + fraction)


class TheanoMPIModel:
    """theanompi's contract around a model written for Theano-MPI (see the module doc).

    Example
    -------
    >>> wrapped = TheanoMPIModel(model, config)      # doctest: +SKIP
    >>> wrapped.data.n_batch_train == model.data.n_batch_train * model.n_subb   # doctest: +SKIP
    True
    """

    def __init__(self, model: Any, config: WorkerConfig) -> None:
        self.model = model
        self.config = config
        self.sync_type: str | None = None
        self._layout: FlatLayout | None = None
        self._vel_slots: list[tuple[int, Any, Any]] = []  # (param index, vel, vel2)
        self._device_vels: DeviceVels | None = None  # JAX mode: the vels never leave the device
        self._recorder = None
        self._lr_multiplier = 1.0
        self._epochs_started = 0
        self._schedule = SharedLRSchedule.for_model(model, config)

    # ----- what the rules read ----------------------------------------------------------
    @property
    def name(self) -> str:
        return type(self.model).__name__

    @property
    def params(self) -> list:
        return list(self.model.params)

    @cached_property
    def options(self) -> SessionOptions:
        """The session's options (``config.options``), typed."""
        return self.config.options

    @property
    def own_lr_schedule(self) -> str | None:
        """What names the model's own learning-rate schedule (LR_SCHEDULE is then off for it), or None when
        ``shared_lr`` follows the session's: the model's own ``own_lr_schedule`` attribute, else why the session's
        cannot be applied (no ``shared_lr``; ``adjust_hyperp`` changed it)."""
        return self._schedule.own

    def learning_rate(self) -> float | None:
        """``shared_lr``'s value (recorded in each epoch's record), or None without one."""
        shared_lr = getattr(self.model, "shared_lr", None)
        return float(np.asarray(shared_lr.get_value())) if shared_lr is not None else None

    @property
    def n_subb(self) -> int:
        n = getattr(self.model, "n_subb", 1)
        if not isinstance(n, (int, np.integer)) or isinstance(n, bool) or n < 1:
            raise ContractError(f"ModelClass {self.name!r}: n_subb is {n!r}; it must be an integer >= 1 "
                                "(file_batch_size // batch_size)")
        return int(n)

    @property
    def data(self) -> SubBatchData:
        return SubBatchData(self.model.data, self.n_subb)

    @property
    def n_epochs(self):
        return getattr(self.model, "n_epochs", None)

    @property
    def state_vars(self) -> list:
        own = getattr(self.model, "state_vars", None)
        if own is not None:
            return list(own)
        lr = getattr(self.model, "shared_lr", None)
        return ([lr] if lr is not None else []) + [v for _, vel, vel2 in self._vel_slots for v in (vel, vel2)]

    # ----- compile ----------------------------------------------------------------------
    def compile_iter_fns(self, sync_type: str | None) -> None:
        self.sync_type = sync_type
        compile_fns = self.model.compile_iter_fns
        if _accepts_arguments(compile_fns):
            compile_fns(sync_type)
        else:
            compile_fns()
        if sync_type == "cdd":
            self._find_exchanged_momenta()

    def _find_exchanged_momenta(self) -> None:
        params = self.params
        vels, vels2 = list(getattr(self.model, "vels", None) or []), list(getattr(self.model, "vels2", None) or [])
        owners = list(getattr(self.model, "vels_params", None) or (params if len(vels) == len(params) else []))
        if not vels or len(vels) != len(vels2) or len(owners) != len(vels):
            raise ContractError(
                f"ModelClass {self.name!r} follows Theano-MPI's contract, but compile_iter_fns('cdd') left no "
                f"matching vels/vels2 lists ({len(vels)} vels, {len(vels2)} vels2): build the step with "
                "theanompi.lib.opt.pre_model_iter_fn(self, k=self.size), or use BSP_SYNC_TYPE=avg"
            )
        index = {id(p): i for i, p in enumerate(params)}
        self._layout = FlatLayout([p.get_value(borrow=True).shape for p in params])
        self._vel_slots = []
        for vel, vel2, owner in zip(vels, vels2, owners):
            if id(owner) not in index:
                raise ContractError(f"ModelClass {self.name!r}: vels_params holds a variable that is not in params")
            self._vel_slots.append((index[id(owner)], vel, vel2))
        if arrays.is_jax(vels[0].get_value(borrow=True)):
            self._device_vels = DeviceVels(self._layout, self._vel_slots, self.model.params[0].dtype)

    # ----- one step -----------------------------------------------------------------------
    def _remember(self, recorder) -> None:
        if recorder is not self._recorder:
            self._recorder = recorder
            recorder.samples_per_record = int(getattr(self.model, "batch_size", 1) or 1)

    def train_iter(self, count: int, recorder):
        self._remember(recorder)
        self._schedule.step(count / self.data.n_batch_train)
        try:
            self.model.train_iter(count // self.n_subb, recorder)
        except AttributeError as err:
            if not calls_gpu_sync(err):
                raise
            raise ContractError(GPU_SYNC_HINT.format(name=self.name)) from None
        if count == self.data.n_batch_train - 1:
            self.model.reset_iter("train")
        if self.sync_type == "cdd":
            return self._vels_vector()
        return None

    def _vels_vector(self):
        if self._device_vels is not None:
            return self._device_vels.pack()
        layout = self._layout
        assert layout is not None, "compile_iter_fns('cdd') lays the vector out"
        vector = np.zeros(layout.total, dtype=self.model.params[0].dtype)
        for i, vel, _ in self._vel_slots:
            vector[layout.offsets[i]:layout.offsets[i + 1]] = np.asarray(vel.get_value(borrow=True)).ravel()
        return vector

    def apply_update(self, vector_sum) -> None:
        """Store the workers' summed ``vels`` in ``vels2``; the model's next step applies them."""
        if self._device_vels is not None:
            self._device_vels.unpack_into_vels2(vector_sum)
            return
        layout = self._layout
        assert layout is not None, "compile_iter_fns('cdd') lays the vector out"
        total = arrays.to_host(vector_sum)
        for i, _, vel2 in self._vel_slots:
            part = total[layout.offsets[i]:layout.offsets[i + 1]].reshape(layout.shapes[i])
            assign(vel2, part.astype(vel2.get_value(borrow=True).dtype, copy=False))

    def val_iter(self, count: int, recorder) -> None:
        self._remember(recorder)
        self.model.val_iter(count // self.n_subb, recorder)
        if count == self.data.n_batch_val - 1:
            self.model.reset_iter("val")

    def rewind_validation(self) -> None:
        """Start validation over at its first batch (after a warm-up call of ``val_iter``)."""
        self.model.reset_iter("val")

    # ----- epochs -----------------------------------------------------------------------
    def adjust_hyperp(self, epoch: int) -> None:
        """Epoch start: finish the previous epoch as Theano-MPI did, then set ``model.epoch``."""
        if epoch > 0 and (self._epochs_started or self.options.resume):
            self.model.adjust_hyperp(epoch - 1)
            self._print_info()
        if self._schedule.active:
            self._schedule.start_epoch(epoch, log_to=self.config.rank == 0)
        else:
            self._scale_lr(epoch)
        self._epochs_started += 1
        self.model.epoch = epoch

    def _print_info(self) -> None:
        print_info = getattr(self.model, "print_info", None)
        if not callable(print_info) or self._recorder is None:
            return
        if "verbose" in inspect.signature(print_info).parameters:
            print_info(self._recorder, verbose=self.config.rank == 0)
        else:
            print_info(self._recorder)

    def _theano_mpi_multiplier(self, epoch: int) -> float:
        """Theano-MPI's ramp of ``shared_lr`` at ``epoch``'s start: geometric, from WARMUP_START_FACTOR to
        LR_SCALING's factor over WARMUP_EPOCHS (its BSP worker multiplied by ``size**(epoch/warmup)``)."""
        options = self.options
        full, start = scaling_factor(options.lr_scaling, self.config.size), options.warmup_start_factor
        if options.warmup_epochs <= 0 or epoch >= options.warmup_epochs:
            return full
        return start * (full / start) ** (max(0, epoch) / options.warmup_epochs)

    def _scale_lr(self, epoch: int) -> None:
        """LR_SCALING and WARMUP_START_FACTOR through ``scale_lr`` or ratios of ``shared_lr`` (without LR_SCHEDULE:
        Theano-MPI's way)."""
        options = self.options
        full = scaling_factor(options.lr_scaling, self.config.size)
        if full == 1.0 and (options.warmup_start_factor == 1.0 or options.warmup_epochs <= 0):
            return
        target = self._theano_mpi_multiplier(epoch)
        if self._epochs_started == 0 and options.resume:
            self._lr_multiplier = self._theano_mpi_multiplier(epoch - 1)
        ratio = target / self._lr_multiplier
        self._lr_multiplier = target
        if ratio == 1.0:
            return
        shared_lr = getattr(self.model, "shared_lr", None)
        at_once = options.warmup_epochs <= 0 and options.lr_scaling == "linear"  # what scale_lr(size) does
        if at_once and callable(getattr(self.model, "scale_lr", None)):
            self.model.scale_lr(self.config.size)
        elif shared_lr is not None:
            assign(shared_lr, np.asarray(shared_lr.get_value() * ratio, dtype=shared_lr.get_value().dtype))
        else:
            needs = "neither scale_lr(size) nor shared_lr" if at_once else "no shared_lr"
            asked = (f"LR_SCALING={options.lr_scaling}" if options.lr_scaling != "none" else
                     f"WARMUP_START_FACTOR={options.warmup_start_factor:g}")
            raise ConfigError(f"{asked}: ModelClass {self.name!r} has {needs} (Theano-MPI's learning-rate variable); "
                              "use LR_SCALING=none and WARMUP_START_FACTOR=1")

    # ----- the rest -----------------------------------------------------------------------
    def sync_state(self, comm) -> None:
        sync_state = getattr(self.model, "sync_state", None)
        if callable(sync_state):
            sync_state(comm)

    def cleanup(self) -> None:
        self._print_info()
        self.model.cleanup()
