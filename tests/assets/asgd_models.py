"""Test ModelClasses for ASGD: random delays, a shorter shard."""

import time

import numpy as np

from theanompi.models.mlp import MLP


class RandomDelays(MLP):
    """Sleeps 0-10 ms (seeded per rank) in every training step."""

    def __init__(self, config):
        super().__init__(config)
        self._delay_rng = np.random.default_rng(1000 + config.rank + 17 * config.seed)

    def train_iter(self, count, recorder):
        time.sleep(self._delay_rng.uniform(0, 0.01))
        return super().train_iter(count, recorder)


class ShortShard(MLP):
    """The last worker has 10 fewer training batches per epoch."""

    def __init__(self, config):
        super().__init__(config)
        if config.rank == config.size - 1:
            self.data.n_batch_train -= 10
