"""COMPUTE=jax on a CPU jax, real sessions under mpiexec: they learn and end where COMPUTE=c ends -- a
ClassifierModel, and models that compile their own functions (Theano-MPI's idiom, Lasagne layers, the WGAN)
under BSP and EASGD. (JAX mode in one process: tests/backend/test_jax_mode.py; on a GPU: tests/sessions/test_gpu.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, run_launcher, write_cfg

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


JAX_MODE_MODELS = str(ASSETS / "jax_mode_models.py")
OWN_FUNCTIONS = {  # ModelClasses that compile their own functions, with their session keys
    "theanompi-idiom": dict(MODELFILE=JAX_MODE_MODELS, MODELCLASS="GuardedDigitsMLP"),
    "lasagne": dict(MODELFILE=JAX_MODE_MODELS, MODELCLASS="DigitsLasagneCNN"),
    "wgan": dict(MODELFILE="theanompi.models.zoo.gans", MODELCLASS="WGAN", MODEL_CRITIC_HIDDEN="32",
                 MODEL_GEN_HIDDEN="32", MODEL_TRAIN_SIZE=640, MODEL_VAL_SIZE=128,
                 # 0.125, not the default 0.1: pytensor's C code compares float32 weights with 0.1 as a double, so
                 # the gradient of clip(w, -0.1, 0.1) is 0 at w == float32(0.1) in C mode and 1 in JAX mode
                 MODEL_CLIP=0.125),
}
RULES = {"BSP": dict(RULE="BSP", DEVICES="cpu0,cpu1", BSP_SYNC_TYPE="cdd"),  # 2 workers: vels/vectors summed
         "EASGD": dict(RULE="EASGD", DEVICES="cpu0,cpu1")}  # server + 1 worker: deterministic, comparable


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("model", OWN_FUNCTIONS)
def test_models_compiling_their_own_functions_run_in_jax_mode_and_equal_c_mode(tmp_path, model, rule):
    """COMPUTE=jax: the rank makes JAX mode the default before importing the model, so the functions the model
    compiles itself are jitted and its shared variables live on jax's device; the session ends within float32
    tolerance of COMPUTE=c. The Theano-MPI-style and Lasagne-style models run every step under
    jax.transfer_guard("disallow") (tests/assets/jax_mode_models.py) and report their storages."""
    keys = dict(N_EPOCHS=2 if model == "wgan" else 1, **OWN_FUNCTIONS[model], **RULES[rule])
    summaries = {}
    for compute in ("jax", "c"):
        cfg = write_cfg(tmp_path / f"{compute}.cfg", COMPUTE=compute, RUN_DIR=compute, **keys)
        proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        summaries[compute] = json.loads((tmp_path / compute / "summary.json").read_text())
    params = {compute: load_final_params(tmp_path / compute) for compute in summaries}
    assert len(params["jax"]) == len(params["c"]) > 0
    for a, b in zip(params["jax"], params["c"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    gap = max(float(np.abs(a - b).max()) for a, b in zip(params["jax"], params["c"]))
    print(f"{model} {rule}: max |param difference| jax vs c {gap:.2e}, accuracy "
          f"{summaries['jax']['final_val_accuracy']:.4f} / {summaries['c']['final_val_accuracy']:.4f}")
    assert summaries["jax"]["final_val_accuracy"] == pytest.approx(summaries["c"]["final_val_accuracy"], abs=1e-3)
    if model == "wgan":
        return
    reports = [json.loads(p.read_text()) for p in sorted((tmp_path / "jax").rglob("jax-report-*.json"))]
    assert reports, "the JAX-mode ranks left no report"
    for report in reports:  # the workers' and, under EASGD, the server's
        assert report["classes"] == ["DeviceSharedVariable"] and report["storage_types"] == ["ArrayImpl"]
    # every training step ran under transfer_guard("disallow"): none of them moved anything to or from the host
    assert sum(report["guarded_steps"] for report in reports) >= summaries["jax"]["iterations"] > 0
