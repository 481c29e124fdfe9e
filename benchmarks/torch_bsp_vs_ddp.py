"""PyTorch users: our BSP-cdd vs DistributedDataParallel (gloo) on the same torch model, 1 and 2 workers, one run.

    python benchmarks/torch_bsp_vs_ddp.py [--batch 32] [--steps 40] [--repeats 3] [--json PATH]

Both sides train the same ``torch.nn.Module`` (``_ddp_worker.cifar_cnn``: conv32-pool-conv64-pool-dense10,
60 k parameters) on synthetic 3x32x32 data with the same per-worker batch, momentum SGD, one torch thread
per worker (THREADS_PER_WORKER=1 / torch.set_num_threads(1)). Ours is a real ``tmlauncher``-style session
of ``TorchClassifierModel`` (benchmarks/_torch_cifar_cnn.py) under BSP cdd: the flat gradient is summed by
one MPI allreduce per step. DDP runs ``_ddp_worker.py --model cnn`` (gloo, bucketed allreduce overlapped
with backward). Throughput = samples / wall-clock seconds after warm-up (ours: the second epoch of the
session, its 2-batch validation included; DDP: timed around its steps after warm-up steps). Each
configuration runs ``--repeats`` times, alternating ours and DDP; the best run counts (the machine may
be shared), all runs are in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def ours(workers: int, batch: int, steps: int, run_dir: Path) -> float:
    """Samples/s of the second epoch of a BSP-cdd session of TorchCifarCNN on ``workers`` CPU ranks."""
    from theanompi import BSP

    rule = BSP()
    rule.init(devices=[f"cpu{i}" for i in range(workers)], modelfile=str(HERE / "_torch_cifar_cnn.py"),
              modelclass="TorchCifarCNN", n_epochs=2, threads=1, log_level="WARNING", run_dir=str(run_dir),
              sync_type="cdd", model_options={"batch_size": batch, "train_size": steps * workers * batch,
                                              "val_size": 2 * batch * workers, "lr": 0.01})
    if rule.wait() != 0:
        sys.exit(f"theanompi torch x{workers} failed: {rule.failure}")
    second = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()][1]
    return second["train_samples"] / second["epoch_s"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(HERE / "results" / "torch_bsp_vs_ddp.json"))
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("this benchmark needs PyTorch: pip install -e '.[torch]'")
    from scaling_vs_ddp import ddp

    runs: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            for workers in (1, 2):
                runs.setdefault(f"ours_{workers}", []).append(
                    ours(workers, args.batch, args.steps, Path(tmp) / f"w{workers}-{rep}"))
                runs.setdefault(f"ddp_{workers}", []).append(ddp("cnn", workers, args.batch, args.steps))
    best = {key: max(values) for key, values in runs.items()}
    result = {
        **best, "ours_speedup": best["ours_2"] / best["ours_1"], "ddp_speedup": best["ddp_2"] / best["ddp_1"],
        "ours_over_ddp_2": best["ours_2"] / best["ddp_2"], "runs": runs,
    }
    print(f"TorchClassifierModel under BSP-cdd vs DDP (gloo), CIFAR CNN, per-worker batch {args.batch}, "
          f"1 thread per worker, best of {args.repeats}, samples/s")
    print(f"{'':<6} {'1 worker':>9} {'2 workers':>10} {'speedup':>8}")
    for side in ("ours", "ddp"):
        print(f"{side:<6} {best[side + '_1']:>9.1f} {best[side + '_2']:>10.1f} {result[side + '_speedup']:>7.2f}x")
    print(f"ours / DDP at 2 workers: {result['ours_over_ddp_2']:.2f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "batch": args.batch, "steps": args.steps, "repeats": args.repeats, "torch": torch.__version__,
        "cpus": os.cpu_count(), "machine": platform.machine(), "load_average": os.getloadavg(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": result,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
