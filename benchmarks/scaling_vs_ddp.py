"""Scaling: 1 vs 2 workers, BSP (cdd) vs PyTorch DistributedDataParallel (gloo), same run.

    python benchmarks/scaling_vs_ddp.py [--models cnn,resnet20] [--batch 32] [--steps 20] [--json PATH]

Both sides: the same architecture (CIFAR CNN conv32-pool-conv64-pool-dense10; ResNet-20 with
option-A shortcuts), synthetic 3x32x32 data, the same per-worker batch, one thread per worker
(one core = one device: THREADS_PER_WORKER=1 / torch.set_num_threads(1)), momentum SGD.
Throughput = samples / wall-clock seconds after warm-up (ours: the second epoch of a real session,
its 2-batch validation included; DDP: timed around its steps after warm-up steps).
Speedup = 2-worker throughput / 1-worker throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = {
    "cnn": ("theanompi.models.zoo.small_cnn", "CifarCNN", {}),
    "resnet20": ("theanompi.models.zoo.resnet", "ResNet20", {}),
}


def bsp_session_epochs(model: str, workers: int, batch: int, steps: int, run_dir: Path) -> list[dict]:
    """Run a 2-epoch BSP-cdd session of ``model`` on ``workers`` CPU workers (one thread each, synthetic data,
    ``steps`` steps per epoch); return rank 0's epoch records (``epochs.jsonl``)."""
    from theanompi import BSP

    modelfile, modelclass, extra = MODELS[model]
    rule = BSP()
    rule.init(devices=[f"cpu{i}" for i in range(workers)], modelfile=modelfile, modelclass=modelclass,
              n_epochs=2, threads=1, log_level="WARNING", run_dir=str(run_dir), sync_type="cdd", average_weights="none",
              model_options={"data": "synthetic", "batch_size": batch, "train_size": steps * workers * batch,
                             "val_size": 2 * batch, **extra})
    if rule.wait() != 0:
        sys.exit(f"theanompi {model} x{workers} failed: {rule.failure}")
    return [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]


def ours(model: str, workers: int, batch: int, steps: int, run_dir: Path) -> float:
    second = bsp_session_epochs(model, workers, batch, steps, run_dir)[1]  # the first warms up (compiles)
    return second["train_samples"] / second["epoch_s"]  # wall clock, the tiny validation included


def ddp(model: str, workers: int, batch: int, steps: int) -> float:
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    argv = [find_mpiexec(), "--oversubscribe", "--bind-to", "none", "-n", str(workers), sys.executable,
            str(HERE / "_ddp_worker.py"), "--model", model, "--batch", str(batch), "--steps", str(steps)]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"DDP {model} x{workers} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="cnn,resnet20")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--json", default=str(HERE / "results" / "scaling.json"))
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs PyTorch: pip install -e '.[bench]'")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            r = {}
            for workers in (1, 2):
                r[f"ours_{workers}"] = ours(model, workers, args.batch, args.steps, Path(tmp) / f"{model}{workers}")
                r[f"ddp_{workers}"] = ddp(model, workers, args.batch, args.steps)
            r["ours_speedup"] = r["ours_2"] / r["ours_1"]
            r["ddp_speedup"] = r["ddp_2"] / r["ddp_1"]
            results[model] = r
    print(f"BSP vs DDP (gloo), per-worker batch {args.batch}, 1 thread per worker, samples/s")
    print(f"{'model':<9} {'ours 1w':>8} {'ours 2w':>8} {'speedup':>8} {'ddp 1w':>8} {'ddp 2w':>8} {'speedup':>8} "
          f"{'ours/ddp 2w':>11}")
    for model, r in results.items():
        print(f"{model:<9} {r['ours_1']:>8.1f} {r['ours_2']:>8.1f} {r['ours_speedup']:>7.2f}x {r['ddp_1']:>8.1f} "
              f"{r['ddp_2']:>8.1f} {r['ddp_speedup']:>7.2f}x {r['ours_2'] / r['ddp_2']:>11.2f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({"batch": args.batch, "steps": args.steps, "results": results}, indent=2))


if __name__ == "__main__":
    main()
