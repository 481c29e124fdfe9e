"""Theano-MPI's benchmark table, ours: training (+communication) time per 5,120 images, 1 and 2 workers,
next to the same networks in PyTorch on the same machine, in the same run.

    python benchmarks/theanompi_table.py [--models alexnet128,googlenet32,vgg16_16,vgg16_32,resnet50_64]
                                         [--steps 2] [--json benchmarks/results/theanompi_table.json]

Rows as in Theano-MPI's README: AlexNet-128b, GoogLeNet-32b, VGG16-16b, VGG16-32b, ResNet50-64b (the per-worker
batch), at full size (227x227 / 224x224 crops, 1000 classes) on synthetic images.

* **ours**: a BSP session (Theano-MPI's default sync type, ``cdd``) of the model at Theano-MPI's path
  (``theanompi.models.alex_net.AlexNet``, ...) with 1 and 2 CPU workers. Its first epoch warms up (compilation);
  the second epoch's ``--steps`` steps per worker are timed from the session's own records (rank 0's
  ``iterations.jsonl``): training = computing + waiting for data, communication = the allreduce of the update.
* **PyTorch**: the same networks (``benchmarks/_torch_theanompi_nets.py``), momentum SGD, one untimed step then
  ``--steps`` timed ones; 2 workers = DistributedDataParallel over gloo, its allreduce inside the step.
* Both sides split the machine's cores between their workers (``THREADS_PER_WORKER`` / ``torch.set_num_threads``).

A CPU times only ``--steps`` steps (a few hundred images, not 5,120): the table **scales the per-step times to
5,120 images** (``5120 / (workers x batch)`` steps per worker), as Theano-MPI's table counts them. The ratio is
ours / PyTorch for the whole time (training + communication).

How long: each row runs four sessions (ours and PyTorch, 1 and 2 workers), each compiling its network at full
size. On the quiet 2-vCPU AMD EPYC VM the whole table with ``--steps 1`` took 17 minutes (1017 s; AlexNet-128b and
GoogLeNet-32b about 2 minutes each, VGG16-16b 2.6, VGG16-32b 4.4, ResNet50-64b 5.8); ``--steps 2`` adds one
step per session.
Run it on a quiet machine: the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from benchmarks.cnn_step_vs_torch import machine_info  # noqa: E402

IMAGES = 5120
#: key -> (row label, MODELFILE, MODELCLASS, per-worker batch, crop side, PyTorch network)
CONFIGS = {
    "alexnet128": ("AlexNet-128b", "theanompi.models.alex_net", "AlexNet", 128, 227, "alexnet"),
    "googlenet32": ("GoogLeNet-32b", "theanompi.models.googlenet", "GoogLeNet", 32, 224, "googlenet"),
    "vgg16_16": ("VGG16-16b", "theanompi.models.lasagne_model_zoo.vgg16", "VGG16", 16, 224, "vgg16"),
    "vgg16_32": ("VGG16-32b", "theanompi.models.lasagne_model_zoo.vgg16", "VGG16", 32, 224, "vgg16"),
    "resnet50_64": ("ResNet50-64b", "theanompi.models.lasagne_model_zoo.resnet50", "ResNet50", 64, 224, "resnet50"),
}


def ours(key: str, workers: int, steps: int, threads: int, run_dir: Path) -> dict:
    """Per-step seconds of our BSP session: training (calc + wait) and communication, rank 0's second epoch."""
    from theanompi import BSP

    _, modelfile, modelclass, batch, side, _ = CONFIGS[key]
    rule = BSP()
    options = {"data": "synthetic", "input_size": side, "n_classes": 1000, "batch_size": batch,
               "train_size": steps * workers * batch, "val_size": batch, "prefetch": False}
    rule.init(devices=[f"cpu{i}" for i in range(workers)], modelfile=modelfile, modelclass=modelclass, n_epochs=2,
              threads=threads, log_level="WARNING", run_dir=str(run_dir), sync_type="cdd", plots=False,
              watchdog=3600, watchdog_build=3600, model_options=options)
    if rule.wait() != 0:
        sys.exit(f"theanompi {key} x{workers} failed: {rule.failure}")
    records = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    timed = records[steps:]  # the first epoch's steps include the compilation
    if len(timed) != steps:
        sys.exit(f"theanompi {key} x{workers}: {len(records)} iteration records, expected {2 * steps}")
    return {"train_s": sum(r["calc"] + r["wait"] for r in timed) / steps,
            "comm_s": sum(r["comm"] for r in timed) / steps}


def pytorch(key: str, workers: int, steps: int, threads: int) -> float:
    """Per-step seconds of the same network in PyTorch (DDP over gloo with 2 workers)."""
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    _, _, _, batch, side, net = CONFIGS[key]
    argv = [find_mpiexec(), "--oversubscribe", "--bind-to", "none", "-n", str(workers), sys.executable,
            str(HERE / "_torch_table_worker.py"), "--net", net, "--batch", str(batch), "--side", str(side),
            "--steps", str(steps), "--threads", str(threads)]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch {key} x{workers} failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["step_s"])


def per_images(step_s: float, key: str, workers: int) -> float:
    """Seconds for ``IMAGES`` images: the steps each worker takes for its share of them."""
    return step_s * IMAGES / (workers * CONFIGS[key][3])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CONFIGS), help="rows, comma-separated (default: all)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per worker (after one warm-up epoch)")
    parser.add_argument("--json", default=str(HERE / "results" / "theanompi_table.json"), help="where the JSON goes")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs PyTorch: pip install -e '.[bench]'")
    keys = args.models.split(",")
    unknown = [k for k in keys if k not in CONFIGS]
    if unknown:
        sys.exit(f"--models: {unknown[0]!r} is not one of {', '.join(CONFIGS)}")
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for key in keys:
            row = {}
            for workers in (1, 2):
                threads = max(1, cores // workers)
                start = time.perf_counter()
                mine = ours(key, workers, args.steps, threads, Path(tmp) / f"{key}-{workers}")
                theirs = pytorch(key, workers, args.steps, threads)
                row[str(workers)] = {
                    "ours_train_s": per_images(mine["train_s"], key, workers),
                    "ours_comm_s": per_images(mine["comm_s"], key, workers),
                    "pytorch_s": per_images(theirs, key, workers),
                    "ours_step_s": mine, "pytorch_step_s": theirs, "wall_s": time.perf_counter() - start}
                row[str(workers)]["ratio"] = ((row[str(workers)]["ours_train_s"] + row[str(workers)]["ours_comm_s"])
                                              / row[str(workers)]["pytorch_s"])
                print(f"{CONFIGS[key][0]} x{workers}: done", flush=True)
            rows[key] = row
    print(f"\nTraining (+communication) time per {IMAGES} images in seconds, measured over {args.steps} step(s) "
          f"per worker and scaled to {IMAGES} images; {cores} CPU cores shared by the workers")
    print("| Model | 1 worker | 2 workers | PyTorch 1 | PyTorch 2 | ours/PyTorch 1 | ours/PyTorch 2 |")
    print("| :---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key, row in rows.items():
        one, two = row["1"], row["2"]
        print(f"| {CONFIGS[key][0]} | {one['ours_train_s'] + one['ours_comm_s']:.2f} | "
              f"{two['ours_train_s']:.2f}+{two['ours_comm_s']:.2f} | {one['pytorch_s']:.2f} | {two['pytorch_s']:.2f} | "
              f"{one['ratio']:.2f} | {two['ratio']:.2f} |")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "benchmark": "theanompi_table", "images": IMAGES, "steps_timed_per_worker": args.steps,
        "scaled_to_images": IMAGES, "rows": rows,
        "machine": {**machine_info(), "loadavg_1min_before_after": [load_before, os.getloadavg()[0]]},
    }, indent=2))


if __name__ == "__main__":
    main()
