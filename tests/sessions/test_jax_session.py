"""COMPUTE=jax on a CPU jax, a real BSP session under mpiexec: it learns and ends where COMPUTE=c ends.
(JAX mode in one process: tests/backend/test_jax_mode.py.)"""

import json

import numpy as np
import pytest
from conftest import run_launcher, write_cfg

from theanompi.runtime.records import load_final_params

jax = pytest.importorskip("jax")


def test_bsp_cdd_session_in_jax_mode_learns_and_equals_c_mode(tmp_path):
    """2 CPU workers, COMPUTE=jax vs COMPUTE=c: same final parameters to float tolerance, >= 95 % accuracy."""
    common = dict(N_EPOCHS=4, BSP_SYNC_TYPE="cdd", MODEL_WEIGHT_DECAY=0.0001)
    results = {}
    for compute in ("jax", "c"):
        cfg = write_cfg(tmp_path / f"{compute}.cfg", COMPUTE=compute, RUN_DIR=compute, **common)
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        results[compute] = json.loads((tmp_path / compute / "summary.json").read_text())
    assert results["jax"]["final_val_accuracy"] >= 0.95
    gap = 0.0
    for a, b in zip(load_final_params(tmp_path / "jax"), load_final_params(tmp_path / "c")):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
        gap = max(gap, float(np.abs(a - b).max()))
    print(f"jax accuracy {results['jax']['final_val_accuracy']:.4f}, c accuracy "
          f"{results['c']['final_val_accuracy']:.4f}, max |param difference| {gap:.2e}")
