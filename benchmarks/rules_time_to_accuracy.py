"""Time-to-accuracy of BSP, EASGD, GOSGD and ASGD with 2 workers on real data (digits MLP), one plot.

    python benchmarks/rules_time_to_accuracy.py [--epochs 15] [--target 0.95] [--json PATH] [--png PATH]

Each rule runs as a real session (tmlauncher's code path) with the same model, batch size and
seed; validation accuracy per epoch is read from the run's epochs.jsonl together with its wall
time since the first epoch started (compile time excluded: it is paid once per machine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

RULES = {
    "BSP": {},
    "EASGD": {"alpha": 0.5, "tau": 4},
    "GOSGD": {"p": 0.1},
    "ASGD": {"updater": "add"},
}


def run_rule(name: str, options: dict, epochs: int, run_dir: Path) -> list[dict]:
    import theanompi

    rule = getattr(theanompi, name)()
    devices = ["cpu0", "cpu1", "cpu2"] if name == "EASGD" else ["cpu0", "cpu1"]  # EASGD: a server and 2 workers
    rule.init(devices=devices, modelfile="theanompi.models.mlp", modelclass="MLP", n_epochs=epochs,
              average_weights="none",
              seed=0, run_dir=str(run_dir), log_level="WARNING", model_options={"batch_size": 32}, **options)
    code = rule.wait()
    if code != 0:
        sys.exit(f"{name} session failed: {rule.failure}")
    return accuracy_curve(run_dir)


def accuracy_curve(run_dir: Path) -> list[dict]:
    """A finished session's validation accuracy per epoch, with the seconds since its first epoch started."""
    records = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]
    first = records[0]["elapsed_s"] - records[0]["epoch_s"]  # when the first epoch started
    return [{"epoch": r["epoch"] + 1, "seconds": r["elapsed_s"] - first, "val_accuracy": r["val_accuracy"]}
            for r in records]


def main() -> None:
    here = Path(__file__).parent
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--json", default=str(here / "results" / "rules.json"))
    parser.add_argument("--png", default=str(here / "results" / "rules.png"))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, options in RULES.items():
            results[name] = run_rule(name, options, args.epochs, Path(tmp) / name.lower())
    print(f"2 workers, digits MLP, {args.epochs} epochs; time to {100 * args.target:.0f}% validation accuracy")
    print(f"{'rule':<6} {'epochs':>6} {'seconds':>8} {'final acc':>9} {'total s':>8}")
    summary = {}
    for name, curve in results.items():
        hit = next((p for p in curve if p["val_accuracy"] >= args.target), None)
        summary[name] = {"epochs_to_target": hit and hit["epoch"], "seconds_to_target": hit and hit["seconds"],
                         "final_accuracy": curve[-1]["val_accuracy"], "total_s": curve[-1]["seconds"], "curve": curve}
        print(f"{name:<6} {hit['epoch'] if hit else '-':>6} {hit['seconds'] if hit else float('nan'):>8.3f} "
              f"{100 * curve[-1]['val_accuracy']:>8.2f}% {curve[-1]['seconds']:>8.3f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({"target": args.target, "rules": summary}, indent=2))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for name, curve in results.items():
        acc = [100 * p["val_accuracy"] for p in curve]
        axes[0].plot([p["seconds"] for p in curve], acc, marker="o", label=name)
        axes[1].plot([p["epoch"] for p in curve], acc, marker="o", label=name)
    for ax, label in zip(axes, ("wall time since training started (s)", "epoch")):
        ax.axhline(100 * args.target, color="gray", linestyle=":")
        ax.set_xlabel(label)
        ax.set_ylabel("validation accuracy (%)")
        ax.legend()
    fig.suptitle("theanompi rules, 2 CPU workers, digits MLP")
    fig.savefig(args.png, dpi=90)
    print(f"plot: {args.png}")


if __name__ == "__main__":
    main()
