"""PyTorch ModelClasses for the fault tests: the example's digits CNN, slowed down."""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from torch_digits import DigitsCNN


class TorchNapper(DigitsCNN):
    """A 0.05 s nap per step: slow enough to kill a worker mid-run, fast enough to finish after."""

    def train_iter(self, count, recorder):
        time.sleep(0.05)
        return super().train_iter(count, recorder)
