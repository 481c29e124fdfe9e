"""What BSP's compression and DiLoCo cost in accuracy and save in bytes, at equal steps, 2 workers, one machine.

    flock /work/wt/bench.lock python benchmarks/bsp_compression.py [--quick] [--json PATH]

* **compression** (BSP ``cdd``, every step's gradient exchanged): BSP_COMPRESSION none, fp16, bf16 and powersgd
  (rank 2) on the digits MLP with two hidden layers of 1024 (1.13 M parameters, a communication-heavy model), over
  ``--seeds`` seeds; then the same four on the signal CNN (``benchmarks/signal_cnn.py``: 4,000 validation signals,
  so its accuracy has a standard error of about 0.4 points where the digits' 297 give 1 point).
* **diloco** (the signal CNN): BSP ``cdd`` against BSP ``avg`` with one exchange per epoch (BSP_AVG_FREQ = the 125
  steps of an epoch): plain averaging (local SGD), DiLoCo (BSP_OUTER_OPTIMIZER=nesterov, lr 0.7, momentum 0.9), and
  DiLoCo with fp16 pseudo-gradients.

Bytes are the payload each worker's exchanges sent (``summary.json``'s ``bytes_sent``, counted as
:mod:`theanompi.comm.traffic` does: a ring allreduce's
2(N-1)/N of the buffer, a 16-bit message's own bytes). Every run is a real session (``BSP().init``). The JSON
records the machine and its load; this measures bytes and accuracy, not time on a slow link (that is
``benchmarks/slow_links.py``'s). ``--quick``: 2 epochs, one seed, a minute or two.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from asgd_staleness import machine
from rules_time_to_accuracy import accuracy_curve

import theanompi

HERE = Path(__file__).resolve().parent
MLP = {"modelfile": "theanompi.models.mlp", "modelclass": "MLP", "model_options": {"hidden": "1024,1024"}}
SIGNAL = {"modelfile": str(HERE / "signal_cnn.py"), "modelclass": "SignalCNN", "model_options": {}}
COMPRESSIONS = {"none": {}, "fp16": {"compression": "fp16"}, "bf16": {"compression": "bf16"},
                "powersgd": {"compression": "powersgd", "powersgd_rank": 2}}
STEPS_PER_EPOCH = 125  # the signal CNN's 8,000 training signals, 2 workers, batch 32
DILOCO = {"BSP cdd": {"sync_type": "cdd"},
          "avg, H=epoch": {"sync_type": "avg", "avg_freq": STEPS_PER_EPOCH},
          "DiLoCo, H=epoch": {"sync_type": "avg", "avg_freq": STEPS_PER_EPOCH, "outer_optimizer": "nesterov"},
          "DiLoCo fp16, H=epoch": {"sync_type": "avg", "avg_freq": STEPS_PER_EPOCH, "outer_optimizer": "nesterov",
                                   "compression": "fp16"}}


def run(model: dict, epochs: int, seed: int, run_dir: Path, **options) -> dict:
    """One 2-worker BSP session; its final accuracy, bytes per step per worker and wall time."""
    started = time.time()
    rule = theanompi.BSP()
    rule.init(devices=["cpu0", "cpu1"], modelfile=model["modelfile"], modelclass=model["modelclass"],
              n_epochs=epochs, seed=seed, run_dir=str(run_dir), log_level="WARNING", plots=False,
              average_weights="none",
              tensorboard=False, model_options={**model["model_options"], "n_epochs": epochs}, **options)
    if rule.wait() != 0:
        sys.exit(f"session {options} failed: {rule.failure}")
    summary = json.loads((run_dir / "summary.json").read_text())
    sent = summary["bytes_sent"]  # worker 0's includes the initial broadcast of the params; worker 1's does not
    return {"final_accuracy": summary["final_val_accuracy"], "iterations": summary["iterations"],
            "bytes_per_worker": sent, "bytes_per_step": sent[-1] / summary["iterations"],
            "curve": [p["val_accuracy"] for p in accuracy_curve(run_dir)], "wall_s": time.time() - started}


def table(title: str, runs: dict, reference: str) -> None:
    ref = runs[reference]
    print(f"\n{title}")
    print(f"{'run':<22} {'accuracy':>9} {'vs ' + reference:>12} {'bytes/step':>12} {'fewer bytes':>11} {'s':>6}")
    for label, r in runs.items():
        r["accuracy_vs_reference"] = r["final_accuracy"] - ref["final_accuracy"]
        r["bytes_ratio"] = ref["bytes_per_step"] / r["bytes_per_step"] if r["bytes_per_step"] else float("inf")
        print(f"{label:<22} {100 * r['final_accuracy']:>8.2f}% {100 * r['accuracy_vs_reference']:>+11.2f} "
              f"{r['bytes_per_step']:>12.0f} {r['bytes_ratio']:>10.1f}x {r['wall_s']:>6.0f}")


def mean_over_seeds(results: list[dict]) -> dict:
    keep = dict(results[0])
    keep["final_accuracy"] = sum(r["final_accuracy"] for r in results) / len(results)
    keep["per_seed_accuracy"] = [r["final_accuracy"] for r in results]
    keep["wall_s"] = sum(r["wall_s"] for r in results)
    return keep


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 epochs, one seed, the digits MLP and DiLoCo only")
    parser.add_argument("--mlp-epochs", type=int, default=10)
    parser.add_argument("--signal-epochs", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--json", default=str(HERE / "results" / "bsp_compression.json"))
    parser.add_argument("--note", default="", help="recorded in the JSON (e.g. whether the machine was shared)")
    args = parser.parse_args()
    mlp_epochs, signal_epochs, seeds = (2, 2, 1) if args.quick else (args.mlp_epochs, args.signal_epochs, args.seeds)
    load_before, started = os.getloadavg(), time.time()
    report: dict = {"quick": args.quick, "note": args.note, "mlp_epochs": mlp_epochs, "signal_epochs": signal_epochs,
                    "seeds": seeds}
    with tempfile.TemporaryDirectory() as tmp:
        def session(name: str, model: dict, epochs: int, seed: int, options: dict) -> dict:
            result = run(model, epochs, seed, Path(tmp) / f"{name}-{seed}".replace(" ", "_").replace(",", ""),
                         **options)
            print(f"  {name} (seed {seed}): {100 * result['final_accuracy']:.2f}%, "
                  f"{result['bytes_per_step']:.0f} bytes/step, {result['wall_s']:.0f} s", flush=True)
            return result

        report["compression_mlp"] = {name: mean_over_seeds([session(f"MLP {name}", MLP, mlp_epochs, seed, options)
                                                            for seed in range(seeds)])
                                     for name, options in COMPRESSIONS.items()}
        if not args.quick:
            report["compression_signal"] = {name: session(f"signal {name}", SIGNAL, signal_epochs, 0, options)
                                            for name, options in COMPRESSIONS.items()}
        diloco = DILOCO if not args.quick else {k: DILOCO[k] for k in ("BSP cdd", "DiLoCo, H=epoch")}
        report["diloco_signal"] = {name: session(f"signal {name}", SIGNAL, signal_epochs, 0, options)
                                   for name, options in diloco.items()}
    table(f"digits MLP 64-1024-1024-10, cdd, {mlp_epochs} epochs, mean of {seeds} seed(s)",
          report["compression_mlp"], "none")
    if "compression_signal" in report:
        table(f"signal CNN, cdd, {signal_epochs} epochs", report["compression_signal"], "none")
    table(f"signal CNN, {signal_epochs} epochs: DiLoCo against BSP cdd", report["diloco_signal"], "BSP cdd")
    report["machine"] = {**machine(), "load_before": load_before, "load_after": os.getloadavg()}
    report["wall_s"] = time.time() - started
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(report, indent=2))
    print(f"json: {args.json} ({report['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
