"""BSP_COMPRESSION under a real mpiexec: each compressor against a NumPy replay of its formula, and sessions of the
three kinds of models with compressed update vectors. (The pieces alone: tests/comm/test_compression.py.)"""

import json

import numpy as np
import pytest
from conftest import ASSETS, ROOT, run_launcher, run_mpi, write_cfg

from theanompi.comm.compression.powersgd import plan_matrices
from theanompi.runtime.records import load_final_params


def session(tmp_path, name, **keys):
    proc, _ = run_launcher(f"-cfg={write_cfg(tmp_path / f'{name}.cfg', RUN_DIR=name, **keys)}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads((tmp_path / name / "summary.json").read_text()), proc.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_compressors_equal_numpy_replays_of_their_formulas(n):
    out = run_mpi("check_bsp_compression.py", n).stdout
    assert f"fp16 ok on {n} ranks: equal to the NumPy replay bit for bit" in out
    assert f"bf16 ok on {n} ranks: equal to the NumPy replay bit for bit" in out
    assert f"powersgd ok on {n} ranks: 3 compressed steps equal the NumPy replay of Algorithm 2, errors included" in out


@pytest.mark.parametrize("compression", ["fp16", "powersgd"])
def test_cdd_with_compressed_gradients_learns_with_fewer_bytes(tmp_path, compression):
    """The digits MLP (64-128-10), 2 workers, 3 epochs: learns, and sends what the compressor's formula says:
    half the bytes of an fp32 allreduce, or PowerSGD's factors from BSP_POWERSGD_START_ITER on. (bf16 in a
    session: tests/sessions/test_bsp_diloco.py's PyTorch model.)"""
    result, out = session(tmp_path, "run", MODEL_HIDDEN=128, N_EPOCHS=3, BSP_COMPRESSION=compression,
                          BSP_POWERSGD_START_ITER=10 if compression == "powersgd" else None)
    assert result["compression"] == compression and f"BSP compression {compression}" in out.splitlines()[0]
    assert result["final_val_accuracy"] >= 0.93, result["final_val_accuracy"]
    shapes = [p.shape for p in load_final_params(tmp_path / "run")]
    n_params, steps = sum(int(np.prod(s)) for s in shapes), result["iterations"]
    fp32_bytes = steps * n_params * 4  # 2 workers: a ring allreduce sends 2(N-1)/N = 1 x the buffer
    sent = result["per_worker"][1]["bytes_sent"]  # worker 1: no initial broadcast of the params to count
    if compression == "powersgd":
        matrices, whole = plan_matrices(shapes, rank=2)
        compressed = sum((m.rows + m.cols) * m.rank for m in matrices) + sum(b - a for a, b in whole)
        assert sent == 10 * n_params * 4 + (steps - 10) * compressed * 4
        assert n_params / compressed > 12  # per compressed step
    else:
        scales = steps * 2 * 2 if compression == "fp16" else 0  # fp16: its scale, 2 bytes in each of 2 messages
        assert sent == fp32_bytes / 2 + scales
        assert fp32_bytes / sent > 1.99


@pytest.mark.parametrize("kind", ["torch", "theanompi-style"])
def test_powersgd_compresses_torch_and_theanompi_style_update_vectors(tmp_path, kind):
    """A PyTorch model's flat gradient (its buckets during backward turned off, said once) and a Theano-MPI-style
    model's summed vels, exchanged by PowerSGD."""
    if kind == "torch":
        pytest.importorskip("torch")
        keys = dict(MODELFILE=str(ROOT / "examples" / "torch_digits.py"), MODELCLASS="DigitsCNN", MODEL_BATCH_SIZE=16,
                    MODEL_LR=0.05, N_EPOCHS=3, BSP_BUCKET_MB=0.02)
    else:
        keys = dict(MODELFILE=str(ASSETS / "theanompi_idiom_models.py"), MODELCLASS="DigitsMLP", N_EPOCHS=None)
    result, out = session(tmp_path, "run", BSP_COMPRESSION="powersgd", BSP_POWERSGD_RANK=4, **keys)
    assert result["compression"] == "powersgd" and result["gradient_buckets"] == 0
    assert result["final_val_accuracy"] >= 0.9, result["final_val_accuracy"]
    said = [line for line in out.splitlines() if "BSP_COMPRESSION=powersgd: the gradient is exchanged after" in line]
    assert len(said) == (1 if kind == "torch" else 0), out
