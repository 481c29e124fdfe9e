"""The Flax example's digits CNN with a NaN gradient on worker 1 (tests/sessions/test_jax_keras.py)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from jax_digits import DigitsCNN
from nan_shard import PoisonedShard


class JaxNaNInjector(PoisonedShard, DigitsCNN):
    """Worker 1's training images are NaN."""
