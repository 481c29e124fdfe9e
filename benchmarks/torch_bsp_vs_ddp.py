"""PyTorch users: our BSP-cdd vs DistributedDataParallel (gloo) on the same torch models, 1 and 2 workers, one run;
and the exchange time our overlap with backward hides.

    python benchmarks/torch_bsp_vs_ddp.py [--models cnn,resnet20] [--batch 32] [--steps 40] [--repeats 3]
                                          [--bucket-mb 1] [--json PATH]

Both sides train the same ``torch.nn.Module`` (``_ddp_worker``: the CIFAR CNN conv32-pool-conv64-pool-dense10,
60 k parameters, and ResNet-20 with batch norm, 270 k) on synthetic 3x32x32 data with the same per-worker batch,
momentum SGD, one torch thread per worker (THREADS_PER_WORKER=1 / torch.set_num_threads(1)). Ours is a real
``tmlauncher``-style session of ``TorchClassifierModel`` (benchmarks/_torch_models.py) under BSP cdd, twice at
2 workers: with the exchange overlapped with backward (gradient buckets of ``--bucket-mb``, each summed by MPI
``Iallreduce`` from the autograd hooks) and without (``BSP_BUCKET_MB=0``: one allreduce after backward). DDP runs
``_ddp_worker.py`` (gloo, 25 MB buckets overlapped with backward). Throughput = samples / wall-clock seconds
after warm-up (ours: the second epoch of the session, its 2-batch validation included; DDP: timed around its
steps after warm-up steps). Exchange time = the seconds per step rank 0 spent in the exchange in the second
epoch (its ``comm`` timer: without overlap the allreduce after backward; with it the exchange calls made from
the hooks plus the wait for the buckets still in flight after backward); the time hidden is their difference.
Each configuration runs ``--repeats`` times, alternating ours and DDP; the best throughput counts (the machine
may be shared), the exchange times are medians over the repeats; all runs are in the JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
#: our ModelClass in _torch_models.py for each of _ddp_worker.py's --model names
MODELS = {"cnn": "TorchCifarCNN", "resnet20": "TorchResNet20"}


def ours(model: str, workers: int, batch: int, steps: int, bucket_mb: float, run_dir: Path) -> dict:
    """Samples/s of the second epoch of a BSP-cdd session of ``model`` on ``workers`` CPU ranks, and rank 0's
    exchange and compute milliseconds per step in that epoch."""
    return bsp_session(str(HERE / "_torch_models.py"), MODELS[model], workers, batch, steps, bucket_mb, run_dir)


def bsp_session(modelfile: str, modelclass: str, workers: int, batch: int, steps: int, bucket_mb: float,
                run_dir: Path) -> dict:
    """:func:`ours` for any ModelClass with the model options ``train_size`` and ``val_size`` (also
    benchmarks/jax_keras_models.py's)."""
    from theanompi import BSP

    rule = BSP()
    rule.init(devices=[f"cpu{i}" for i in range(workers)], modelfile=modelfile,
              modelclass=modelclass, n_epochs=2, threads=1, log_level="WARNING", run_dir=str(run_dir),
              sync_type="cdd", bucket_mb=bucket_mb, plots=False, tensorboard=False, average_weights="none",
              model_options={"batch_size": batch, "train_size": steps * workers * batch,
                             "val_size": 2 * batch * workers, "lr": 0.01})
    if rule.wait() != 0:
        sys.exit(f"theanompi {modelclass} x{workers} failed: {rule.failure}")
    second = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()][1]
    rows = [json.loads(line) for line in (run_dir / "iterations.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["iteration"] >= steps]  # the second epoch's steps
    summary = json.loads((run_dir / "summary.json").read_text())
    comm = [1e3 * r["comm"] for r in rows]
    return {"samples_per_s": second["train_samples"] / second["epoch_s"],
            "exchange_ms": statistics.fmean(comm), "exchange_ms_p10": statistics.quantiles(comm, n=10)[0],
            "calc_ms": 1e3 * statistics.fmean(r["calc"] for r in rows),
            "buckets": summary.get("gradient_buckets", 0)}


def measure(model: str, args: argparse.Namespace, tmp: Path) -> dict:
    from scaling_vs_ddp import ddp

    runs: dict[str, list] = {"ours_1": [], "ddp_1": [], "ours_2": [], "ours_2_no_overlap": [], "ddp_2": []}
    for rep in range(args.repeats):
        runs["ours_1"].append(ours(model, 1, args.batch, args.steps, args.bucket_mb, tmp / f"{model}-1-{rep}"))
        runs["ddp_1"].append(ddp(model, 1, args.batch, args.steps))
        runs["ours_2"].append(ours(model, 2, args.batch, args.steps, args.bucket_mb, tmp / f"{model}-2-{rep}"))
        runs["ours_2_no_overlap"].append(ours(model, 2, args.batch, args.steps, 0, tmp / f"{model}-2p-{rep}"))
        runs["ddp_2"].append(ddp(model, 2, args.batch, args.steps))

    def best(key: str) -> float:
        return max(r["samples_per_s"] if isinstance(r, dict) else r for r in runs[key])

    exchange = {}
    for stat in ("exchange_ms", "exchange_ms_p10"):  # the mean over the steps, their 10th percentile
        without, with_overlap = (statistics.median(r[stat] for r in runs[key])
                                 for key in ("ours_2_no_overlap", "ours_2"))
        exchange.update({f"{stat}_no_overlap": without, f"{stat}_overlap": with_overlap,
                         f"{stat}_hidden": without - with_overlap})
    return {
        **{key: best(key) for key in runs},
        "ours_speedup": best("ours_2") / best("ours_1"), "ddp_speedup": best("ddp_2") / best("ddp_1"),
        "ours_over_ddp_2": best("ours_2") / best("ddp_2"),
        "ours_no_overlap_over_ddp_2": best("ours_2_no_overlap") / best("ddp_2"),
        "buckets": runs["ours_2"][0]["buckets"], **exchange,
        "calc_ms_2": statistics.median(r["calc_ms"] for r in runs["ours_2"]),
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default="cnn,resnet20")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bucket-mb", type=float, default=None,
                        help="our gradient buckets (BSP_BUCKET_MB); default: the option's default")
    parser.add_argument("--json", default=str(HERE / "results" / "torch_bsp_vs_ddp.json"))
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("this benchmark needs PyTorch: pip install -e '.[torch]'")
    from cnn_step_vs_torch import machine_info

    from theanompi.core.session_options import BSPOptions

    if args.bucket_mb is None:
        args.bucket_mb = BSPOptions().bucket_mb
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        sys.exit(f"--models: unknown {', '.join(unknown)}; use some of: {', '.join(MODELS)}")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        results = {model: measure(model, args, Path(tmp)) for model in models}
    print(f"TorchClassifierModel under BSP-cdd vs DDP (gloo), per-worker batch {args.batch}, 1 thread per worker, "
          f"best of {args.repeats}, samples/s; our buckets {args.bucket_mb:g} MB")
    print(f"{'model':<9} {'ours 1w':>8} {'ours 2w':>8} {'no overlap':>10} {'ddp 1w':>8} {'ddp 2w':>8} "
          f"{'ours/ddp 2w':>11}")
    for model, r in results.items():
        print(f"{model:<9} {r['ours_1']:>8.1f} {r['ours_2']:>8.1f} {r['ours_2_no_overlap']:>10.1f} {r['ddp_1']:>8.1f} "
              f"{r['ddp_2']:>8.1f} {r['ours_over_ddp_2']:>11.2f}")
    print("our exchange, ms per step at 2 workers (rank 0, second epoch; medians over the repeats): "
          "mean / 10th percentile of the steps")
    print(f"{'model':<9} {'buckets':>7} {'no overlap':>15} {'overlap':>15} {'hidden':>15}")
    for model, r in results.items():
        cells = [f"{r['exchange_ms_' + k]:.3f} / {r['exchange_ms_p10_' + k]:.3f}"
                 for k in ("no_overlap", "overlap", "hidden")]
        print(f"{model:<9} {r['buckets']:>7} " + " ".join(f"{c:>15}" for c in cells))
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "batch": args.batch, "steps": args.steps, "repeats": args.repeats, "bucket_mb": args.bucket_mb,
        "torch": torch.__version__, "machine": machine_info(),
        "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
