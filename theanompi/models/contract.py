"""The ModelClass contract (Theano-MPI's, made explicit) and its checks.

A ModelClass is constructed as ``ModelClass(config)`` (a :class:`WorkerConfig`) and has

* ``params``: list of trainable parameters, all pytensor shared variables, all
  ``torch.Tensor`` s or all :class:`~theanompi.comm.array_cell.ArrayCell` s holding JAX arrays (see
  :mod:`theanompi.comm.param_access`; ``theanompi.models.torch_classifier`` builds such a model from a
  ``torch.nn.Module``, ``theanompi.models.jax_classifier`` from a Flax ``nnx.Module``,
  ``theanompi.models.keras_classifier`` from a ``keras.Model``)
* ``data``: a DataClass with integer ``n_batch_train`` (>= 1) and ``n_batch_val`` (>= 0)
* ``compile_iter_fns(sync_type)``: compile the functions ``train_iter``/``val_iter`` use.
  ``sync_type`` is one of :class:`SyncType`'s values: ``'cdd'`` (the two-phase step, below)
  or ``'avg'`` / ``'local'`` (a whole local step; ``None``, WorkerConfig's default for a model
  built outside a session, means the same).
* ``train_iter(count, recorder)``: one training step on training batch ``count``.
  With ``cdd`` it must *not* change ``params``; it returns the update vector
  (the gradient of the mean loss) as one flat contiguous 1-D array, which the
  rule sums across workers (one in-place allreduce) and hands to
  ``apply_update``. Otherwise it performs the whole local step and returns None.
* ``apply_update(vector_sum)`` (required with ``cdd``; only BSP calls it -- ASGD's servers
  apply the vectors themselves): apply the *sum* of the workers'
  update vectors, divided by ``config.size`` (W <- W - lr * sum(u) / N). Folding
  the 1/N into the compiled update costs nothing; dividing the exchanged buffer
  would cost a full extra pass over it.
* ``val_iter(count, recorder)``: evaluate validation batch ``count``
* ``adjust_hyperp(epoch)``: called at the start of every epoch (learning rate, data epoch)
* ``cleanup()``: release data loaders, files, ...
* ``state_vars`` (optional): variables (of the params' kind) beyond ``params`` that a checkpoint must
  hold (optimizer velocities, the learning rate, ...).
* ``sync_state(comm)`` (optional): called on every worker at each epoch end, before
  validation, with the workers' communicator: pool non-exchanged state such as
  batch-norm running statistics.
* ``attach_reducer(reducer)`` (optional, ``cdd``): BSP's exchange overlapped with backward. Bind the
  :class:`~theanompi.comm.exchange.overlap.OverlappedAllreduce` to the update vector (``reducer.bind(vector)``:
  the same writable buffer ``train_iter`` returns every step) and, in every ``train_iter``, call
  ``reducer.ready(i)`` once for each param ``i`` as soon as its slice of the vector is final (autograd hooks);
  BSP then waits with ``reducer.finish()`` instead of exchanging the returned vector.

Training and validation loss/error are reported with ``recorder.record_train(loss,
error, n)`` and ``recorder.record_val(loss, error, n)``.

Example
-------
>>> check_model_class(object)
Traceback (most recent call last):
...
theanompi.core.errors.ContractError: ModelClass 'object' lacks method 'compile_iter_fns' (the contract needs: ...)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from theanompi.comm.param_access import check_params
from theanompi.core.errors import ContractError
from theanompi.core.session_options import SessionOptions

REQUIRED_METHODS = ("compile_iter_fns", "train_iter", "val_iter", "adjust_hyperp", "cleanup")


class SyncType:
    """The values of ``sync_type`` a session hands to ``compile_iter_fns`` (and ``config.sync_type``).

    * ``CDD`` (``'cdd'``): the two-phase step -- ``train_iter`` returns the update vector.
      BSP with ``BSP_SYNC_TYPE=cdd`` (more than one worker; ``apply_update`` applies the sum)
      and ASGD with a server-side updater (``sgd``, ``momentum``, ``adagrad``: the servers step).
    * ``AVG`` (``'avg'``): a whole local step; BSP averages the parameters every ``avg_freq`` steps.
    * ``LOCAL`` (``'local'``): a whole local step; a 1-worker BSP session, GOSGD, EASGD (workers
      and server) and ASGD with the ``add`` updater.

    Example
    -------
    >>> check_sync_type("cdd"), check_sync_type(None)
    ('cdd', None)
    >>> check_sync_type("gossip")
    Traceback (most recent call last):
    ...
    ValueError: sync_type='gossip' is not one of 'cdd', 'avg', 'local' (or None, which means 'local')
    """

    CDD = "cdd"
    AVG = "avg"
    LOCAL = "local"
    ALL = (CDD, AVG, LOCAL)


def check_sync_type(sync_type: str | None) -> str | None:
    """``sync_type`` itself if it is one of :class:`SyncType`'s values or None; ValueError otherwise."""
    if sync_type is not None and sync_type not in SyncType.ALL:
        allowed = ", ".join(repr(v) for v in SyncType.ALL)
        raise ValueError(f"sync_type={sync_type!r} is not one of {allowed} (or None, which means 'local')")
    return sync_type


@dataclass
class WorkerConfig:
    """What a ModelClass constructor receives.

    Attributes for theanompi's contract; Theano-MPI's models read the same object as
    a dict: ``config['rank']``, ``config['size']``, ``config['verbose']`` (True on
    worker 0), ``config['mname']`` (the ModelClass name), and every attribute by name.

    Example
    -------
    >>> config = WorkerConfig(rank=1, size=2, seed=0, device="cpu1", model_name="Cifar10_model")
    >>> config.rank, config["rank"], config["size"], config["verbose"], config["mname"]
    (1, 1, 2, False, 'Cifar10_model')
    >>> config.get("no_paraload", False), "rank" in config
    (False, True)
    """

    rank: int  # index among the session's workers (0 .. size-1)
    size: int  # number of workers
    seed: int
    device: str
    sync_type: str | None = None  # a SyncType value; None (built outside a session) means 'local'
    options: SessionOptions = field(default_factory=SessionOptions)  # the session's options, typed
    model_options: dict[str, Any] = field(default_factory=dict)  # MODEL_* keys, lower-cased
    run_dir: Path | None = None
    model_name: str = ""  # MODELCLASS

    # Theano-MPI's dict spelling -------------------------------------------------------
    def _as_dict(self) -> dict[str, Any]:
        fields = {name: getattr(self, name) for name in self.__dataclass_fields__}
        return {**fields, "verbose": self.rank == 0, "mname": self.model_name}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._as_dict()[key]
        except KeyError:
            raise KeyError(f"{key!r} is not in the worker config (it has: {', '.join(self._as_dict())})") from None

    def __contains__(self, key: object) -> bool:
        return key in self._as_dict()

    def get(self, key: str, default: Any = None) -> Any:
        return self._as_dict().get(key, default)

    def keys(self):
        return self._as_dict().keys()


def check_model_class(cls: type) -> None:
    """Class-level check (cheap; the launcher runs it before starting ranks)."""
    for name in REQUIRED_METHODS:
        if not callable(getattr(cls, name, None)):
            raise ContractError(
                f"ModelClass {cls.__name__!r} lacks method {name!r} "
                f"(the contract needs: {', '.join(REQUIRED_METHODS)})"
            )


def check_model_instance(model: Any, sync_type: str | None = None) -> None:
    """Instance-level check, run on every rank after construction (``sync_type``: what it will compile)."""
    check_sync_type(sync_type)
    name = type(model).__name__
    check_model_class(type(model))
    params = getattr(model, "params", None)
    if not isinstance(params, (list, tuple)) or not params:
        raise ContractError(f"ModelClass {name!r}: 'params' must be a non-empty list of shared variables "
                            "or torch tensors")

    check_params(params, f"ModelClass {name!r}")
    data = getattr(model, "data", None)
    if data is None:
        raise ContractError(f"ModelClass {name!r} lacks attribute 'data' (a DataClass)")
    for attr, minimum in (("n_batch_train", 1), ("n_batch_val", 0)):
        value = getattr(data, attr, None)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ContractError(
                f"ModelClass {name!r}: data.{attr} is {value!r}; it must be an integer >= {minimum}"
            )
    if sync_type == SyncType.CDD and not callable(getattr(model, "apply_update", None)):
        raise ContractError(
            f"ModelClass {name!r} lacks method 'apply_update', needed by BSP_SYNC_TYPE=cdd "
            "(or use BSP_SYNC_TYPE=avg)"
        )
