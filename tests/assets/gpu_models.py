"""A digits MLP that reports, at cleanup, what its rank saw of the GPU (for tests/sessions/test_gpu.py)."""

import json
import os

from theanompi.models.mlp import MLP


class DeviceReportMLP(MLP):
    def cleanup(self):
        import jax

        storages = [p.get_value(borrow=True) for p in self.params + self.state_vars]
        report = {
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "xla_preallocate": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
            "jax_devices": [d.platform for d in jax.devices()],
            "storage_types": sorted({type(s).__name__ for s in storages}),
            "storage_platforms": sorted({d.platform for s in storages for d in s.devices()}),
        }
        path = self.config.run_dir / f"device-report-{self.config.rank}.json"
        path.write_text(json.dumps(report))
        super().cleanup()
