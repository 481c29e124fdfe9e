"""PyTorch ModelClasses on the example's digits CNN: slowed down (fault tests), a NaN gradient and a reducer bound
to a wrong buffer (bad-input matrix), reporting its devices (GPU tests)."""

import os
import signal
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


class TorchWorkerDiesMidRun(TorchNapper):
    """Worker 1 (``config.rank == 1``: EASGD's server is not counted) kills itself (SIGKILL) at its 6th training
    step: a worker lost mid-run whatever the machine's speed."""

    def train_iter(self, count, recorder):
        self._steps = getattr(self, "_steps", 0) + 1
        if self.config.rank == 1 and self._steps == 6:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().train_iter(count, recorder)


class TorchNaNInjector(DigitsCNN):
    """Worker 1's first training loss is NaN, so backward makes every gradient NaN."""

    def loss_and_error(self, logits, y):
        loss, error = super().loss_and_error(logits, y)
        self._losses = getattr(self, "_losses", 0) + 1
        if self.config.rank == 1 and self._losses == 1:
            loss = loss * float("nan")
        return loss, error


class TorchShortReducerBuffer(DigitsCNN):
    """Binds BSP's overlapped exchange to all of its flat gradient but the last element."""

    def attach_reducer(self, reducer):
        reducer.bind(self.update_vector()[:-1])


class DeviceReportCNN(DigitsCNN):
    """Writes, at cleanup, where its module, flat gradient and momenta live and what update_vector hands over
    (RUN_DIR/torch-report-RANK.json; for tests/sessions/test_gpu.py)."""

    def cleanup(self):
        import json

        vector = self.update_vector()
        pointer = vector.data.ptr if type(vector).__module__.startswith("cupy") else vector.ctypes.data
        report = {
            "param_devices": sorted({str(p.device) for p in self.params}),
            "velocity_devices": sorted({str(v.device) for v in self.velocities}),
            "flat_grad_device": str(self.flat_grad.device),
            "update_vector_type": f"{type(vector).__module__.split('.')[0]}.{type(vector).__name__}",
            "update_vector_is_flat_grad": pointer == self.flat_grad.data_ptr(),
        }
        (self.config.run_dir / f"torch-report-{self.config.rank}.json").write_text(json.dumps(report))
        super().cleanup()
