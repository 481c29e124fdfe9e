"""DiLoCo's outer momentum and PowerSGD's uncompressed start on a short session with batch norm.

    flock /work/wt/bench.lock python benchmarks/short_session_remedies.py [--epochs 4] [--json PATH]

benchmarks/slow_links.py's ResNet-20 session (the zoo's ResNet20 on the 8x8 digits, batch 32, 4 workers, 4 epochs:
48 steps a worker) learns with plain averaging but not with DiLoCo's outer Nesterov step at the paper's 0.7 / 0.9
(23 %) nor with PowerSGD from the first step (68 %). This runs that session on this host (the link does not change
what these deterministic sessions learn, only how long they take) with plain averaging, DiLoCo at outer momentum
0.9 and 0.5 (and outer lr 1.0 at 0.5), PowerSGD from step 0 and after one uncompressed epoch
(``BSP_POWERSGD_START_ITER=12``), and prints each epoch's validation accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

#: label -> the BSP options of the session
CASES = {
    "avg every 8 (reference)": {"sync_type": "avg", "avg_freq": 8},
    "DiLoCo, outer lr 0.7, momentum 0.9": {"sync_type": "avg", "avg_freq": 8, "outer_optimizer": "nesterov"},
    "DiLoCo, outer lr 0.7, momentum 0.5": {"sync_type": "avg", "avg_freq": 8, "outer_optimizer": "nesterov",
                                           "outer_momentum": 0.5},
    "DiLoCo, outer lr 1.0, momentum 0.5": {"sync_type": "avg", "avg_freq": 8, "outer_optimizer": "nesterov",
                                           "outer_lr": 1.0, "outer_momentum": 0.5},
    "cdd PowerSGD from step 0": {"sync_type": "cdd", "compression": "powersgd"},
    "cdd PowerSGD from step 12": {"sync_type": "cdd", "compression": "powersgd", "powersgd_start_iter": 12},
}


def run_case(options: dict, epochs: int, run_dir: Path) -> list[float]:
    """One session; its validation accuracy after each epoch."""
    from theanompi import BSP

    code = BSP().init(devices=["cpu0", "cpu1", "cpu2", "cpu3"], modelfile="theanompi.models.zoo.resnet",
                      modelclass="ResNet20", model_options={"data": "digits", "batch_size": 32}, n_epochs=epochs,
                      average_weights="none",
                      threads=1, run_dir=str(run_dir), **options).wait()
    if code != 0:
        raise SystemExit(f"short_session_remedies: the session in {run_dir} failed (exit {code})")
    records = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]
    return [r["val_accuracy"] for r in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    load_before = os.getloadavg()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, options) in enumerate(CASES.items()):
            start = time.time()
            curve = run_case(options, args.epochs, Path(tmp) / f"case{i}")
            results[label] = {"options": options, "val_accuracy": curve}
            print(f"{label}: " + " -> ".join(f"{a:.2%}" for a in curve) + f" ({time.time() - start:.0f} s)",
                  flush=True)
    if args.json:
        machine = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                   "load_before": load_before, "load_after": os.getloadavg()}
        args.json.write_text(json.dumps({"epochs": args.epochs, "machine": machine, "results": results}, indent=1))
        print(f"json: {args.json}")


if __name__ == "__main__":
    main()
