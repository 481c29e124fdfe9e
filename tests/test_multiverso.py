"""theanompi.multiverso under a real mpiexec (1-4 ranks) and as one plain process."""

import subprocess
import sys
import time

import pytest

from conftest import MPI_SCRIPTS, ROOT, run_mpi


@pytest.mark.parametrize("mode, ranks", [("async", 1), ("async", 3), ("sync", 2), ("sync", 4)])
def test_api_under_mpiexec(mode, ranks):
    proc = run_mpi("check_multiverso.py", ranks, mode, timeout=120)
    assert f"multiverso ok ({mode}, {ranks} workers)" in proc.stdout


def test_single_process_without_mpiexec():
    proc = subprocess.run([sys.executable, str(MPI_SCRIPTS / "check_multiverso.py"), "async"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "multiverso ok (async, 1 workers)" in proc.stdout


def test_sync_mismatch_is_reported_not_hung():
    start = time.perf_counter()
    proc = run_mpi("multiverso_sync_mismatch.py", 3, timeout=60)
    assert "must call add/get in the same order and number" in proc.stdout
    assert time.perf_counter() - start < 60


def test_shutdown_leaves_no_process_behind():
    run_mpi("check_multiverso.py", 2, "async", timeout=120)
    time.sleep(0.5)
    left = subprocess.run(["pgrep", "-f", "check_multiverso.py"], capture_output=True, text=True).stdout
    assert left.strip() == ""


def _accuracy(stdout):
    line = [l for l in stdout.splitlines() if "final validation accuracy" in l][-1]
    return float(line.rsplit(" ", 1)[1].rstrip("%")) / 100


def _run_example(name, ranks, *args):
    from theanompi.mpirun import find_mpiexec, mpiexec_env

    argv = [find_mpiexec(), "--oversubscribe", "-n", str(ranks), sys.executable,
            str(ROOT / "examples" / "multiverso" / name), *args]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_logistic_regression_example_learns():
    assert _accuracy(_run_example("logistic_regression.py", 4)) >= 0.90


def test_param_manager_example_learns():
    assert _accuracy(_run_example("network_param_manager.py", 2)) >= 0.90


@pytest.mark.parametrize("strategy", ["master", "equality"])
def test_pytorch_example_learns(strategy):
    pytest.importorskip("torch")
    assert _accuracy(_run_example("pytorch_model.py", 2, strategy)) >= 0.90


def test_torch_tensors_and_dlpack_convert():
    torch = pytest.importorskip("torch")
    from theanompi.multiverso.tables import as_numpy

    t = torch.arange(6, dtype=torch.float32, requires_grad=True)
    out = as_numpy(t * 2)
    assert out.tolist() == [0, 2, 4, 6, 8, 10]


def test_keras_callback_example_learns():
    import importlib.util

    if not (importlib.util.find_spec("keras") and importlib.util.find_spec("torch")):
        pytest.skip("keras and torch are not installed (the [test] extra installs them)")
    assert _accuracy(_run_example("keras_model.py", 2)) >= 0.90


def test_param_manager_finds_every_layer_param():
    """A Lasagne-style layer has a .params dict of its own: the manager must collect the whole net's."""
    import numpy as np

    import theanompi.models.layers as L
    from theanompi.multiverso.param_manager import _params_of

    L.init.set_rng(np.random.default_rng(0))
    net = L.DenseLayer(L.DenseLayer(L.InputLayer((None, 4)), 3), 2)
    assert len(_params_of(net)) == 4
    assert len(_params_of([net])) == 4
    assert len(_params_of(L.get_all_params(net))) == 4
