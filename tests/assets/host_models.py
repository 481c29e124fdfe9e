"""ModelClasses for tests/sessions/test_two_hosts.py (used through MODELFILE=path.py)."""

import socket

from theanompi.models.mlp import MLP


class FailsOnLastWorker(MLP):
    """The last worker raises at its 3rd training step, naming the host it runs on."""

    def train_iter(self, count, recorder):
        if self.config.rank == self.config.size - 1 and count == 2:
            raise RuntimeError(f"injected failure on {socket.gethostname()}")
        return super().train_iter(count, recorder)
