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

**On a GPU** (``--device cuda``, issue 23's item 5): one worker on ``cuda0`` (our model in JAX mode, its parameters
on the GPU) next to PyTorch on the same GPU (cuDNN with ``cudnn.benchmark``, TF32 allowed as JAX allows it by
default, a ``torch.cuda.synchronize()`` closing each timed step); a host with one GPU has no 2-worker column.
``--compute jax`` runs our side in JAX mode on CPU workers, a dry run of the GPU path's compilation::

    python benchmarks/theanompi_table.py --device cuda --steps 10 --json $OUT/theanompi_table_gpu.json
    python benchmarks/theanompi_table.py --compute jax --workers 1 --models alexnet128 --steps 1
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


def ours(key: str, workers: int, steps: int, threads: int, run_dir: Path, device: str = "cpu",
         compute: str = "auto") -> dict:
    """Per-step seconds of our BSP session: training (calc + wait) and communication, rank 0's second epoch."""
    from theanompi import BSP

    _, modelfile, modelclass, batch, side, _ = CONFIGS[key]
    rule = BSP()
    options = {"data": "synthetic", "input_size": side, "n_classes": 1000, "batch_size": batch,
               "train_size": steps * workers * batch, "val_size": batch, "prefetch": False}
    rule.init(devices=[f"{device}{i}" for i in range(workers)], modelfile=modelfile, modelclass=modelclass,
              n_epochs=2, threads=threads, log_level="WARNING", run_dir=str(run_dir), sync_type="cdd", plots=False,
              average_weights="none",
              compute=compute, watchdog=3600, watchdog_build=3600, model_options=options)
    if rule.wait() != 0:
        sys.exit(f"theanompi {key} x{workers} failed: {rule.failure}")
    records = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    timed = records[steps:]  # the first epoch's steps include the compilation
    if len(timed) != steps:
        sys.exit(f"theanompi {key} x{workers}: {len(records)} iteration records, expected {2 * steps}")
    return {"train_s": sum(r["calc"] + r["wait"] for r in timed) / steps,
            "comm_s": sum(r["comm"] for r in timed) / steps}


def pytorch(key: str, workers: int, steps: int, threads: int, device: str = "cpu") -> float:
    """Per-step seconds of the same network in PyTorch (DDP over gloo with 2 CPU workers)."""
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    _, _, _, batch, side, net = CONFIGS[key]
    argv = [find_mpiexec(), "--oversubscribe", "--bind-to", "none", "-n", str(workers), sys.executable,
            str(HERE / "_torch_table_worker.py"), "--net", net, "--batch", str(batch), "--side", str(side),
            "--steps", str(steps), "--threads", str(threads), "--device", device]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"PyTorch {key} x{workers} failed:\n{proc.stderr[-2000:]}")
    return float(json.loads(proc.stdout.strip().splitlines()[-1])["step_s"])


def per_images(step_s: float, key: str, workers: int) -> float:
    """Seconds for ``IMAGES`` images: the steps each worker takes for its share of them."""
    return step_s * IMAGES / (workers * CONFIGS[key][3])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: a bad value ends the run with one line naming it.

    >>> args = parse_args(["--device", "cuda"])
    >>> args.workers, args.compute, args.models[:2]
    ([1], 'jax', ['alexnet128', 'googlenet32'])
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(CONFIGS), help="rows, comma-separated (default: all)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps per worker (after one warm-up epoch)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the workers run (cuda: ours on cuda0 in JAX mode, PyTorch on the same GPU)")
    parser.add_argument("--workers", default=None,
                        help="worker counts, comma-separated (default: 1,2 on cpu, 1 on cuda)")
    parser.add_argument("--compute", choices=("auto", "c", "jax"), default="auto",
                        help="our compute mode (auto: C on cpu workers, JAX on cuda ones)")
    parser.add_argument("--json", default=str(HERE / "results" / "theanompi_table.json"), help="where the JSON goes")
    args = parser.parse_args(argv)
    args.models = args.models.split(",")
    unknown = [k for k in args.models if k not in CONFIGS]
    if unknown:
        parser.exit(2, f"--models: {unknown[0]!r} is not one of {', '.join(CONFIGS)}\n")
    try:
        args.workers = [int(w) for w in (args.workers or ("1" if args.device == "cuda" else "1,2")).split(",")]
    except ValueError:
        parser.exit(2, f"--workers: {args.workers!r} is not a comma-separated list of worker counts\n")
    if min(args.workers) < 1 or args.steps < 1:
        parser.exit(2, "--workers and --steps must be at least 1\n")
    if args.device == "cuda":
        if args.compute == "c":
            parser.exit(2, "--compute c runs on the CPU; cuda workers compute through JAX\n")
        args.compute = "jax"
    return args


def check_gpus(workers: list[int]) -> str:
    """The GPU's name as torch reports it; the run ends with one line where the GPUs cannot hold the workers."""
    import torch

    if not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no GPU (a CPU build of torch, or no CUDA device)")
    if max(workers) > torch.cuda.device_count():
        sys.exit(f"--device cuda --workers {max(workers)}: one worker per GPU, and this machine has "
                 f"{torch.cuda.device_count()}")
    return str(torch.cuda.get_device_name(0))


def main() -> None:
    args = parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs PyTorch: pip install -e '.[bench]'")
    gpu = check_gpus(args.workers) if args.device == "cuda" else None
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()[0]
    rows: dict[str, dict] = {}
    where = f"one {gpu}" if gpu else f"{cores} CPU cores shared by the workers"

    def save() -> None:  # after every row: a run cut short keeps the rows it finished
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "benchmark": "theanompi_table", "images": IMAGES, "steps_timed_per_worker": args.steps,
            "scaled_to_images": IMAGES, "device": gpu or "cpu", "compute": args.compute, "rows": rows,
            "machine": {**machine_info(), "loadavg_1min_before_after": [load_before, os.getloadavg()[0]]},
        }, indent=2))

    with tempfile.TemporaryDirectory() as tmp:
        for key in args.models:
            row = {}
            for workers in args.workers:
                threads = max(1, cores // workers)
                start = time.perf_counter()
                mine = ours(key, workers, args.steps, threads, Path(tmp) / f"{key}-{workers}", args.device,
                            args.compute)
                theirs = pytorch(key, workers, args.steps, threads, args.device)
                cell = {"ours_train_s": per_images(mine["train_s"], key, workers),
                        "ours_comm_s": per_images(mine["comm_s"], key, workers),
                        "pytorch_s": per_images(theirs, key, workers),
                        "ours_step_s": mine, "pytorch_step_s": theirs, "wall_s": time.perf_counter() - start}
                cell["ratio"] = (cell["ours_train_s"] + cell["ours_comm_s"]) / cell["pytorch_s"]
                row[str(workers)] = cell
                print(f"{CONFIGS[key][0]} x{workers}: {cell['ratio']:.2f}x PyTorch, done in {cell['wall_s']:.0f} s",
                      flush=True)
            rows[key] = row
            save()
    print(f"\nTraining (+communication) time per {IMAGES} images in seconds, measured over {args.steps} step(s) "
          f"per worker and scaled to {IMAGES} images; {where}")
    print(format_table(rows, args.workers))


def format_table(rows: dict[str, dict], workers: list[int]) -> str:
    """Theano-MPI's table layout: a row per model, ours then PyTorch's seconds per worker count, then the ratios.

    >>> cell = {"ours_train_s": 3.0, "ours_comm_s": 0.5, "pytorch_s": 5.0, "ratio": 0.7}
    >>> print(format_table({"alexnet128": {"1": cell}}, [1]))
    | Model | 1 worker | PyTorch 1 | ours/PyTorch 1 |
    | :---: | ---: | ---: | ---: |
    | AlexNet-128b | 3.50 | 5.00 | 0.70 |
    """
    head = ["Model", *(f"{w} worker{'s' * (w > 1)}" for w in workers), *(f"PyTorch {w}" for w in workers),
            *(f"ours/PyTorch {w}" for w in workers)]
    lines = ["| " + " | ".join(head) + " |", "| :---: |" + " ---: |" * (len(head) - 1)]
    for key, row in rows.items():
        cells = [row[str(w)] for w in workers]
        ours_s = [f"{c['ours_train_s'] + c['ours_comm_s']:.2f}" if w == 1 else
                  f"{c['ours_train_s']:.2f}+{c['ours_comm_s']:.2f}" for w, c in zip(workers, cells)]
        line = [CONFIGS[key][0], *ours_s, *(f"{c['pytorch_s']:.2f}" for c in cells),
                *(f"{c['ratio']:.2f}" for c in cells)]
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
