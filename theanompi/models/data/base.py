"""DataClass base: in-memory arrays sharded by rank with a common per-epoch shuffle.

Training: every epoch all ranks draw the same permutation (seed + epoch), padded
by wrapping to a multiple of ``size * batch_size``. Global batch ``b`` is the
slice ``[b*S*B, (b+1)*S*B)`` of it and rank ``r`` takes the r-th ``B``-slice, so
the union of the ranks' batch ``b`` is exactly the batch ``b`` one process
would see with ``S*B`` samples (BSP-cdd's equivalence rests on this). Every
rank gets the same ``n_batch_train``.
Validation: contiguous, disjoint shards; ranks may differ by one sample.

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

import math

import numpy as np

from theanompi.errors import ConfigError


class ShardedArrayData:
    def __init__(self, x_train, y_train, x_val, y_val, batch_size: int, rank: int, size: int, seed: int):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"batch_size={batch_size!r} must be an integer >= 1")
        if not 0 <= rank < size:
            raise ConfigError(f"rank {rank} is outside 0..{size - 1}")
        for name, x, y in (("train", x_train, y_train), ("val", x_val, y_val)):
            if len(x) != len(y):
                raise ConfigError(f"{name} set has {len(x)} inputs but {len(y)} labels")
        if len(x_train) == 0:
            raise ConfigError("training set is empty")
        self.x_train, self.y_train = x_train, y_train
        self.x_val, self.y_val = x_val, y_val
        self.batch_size, self.rank, self.size, self.seed = batch_size, rank, size, seed
        self.global_batch = size * batch_size
        self.n_batch_train = math.ceil(len(x_train) / self.global_batch)
        self.val_indices = np.array_split(np.arange(len(x_val)), size)[rank]
        self.n_batch_val = math.ceil(len(self.val_indices) / batch_size)
        self._order = None
        self.set_epoch(0)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The common (all ranks) padded training order of ``epoch``."""
        perm = np.random.default_rng([self.seed, epoch]).permutation(len(self.x_train))
        return np.resize(perm, self.n_batch_train * self.global_batch)

    def set_epoch(self, epoch: int) -> None:
        """Select the shuffle of ``epoch`` (call at every epoch start, like DistributedSampler)."""
        self._order = self.epoch_order(epoch)

    def train_indices(self, count: int) -> np.ndarray:
        start = count * self.global_batch + self.rank * self.batch_size
        return self._order[start:start + self.batch_size]

    def train_batch(self, count: int):
        """(inputs, labels) of this rank's training batch ``count`` of the current epoch."""
        if not 0 <= count < self.n_batch_train:
            raise IndexError(f"training batch {count} is outside 0..{self.n_batch_train - 1}")
        idx = self.train_indices(count)
        return self.x_train[idx], self.y_train[idx]

    def val_batch(self, count: int):
        """(inputs, labels) of this rank's validation batch ``count``."""
        if not 0 <= count < self.n_batch_val:
            raise IndexError(f"validation batch {count} is outside 0..{self.n_batch_val - 1}")
        idx = self.val_indices[count * self.batch_size:(count + 1) * self.batch_size]
        return self.x_val[idx], self.y_val[idx]
