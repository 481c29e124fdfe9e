"""ModelClasses for EASGD's protocol tests (used through MODELFILE=path.py)."""

import time

import numpy as np

from theanompi.models.mlp import MLP


class RandomSleeper(MLP):
    """Every training step first sleeps a random 0-20 ms (seeded by SEED and the worker's rank),
    so workers reach the server in an unpredictable order."""

    def __init__(self, config):
        super().__init__(config)
        self._sleeps = np.random.default_rng([config.seed, config.rank, 2015])

    def train_iter(self, count, recorder):
        time.sleep(self._sleeps.uniform(0.0, 0.02))
        return super().train_iter(count, recorder)


class ShortShard(MLP):
    """The last worker's shard is a third as long (its n_batch_train is reduced)."""

    def __init__(self, config):
        super().__init__(config)
        if config.size > 1 and config.rank == config.size - 1:
            self.data.n_batch_train = max(1, self.data.n_batch_train // 3)


class NappingShortShard(ShortShard):
    """ShortShard with a 30 ms nap per step: a step takes long against the skew between the workers'
    starts (the first call of a compiled function takes ~0.25 s). Without it, one worker may train nearly
    every step of this tiny model before the other's first step ends."""

    def train_iter(self, count, recorder):
        time.sleep(0.03)
        return super().train_iter(count, recorder)
