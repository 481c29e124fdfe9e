"""JAX (Flax) and Keras 3 models (theanompi.models.jax_classifier, .keras_classifier) at launch and under a real
mpiexec, as tests/sessions/test_torch.py checks PyTorch models. (In one process: tests/models/test_jax_classifier.py,
tests/models/test_keras_classifier.py.)

Three flavours: the Flax example, the Keras example on Keras's jax backend and on its torch backend
(``KERAS_BACKEND`` in the launcher's environment, which every rank inherits). Each session costs its start-up (jax,
Flax or Keras and torch imported on every rank, the steps compiled), so the checks are spread over the flavours: BSP
``cdd`` against one process with twice the batch and resume on the two JAX-backed ones, every other rule on Flax and
on Keras (its backends alternating), a NaN gradient on Flax and on Keras-on-torch (under BSP ``cdd`` with its
exchange overlapped with backward; Keras on jax trains through Flax's JaxFunctionalClassifier; the launcher's
one-line refusal of another Keras backend is checked here only). Keras on torch trains as TorchClassifierModel, whose
``cdd`` equality and resume test_torch.py checks; over 94 steps its own runs drift apart by more than float
tolerance (a max-pool tie decided the other way by a last-bit difference between torch's channels-last convolutions
of 16 and of 32 images), so its 2-worker mean gradient is checked against the double batch's in one process
(tests/models/test_keras_classifier.py).
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

if any(importlib.util.find_spec(name) is None for name in ("flax", "keras", "torch")):  # (not imported here)
    pytest.skip("needs flax, keras and torch: pip install -e '.[jax,keras,torch]'", allow_module_level=True)

from conftest import ASSETS, ROOT, run_launcher, write_cfg

from theanompi.runtime.records import load_final_params

EXAMPLES = ROOT / "examples"
#: flavour -> (cfg keys, the launcher's environment additions)
FLAVOURS = {
    "flax": (dict(MODELFILE=str(EXAMPLES / "jax_digits.py"), MODELCLASS="DigitsCNN"), {}),
    "keras-jax": (dict(MODELFILE=str(EXAMPLES / "keras_digits.py"), MODELCLASS="DigitsCNN"), {"KERAS_BACKEND": "jax"}),
    "keras-torch": (dict(MODELFILE=str(EXAMPLES / "keras_digits.py"), MODELCLASS="DigitsCNN"),
                    {"KERAS_BACKEND": "torch"}),
}
#: a NaN gradient on Flax (Keras on jax trains through the same JaxFunctionalClassifier) and on Keras-on-torch (its
#: exchange overlapped with backward)
NAN_INJECTORS = {"flax": (str(ASSETS / "jax_models.py"), "JaxNaNInjector"),
                 "keras-torch": (str(ASSETS / "keras_models.py"), "KerasNaNInjector")}
COMMON = dict(MODEL_BATCH_SIZE=16, MODEL_LR=0.05, THREADS_PER_WORKER=1)


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def launch(tmp_path, name: str, flavour: str, **keys):
    """Run a session of ``flavour``'s example (cfg ``keys`` on top) in RUN_DIR=``name``; the finished process."""
    model, env = FLAVOURS[flavour]
    cfg = write_cfg(tmp_path / f"{name}.cfg", RUN_DIR=name, **{**model, **COMMON, **keys})
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, env={**os.environ, **env}, timeout=300)
    return proc


# ----- at launch ----------------------------------------------------------------------------
@pytest.mark.parametrize("modelfile, missing, extra, env", [
    (str(EXAMPLES / "jax_digits.py"), "flax", "jax", {}),
    ("theanompi.models.jax_classifier", "flax", "jax", {}),
    (str(EXAMPLES / "keras_digits.py"), "keras", "keras", {}),
    (str(EXAMPLES / "keras_digits.py"), "jax", "jax", {"KERAS_BACKEND": "jax"}),  # Keras's backend missing
])
def test_model_without_its_extra_fails_at_launch_with_one_line(tmp_path, modelfile, missing, extra, env):
    cfg = write_cfg(tmp_path / "s.cfg", MODELFILE=modelfile, MODELCLASS="DigitsCNN")
    code = (f"import sys; sys.modules[{missing!r}] = None  # as if it were not installed\n"
            "from theanompi.launch.cli import main; sys.exit(main(sys.argv[1:]))\n")
    proc = subprocess.run([sys.executable, "-c", code, f"-cfg={cfg}"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=120, env={**os.environ, **env})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [f"tmlauncher: error: MODELFILE={modelfile!r} needs {missing}, which is not "
                                        f"installed: pip install 'theanompi[{extra}]'"]
    assert not (tmp_path / "runs").exists()  # nothing started


def test_keras_on_another_backend_is_refused_at_launch_in_one_line(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", **FLAVOURS["keras-torch"][0])
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, env={**os.environ, "KERAS_BACKEND": "numpy"})
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "tmlauncher: error: KerasClassifierModel trains Keras on its torch or jax backend, but this process runs "
        "'numpy' (KERAS_BACKEND='numpy'): set KERAS_BACKEND=torch or KERAS_BACKEND=jax"]


# ----- under mpiexec ----------------------------------------------------------------------
@pytest.fixture(scope="module", params=["flax", "keras-jax"])
def cdd_runs(request, tmp_path_factory):
    """BSP cdd for 2 epochs (94 steps): one process with batch 32 ('one') and 2 workers with batch 16 ('two',
    checkpointing after every epoch), momentum and weight decay on; (flavour, the sessions' directory)."""
    flavour, tmp = request.param, tmp_path_factory.mktemp(f"cdd-{request.param}")
    # AVERAGE_WEIGHTS=none: the final model must be the trained weights (an N-worker step folds N
    # batches into an average at once, a step of one process one)
    common = dict(N_EPOCHS=2, MODEL_MOMENTUM=0.9, MODEL_WEIGHT_DECAY=0.0001, BSP_SYNC_TYPE="cdd",
                  AVERAGE_WEIGHTS="none")
    for name, keys in {"one": dict(DEVICES="cpu0", MODEL_BATCH_SIZE=32),
                       "two": dict(DEVICES="cpu0,cpu1", CHECKPOINT_EVERY=1)}.items():
        proc = launch(tmp, name, flavour, **common, **keys)
        assert proc.returncode == 0, proc.stderr
        assert summary(tmp / name)["iterations"] == 94
    return flavour, tmp


def test_cdd_two_workers_equal_one_process_with_double_batch(cdd_runs):
    from theanompi.session.checkpoint import load_checkpoint

    flavour, tmp = cdd_runs
    result = summary(tmp / "two")
    assert result["workers"] == 2 and result["final_val_accuracy"] >= 0.85, result  # ~93 % seen here
    after_epoch_1 = load_checkpoint(tmp / "two" / "checkpoints" / "ckpt-epoch-0000.hkl")["worker_params"][0]
    moved = 0.0
    for a, b, mid in zip(load_final_params(tmp / "two"), load_final_params(tmp / "one"), after_epoch_1):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=2e-5)
        moved = max(moved, float(np.abs(a - mid).max()))
    assert moved > 1e-3  # the second epoch moved the weights: the comparison is not vacuous


def test_resume_equals_uninterrupted_run(cdd_runs, tmp_path):
    flavour, tmp = cdd_runs
    mid_way = tmp / "two" / "checkpoints" / "ckpt-epoch-0000.hkl"  # the uninterrupted run's after epoch 1 of 2
    proc = launch(tmp_path, "rest", flavour, N_EPOCHS=2, MODEL_MOMENTUM=0.9, MODEL_WEIGHT_DECAY=0.0001,
                  BSP_SYNC_TYPE="cdd", DEVICES="cpu0,cpu1", RESUME=str(mid_way), AVERAGE_WEIGHTS="none")
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stdout and "after epoch 1" in proc.stdout
    for a, b in zip(load_final_params(tmp / "two"), load_final_params(tmp_path / "rest")):
        np.testing.assert_array_equal(a, b)  # same data order, same compiled arithmetic: bit for bit
    from theanompi.session.checkpoint import load_checkpoint

    ckpt = load_checkpoint(mid_way)
    assert len(ckpt["worker_params"][0]) == 6 and len(ckpt["worker_state"][0]) == 1 + 6  # lr + momenta


RULES = {
    "BSP-avg": dict(RULE="BSP", BSP_SYNC_TYPE="avg", BSP_AVG_FREQ=2),
    "EASGD": dict(RULE="EASGD", EASGD_TAU=2, DEVICES="cpu0,cpu1,cpu2"),  # a server (the first device) + 2
    "GOSGD": dict(RULE="GOSGD", GOSGD_P=0.2),
    "ASGD": dict(RULE="ASGD"),
}
#: (flavour, rule): every rule on Flax and on Keras, Keras's backends alternating (BSP cdd: cdd_runs)
RULE_RUNS = [("flax", rule) for rule in RULES] + [("keras-torch", "BSP-avg"), ("keras-jax", "EASGD"),
                                                  ("keras-torch", "GOSGD"), ("keras-jax", "ASGD")]


@pytest.mark.parametrize("flavour, rule", RULE_RUNS)
def test_digits_cnn_learns_under_every_rule_with_two_workers(tmp_path, flavour, rule):
    proc = launch(tmp_path, "run", flavour, N_EPOCHS=4, **RULES[rule])
    assert proc.returncode == 0, proc.stderr
    result = summary(tmp_path / "run")
    assert result["workers"] == 2 and result["epochs"] == 4
    assert result["final_val_accuracy"] >= 0.9, result["final_val_accuracy"]


@pytest.mark.parametrize("flavour", sorted(NAN_INJECTORS))
def test_a_nan_gradient_is_named(tmp_path, flavour):
    modelfile, modelclass = NAN_INJECTORS[flavour]
    proc = launch(tmp_path, "run", flavour, N_EPOCHS=2, MODELFILE=modelfile, MODELCLASS=modelclass)
    assert proc.returncode not in (0, None), proc.stdout
    # the first param whose gradient is NaN: a NaN image makes every ReLU's gradient 0 (NaN > 0 is false), so the
    # first convolution's bias gets a finite gradient and its kernel (x times that) a NaN one. Flax orders the
    # params by name (conv.bias, conv.kernel, ...), Keras as its layers hold them (kernel, bias)
    bad = "'conv.kernel' (params[1])" if flavour == "flax" else "'sequential/conv2d/kernel' (params[0])"
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("tmlauncher: session failed: rank ") and \
        f"NaN or Inf in the update vector of parameter {bad} on worker 1" in last, last
