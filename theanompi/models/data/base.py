"""DataClass base: rank sharding with a common per-epoch shuffle, and in-memory arrays.

:class:`DataClass` holds the sharding every loader shares. It shards *units*
over ranks: samples for in-memory arrays (:class:`ShardedArrayData`, the
synthetic data), whole files or stored batches for file-backed loaders
(``hickle_batches``), ``units_per_batch`` units making one rank batch.

Training: every epoch all ranks draw the same permutation of the units (seed +
epoch), padded by wrapping to a multiple of ``size * units_per_batch``. Global
batch ``b`` is the slice ``[b*S*U, (b+1)*S*U)`` of it and rank ``r`` takes the
r-th ``U``-slice, so the union of the ranks' batch ``b`` is exactly the batch
``b`` one process would see with ``S*U`` units (BSP-cdd's equivalence rests on
this). Every rank gets the same ``n_batch_train``.
Validation: contiguous, disjoint shards; ranks may differ by one unit.

Resuming inside an epoch (:meth:`DataClass.start_at`): the position is the number of units of the epoch's order
already consumed, whatever the number of ranks that consumed them; the rest of the order is then sharded over the
ranks there are now (padded as an epoch is), so that no unit of the epoch is lost or seen twice (beyond the
padding of its last batch) even when the number of ranks changed.

Example
-------
>>> import numpy as np
>>> x = np.arange(10, dtype="float32")[:, None]; y = np.arange(10, dtype="int32")
>>> d = ShardedArrayData(x, y, x, y, batch_size=2, rank=1, size=2, seed=0)
>>> d.n_batch_train, d.n_batch_val
(3, 3)
>>> d.set_epoch(0); xb, yb = d.train_batch(0); xb.shape
(2, 1)
"""

from __future__ import annotations

import logging
import math

import numpy as np

from theanompi.core.errors import ConfigError

log = logging.getLogger("theanompi")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def check_shard_args(units_per_batch, rank, size, name: str = "batch_size") -> None:
    """ConfigError unless ``units_per_batch >= 1`` and ``0 <= rank < size`` (all integers).

    Example
    -------
    >>> check_shard_args(4, 0, 2)
    >>> check_shard_args(4, 2, 2)
    Traceback (most recent call last):
    ...
    theanompi.core.errors.ConfigError: rank 2 is outside 0..1
    """
    if not _is_int(units_per_batch) or units_per_batch < 1:
        raise ConfigError(f"{name}={units_per_batch!r} must be an integer >= 1")
    if not _is_int(size) or size < 1:
        raise ConfigError(f"size={size!r} (number of workers) must be an integer >= 1")
    if not _is_int(rank) or not 0 <= rank < size:
        raise ConfigError(f"rank {rank} is outside 0..{size - 1}")


class ArraySpec:
    """Shape and dtype of a data set that is not held in memory (``x_train`` of file loaders).

    Example
    -------
    >>> spec = ArraySpec((1000, 3, 224, 224), "float32")
    >>> spec.shape[1:], len(spec), spec.ndim
    ((3, 224, 224), 1000, 4)
    """

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"ArraySpec(shape={self.shape}, dtype={self.dtype})"


class DataClass:
    """Base of theanompi's DataClasses: rank sharding of training/validation units.

    Subclasses call :meth:`setup_shards` once their unit counts are known and
    implement :meth:`load_train` and :meth:`load_val` (and usually
    ``x_train``/:attr:`input_shape`). :meth:`train_batch`/:meth:`val_batch`
    check ``count`` and pass this rank's unit indices to them.

    Attributes
    ----------
    n_batch_train, n_batch_val : int
        Batches per epoch on this rank (``n_batch_train`` equal on every rank).
    units_per_batch : int
        Units (samples, files) in one rank batch.
    epoch : int
        The epoch selected by :meth:`set_epoch`.

    Example
    -------
    >>> class Files(DataClass):
    ...     def __init__(self, n_files, rank, size):
    ...         self.setup_shards(n_files, 0, 1, rank, size, seed=0, unit="files_per_batch")
    ...     def load_train(self, units, count):
    ...         return f"file {units[0]}"
    >>> d = Files(5, rank=1, size=2)
    >>> d.n_batch_train, len(d.train_indices(0)), d.train_batch(0)[:5]
    (3, 1, 'file ')
    """

    n_batch_train: int = 0
    n_batch_val: int = 0
    #: the training inputs (or their :class:`ArraySpec` where they are not in memory); set by subclasses
    x_train: np.ndarray | ArraySpec
    _order: np.ndarray  # the current epoch's training order (set_epoch)
    #: units of the current epoch consumed before this session started it (a resume inside the epoch: start_at)
    epoch_start_units: int = 0
    _partial_epoch = False  # the current epoch started inside (n_batch_train counts what was left of it)

    def setup_shards(self, n_train_units: int, n_val_units: int, units_per_batch: int, rank: int, size: int,
                     seed: int, unit: str = "batch_size") -> None:
        """Validate and set up the sharding of ``n_train_units``/``n_val_units`` over ``size`` ranks."""
        check_shard_args(units_per_batch, rank, size, unit)
        if not _is_int(seed) or seed < 0:
            raise ConfigError(f"seed={seed!r} must be an integer >= 0")
        if n_train_units < 1:
            raise ConfigError("training set is empty")
        self.rank, self.size, self.seed = int(rank), int(size), int(seed)
        self.units_per_batch = int(units_per_batch)
        self.global_units = self.size * self.units_per_batch
        self.n_train_units, self.n_val_units = int(n_train_units), int(n_val_units)
        self.n_batch_train = math.ceil(self.n_train_units / self.global_units)
        if self.n_train_units < self.global_units and self.rank == 0:
            most = max(1, self.n_train_units // self.size)
            log.warning("%s=%d on %d workers takes %d units per step, but the training set has %d: every epoch is "
                        "one step that wraps around the data (use %s <= %d)", unit, self.units_per_batch, self.size,
                        self.global_units, self.n_train_units, unit, most)
        self.val_indices = np.array_split(np.arange(self.n_val_units), self.size)[self.rank]
        self.n_batch_val = math.ceil(len(self.val_indices) / self.units_per_batch)
        self.set_epoch(0)

    # ----- shuffle and shards -----------------------------------------------------------
    def epoch_order(self, epoch: int, start_units: int = 0) -> np.ndarray:
        """The common (all ranks) padded training order of ``epoch``, from its unit ``start_units`` on (the units
        before it were consumed before a resume): the rest of the epoch's permutation, padded by wrapping."""
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n_train_units)
        rest = np.concatenate([perm[start_units:], perm[:start_units]]) if start_units else perm
        n_batches = math.ceil((self.n_train_units - start_units) / self.global_units)
        return np.resize(rest, n_batches * self.global_units)

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of ``epoch`` (call at every epoch start, like DistributedSampler); an epoch that
        :meth:`start_at` named starts at its unit."""
        self.epoch = epoch
        resume = getattr(self, "_resume", None)
        self.epoch_start_units = resume[1] if resume is not None and resume[0] == epoch else 0
        self._order = self.epoch_order(epoch, self.epoch_start_units)
        if self.epoch_start_units or self._partial_epoch:  # into a resumed epoch, or out of it
            self.n_batch_train = len(self._order) // self.global_units
            self._partial_epoch = bool(self.epoch_start_units)

    def start_at(self, epoch: int, units: int) -> None:
        """Resume ``epoch`` after its first ``units`` units of the common order (consumed before a restart, by any
        number of ranks); its ``n_batch_train`` shrinks to what is left. Selects ``epoch`` now.

        Example
        -------
        >>> x = np.arange(12, dtype="float32")[:, None]; y = np.arange(12, dtype="int32")
        >>> three = [ShardedArrayData(x, y, x, y, batch_size=2, rank=r, size=3, seed=0) for r in range(3)]
        >>> seen = [int(u) for d in three for u in d.train_indices(0)]          # one step of 3 ranks: 6 units
        >>> two = [ShardedArrayData(x, y, x, y, batch_size=3, rank=r, size=2, seed=0) for r in range(2)]
        >>> for d in two:
        ...     d.start_at(0, units=6)
        >>> two[0].n_batch_train, sorted(seen + [int(u) for d in two for u in d.train_indices(0)])
        (1, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
        """
        if not _is_int(units) or not 0 <= units < self.n_train_units:
            raise ConfigError(f"resume position: unit {units!r} is outside 0..{self.n_train_units - 1}")
        self._resume = (int(epoch), int(units))
        self.set_epoch(epoch)

    def units_consumed(self, batches: int) -> int:
        """Units of the current epoch's order consumed once ``batches`` training batches of it are done (every
        rank's, and those consumed before a resume), at most the epoch's units."""
        return min(self.n_train_units, self.epoch_start_units + batches * self.global_units)

    def train_slot(self, count: int) -> int:
        """Position in the epoch order where this rank's batch ``count`` starts (unique per rank and batch)."""
        return count * self.global_units + self.rank * self.units_per_batch

    def train_indices(self, count: int) -> np.ndarray:
        """Unit indices of this rank's training batch ``count`` of the current epoch."""
        start = self.train_slot(count)
        return self._order[start:start + self.units_per_batch]

    def val_unit_indices(self, count: int) -> np.ndarray:
        """Unit indices of this rank's validation batch ``count``."""
        u = self.units_per_batch
        return self.val_indices[count * u:(count + 1) * u]

    # ----- batches ----------------------------------------------------------------------
    def train_batch(self, count: int):
        """(inputs, labels) of this rank's training batch ``count`` of the current epoch."""
        if not 0 <= count < self.n_batch_train:
            raise IndexError(f"training batch {count} is outside 0..{self.n_batch_train - 1}")
        return self.load_train(self.train_indices(count), count)

    def val_batch(self, count: int):
        """(inputs, labels) of this rank's validation batch ``count``."""
        if not 0 <= count < self.n_batch_val:
            raise IndexError(f"validation batch {count} is outside 0..{self.n_batch_val - 1}")
        return self.load_val(self.val_unit_indices(count), count)

    def load_train(self, units: np.ndarray, count: int):
        """(inputs, labels) made of training ``units`` (this rank's batch ``count``)."""
        raise NotImplementedError

    def load_val(self, units: np.ndarray, count: int):
        """(inputs, labels) made of validation ``units`` (this rank's batch ``count``)."""
        raise NotImplementedError

    @property
    def input_shape(self) -> tuple:
        """Shape of one input sample as the batches deliver it (``x_train.shape[1:]``)."""
        return tuple(self.x_train.shape[1:])

    # ----- resources --------------------------------------------------------------------
    def close(self) -> None:
        """Release files, threads, ...; nothing to do for the base class. Idempotent."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class ShardedArrayData(DataClass):
    """In-memory arrays sharded by rank (one unit = one sample, ``batch_size`` per rank batch)."""

    def __init__(self, x_train, y_train, x_val, y_val, batch_size: int, rank: int, size: int, seed: int):
        check_shard_args(batch_size, rank, size)
        for name, x, y in (("train", x_train, y_train), ("val", x_val, y_val)):
            if len(x) != len(y):
                raise ConfigError(f"{name} set has {len(x)} inputs but {len(y)} labels")
        if len(x_train) == 0:
            raise ConfigError("training set is empty")
        self.x_train, self.y_train = x_train, y_train
        self.x_val, self.y_val = x_val, y_val
        self.batch_size = batch_size
        self.setup_shards(len(x_train), len(x_val), batch_size, rank, size, seed)
        self.global_batch = self.global_units

    def load_train(self, units, count):
        return self.x_train[units], self.y_train[units]

    def load_val(self, units, count):
        return self.x_val[units], self.y_val[units]
