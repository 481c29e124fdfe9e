"""ModelClasses for elastic sessions' tests (MODELFILE=path.py): the digits MLP, logging every step it trains.

``StepLog`` writes one JSON line per training step into ``RUN_DIR/steps/pid-PID.jsonl``: the step's iteration (the
session's step counter, continued across restarts), epoch, worker, number of workers, the sample ids of the batch
and the batch's summed loss -- so a test counts every sample of an epoch by id, and compares the loss of a step
with an uninterrupted run's. ``MODEL_NAP`` (seconds) slows each step down, so that a test can kill a worker mid-run.
"""

import json
import os
import time
from pathlib import Path

from theanompi.core.options import model_option, non_negative_float
from theanompi.models.mlp import MLP


class StepLog(MLP):
    declared_options = [model_option("nap", non_negative_float, 0.0, "seconds each step sleeps")]

    def train_iter(self, count, recorder):
        before = recorder.train_sums()
        ids = [int(i) for i in self.data.train_indices(count)]
        iteration = recorder.iteration
        vector = super().train_iter(count, recorder)
        after = recorder.train_sums()
        run_dir = self.config.run_dir
        if run_dir is not None:
            folder = Path(run_dir) / "steps"
            folder.mkdir(parents=True, exist_ok=True)
            row = {"iteration": iteration, "epoch": self._epoch, "count": count, "worker": self.config.rank,
                   "session": os.getppid(),
                   "workers": self.config.size, "ids": ids, "loss_sum": after[0] - before[0],
                   "n": after[2] - before[2], "time": time.time()}
            with open(folder / f"pid-{os.getpid()}.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if self.hp["nap"]:
            time.sleep(self.hp["nap"])
        return vector


def read_steps(run_dir) -> list[dict]:
    """Every step every worker logged into ``run_dir/steps`` (all sessions of the run)."""
    rows = []
    for path in sorted((Path(run_dir) / "steps").glob("pid-*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return rows
