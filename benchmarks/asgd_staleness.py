"""ASGD's staleness handling: accuracy and time to accuracy with 1, 2 and 4 workers, beside BSP.

    python benchmarks/asgd_staleness.py [--epochs 30] [--target 0.93] [--workers 1,2,4]
                                        [--modes none,scale,compensate] [--model-option NAME=VALUE ...]
                                        [--json PATH] [--note TEXT]

The data are noisy sinusoids of 8 frequencies (``benchmarks/signal_cnn.py``: 8,000 training and
4,000 validation signals of 128 samples; the Bayes-optimal classifier, which knows how they were
made, scores 96.3 % on the validation set: the ceiling). The model is that file's SignalCNN (lr 0.02,
momentum 0.9, the learning rate dropping tenfold at epoch 20).
Every run is a real session (the ``theanompi`` handles, tmlauncher's code path) with the same
model, batch size (32 per worker), seed and number of epochs:

* 1 worker (BSP with one worker: plain momentum SGD, nothing exchanged): the reference;
* for each N > 1: BSP ``cdd`` with N workers (every step a synchronous allreduce), and ASGD
  (updater ``add``, one server, a push and a pull every step) with each ``ASGD_STALENESS`` mode.

Per run: the validation accuracy after the last epoch, its difference to the 1-worker run, and the
wall time from the start of the first epoch (compile time excluded: it is paid once per machine)
to the first epoch whose validation accuracy reaches ``--target``. The JSON keeps every epoch's
curve, the machine (CPU, cores, load average before and after) and ``--note``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rules_time_to_accuracy import accuracy_curve
from signal_cnn import SignalCNN, bayes_predict, make_signals

import theanompi

HERE = Path(__file__).resolve().parent
MODELFILE = str(HERE / "signal_cnn.py")
MODES = ("none", "scale", "compensate")


def parse_value(text: str):
    """A --model-option value: an int, a float, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def run_session(rule_name: str, workers: int, epochs: int, model_options: dict, run_dir: Path,
                **options) -> list[dict]:
    """One session; its per-epoch validation accuracy and seconds since its first epoch started."""
    rule = getattr(theanompi, rule_name)()
    rule.init(devices=[f"cpu{i}" for i in range(workers)], modelfile=MODELFILE, modelclass="SignalCNN",
              n_epochs=epochs, seed=0, run_dir=str(run_dir), log_level="WARNING", plots=False, average_weights="none",
              model_options=model_options, **options)
    code = rule.wait()
    if code != 0:
        sys.exit(f"{rule_name} session with {workers} workers failed: {rule.failure}")
    return accuracy_curve(run_dir)


def mean_staleness(run_dir: Path) -> float | None:
    """Mean staleness over the workers' pushes (ASGD sessions), from summary.json."""
    summary = json.loads((run_dir / "summary.json").read_text())
    values = [s["mean"] for s in summary.get("staleness", {}).values()]
    return sum(values) / len(values) if values else None


def runs_to_make(workers: list[int], modes: list[str], asgd: dict | None = None,
                 reference: bool = True) -> list[tuple[str, str, int, dict]]:
    """(label, rule, workers, rule options) of every session, the 1-worker reference first.

    >>> [label for label, *_ in runs_to_make([1, 2], ["none", "scale"])]
    ['1 worker', 'BSP 2', 'ASGD 2 none', 'ASGD 2 scale']
    """
    asgd = asgd or {"updater": "add"}
    runs: list[tuple[str, str, int, dict]] = [("1 worker", "BSP", 1, {})] if reference else []
    for n in (w for w in workers if w > 1):
        if reference:
            runs.append((f"BSP {n}", "BSP", n, {"sync_type": "cdd"}))
        runs += [(f"ASGD {n} {mode}", "ASGD", n, {**asgd, "staleness": mode}) for mode in modes]
    return runs


def summarise(curve: list[dict], target: float) -> dict:
    hit = next((p for p in curve if p["val_accuracy"] >= target), None)
    return {"final_accuracy": curve[-1]["val_accuracy"], "epochs_to_target": hit and hit["epoch"],
            "seconds_to_target": hit and hit["seconds"], "total_s": curve[-1]["seconds"], "curve": curve}


def ceiling(model_options: dict) -> float:
    """The Bayes-optimal classifier's accuracy on the validation signals the sessions validate on."""
    hp = {**SignalCNN.defaults, **model_options}
    _, (x_val, y_val) = make_signals(hp["n_train"], hp["n_val"], float(hp["noise"]))
    return float((bayes_predict(x_val, float(hp["noise"])) == y_val).mean())


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in subprocess.run(
        ["lscpu"], capture_output=True, text=True).stdout.splitlines() if line.startswith("Model name")), "")
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "python": platform.python_version()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--target", type=float, default=0.93)
    parser.add_argument("--workers", default="1,2,4", help="comma list; 1 worker always runs (the reference)")
    parser.add_argument("--modes", default=",".join(MODES), help="ASGD_STALENESS values to run")
    parser.add_argument("--model-option", action="append", default=[], metavar="NAME=VALUE",
                        help="a SignalCNN option, e.g. n_train=2000 for a short check")
    parser.add_argument("--updater", default="add", help="ASGD_UPDATER of the ASGD runs")
    parser.add_argument("--server-lr", type=float, default=0.01, help="ASGD_LR (updaters sgd, momentum, adagrad)")
    parser.add_argument("--dc-lambda", type=float, default=None, help="ASGD_DC_LAMBDA (default: the option's)")
    parser.add_argument("--no-reference", action="store_true", help="skip the 1-worker and BSP runs")
    parser.add_argument("--json", default=str(HERE / "results" / "asgd_staleness.json"))
    parser.add_argument("--note", default="", help="recorded in the JSON (e.g. whether the machine was shared)")
    args = parser.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        sys.exit(f"--modes: {unknown[0]!r} is not an ASGD_STALENESS value; use some of: {', '.join(MODES)}")
    model_options = {"n_epochs": args.epochs}
    for item in args.model_option:
        name, _, value = item.partition("=")
        model_options[name] = parse_value(value)
    load_before = os.getloadavg()
    results: dict[str, dict] = {}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        asgd = {"updater": args.updater} if args.updater == "add" else {"updater": args.updater,
                                                                         "server_lr": args.server_lr}
        if args.dc_lambda is not None:
            asgd["dc_lambda"] = args.dc_lambda
        for label, rule, n, options in runs_to_make(workers, modes, asgd, not args.no_reference):
            run_dir = Path(tmp) / label.replace(" ", "-")
            curve = run_session(rule, n, args.epochs, model_options, run_dir, **options)
            results[label] = {"rule": rule, "workers": n, **options, **summarise(curve, args.target)}
            if rule == "ASGD":
                results[label]["mean_staleness"] = mean_staleness(run_dir)
            print(f"  {label}: {100 * curve[-1]['val_accuracy']:.2f}% after {args.epochs} epochs", flush=True)
    reference = results["1 worker"]["final_accuracy"] if "1 worker" in results else float("nan")
    best = ceiling(model_options)
    print(f"\nSignalCNN on noisy sinusoids (ceiling {100 * best:.1f}%), {args.epochs} epochs, "
          f"time to {100 * args.target:.0f}% validation accuracy")
    print(f"{'run':<20} {'final acc':>9} {'vs 1 w':>7} {'epochs':>6} {'seconds':>8} {'staleness':>9}")
    for label, r in results.items():
        r["vs_one_worker"] = r["final_accuracy"] - reference
        hit_s = f"{r['seconds_to_target']:.1f}" if r["seconds_to_target"] is not None else "-"
        stale = f"{r['mean_staleness']:.2f}" if r.get("mean_staleness") is not None else ""
        print(f"{label:<20} {100 * r['final_accuracy']:>8.2f}% {100 * r['vs_one_worker']:>+6.2f} "
              f"{r['epochs_to_target'] or '-':>6} {hit_s:>8} {stale:>9}")
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "target": args.target, "epochs": args.epochs, "model_options": model_options, "ceiling": best,
        "note": args.note,
        "machine": {**machine(), "load_before": load_before, "load_after": os.getloadavg()},
        "wall_s": time.time() - started, "runs": results}, indent=2))
    print(f"json: {args.json}")


if __name__ == "__main__":
    main()
