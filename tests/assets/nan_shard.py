"""A ModelClass mixin: worker 1's training images all NaN, so its first gradient is NaN (the bad-input checks of
tests/sessions/test_jax_keras.py)."""

import numpy as np


class PoisonedShard:
    """build_data's shard with worker 1's training images all NaN."""

    def build_data(self):
        data = super().build_data()
        if self.config.rank == 1:
            data.x_train = np.full_like(data.x_train, np.nan)
        return data
