"""The digits MLP that writes down its parameters as a session trains it: before every step and at every
validation's first batch (the trained model's, then the averaged weights'), into RUN_DIR/trace-rank0.npz."""

import numpy as np

from theanompi.comm.param_access import host_copy
from theanompi.models.mlp import MLP


class TracedMLP(MLP):
    def __init__(self, config):
        super().__init__(config)
        self.steps, self.validated = [], []

    def flat(self):
        return np.concatenate([host_copy(p).ravel() for p in self.params])

    def train_iter(self, count, recorder):
        self.steps.append(self.flat())
        return super().train_iter(count, recorder)

    def val_iter(self, count, recorder):
        if count == 0:
            self.validated.append(self.flat())
        super().val_iter(count, recorder)

    def cleanup(self):
        if self.config.rank == 0 and self.config.run_dir is not None:
            np.savez(self.config.run_dir / "trace-rank0.npz", steps=np.array(self.steps),
                     validated=np.array(self.validated), final=self.flat())
        super().cleanup()


class OwnDecayMLP(MLP):
    """An MLP with a learning-rate schedule of its own (a tenfold drop after epoch 1)."""

    def lr_multiplier(self, epoch_progress):
        return (0.1 if epoch_progress >= 1 else 1.0) * super().lr_multiplier(epoch_progress)
