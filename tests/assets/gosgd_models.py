"""ModelClasses for the GOSGD tests (used through MODELFILE=path.py)."""

import time

import numpy as np

from theanompi.models.mlp import MLP


class JitteryMLP(MLP):
    """Sleeps a random 0-20 ms before every training step (seeded by SEED and rank): workers drift apart."""

    def __init__(self, config):
        super().__init__(config)
        self._jitter = np.random.default_rng([config.seed, config.rank, 20])

    def train_iter(self, count, recorder):
        time.sleep(self._jitter.uniform(0.0, 0.020))
        return super().train_iter(count, recorder)


class ShortShardMLP(MLP):
    """The last rank trains on a third of the batches the others do (at least one)."""

    def __init__(self, config):
        super().__init__(config)
        if config.size > 1 and config.rank == config.size - 1:
            self.data.n_batch_train = max(1, self.data.n_batch_train // 3)
