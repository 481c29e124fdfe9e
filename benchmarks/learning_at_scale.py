"""Learning at scale: every rule at 1, 2, 4 and 8 workers, two seeds, a pytensor and a PyTorch CNN, with and without
the learning-rate schedule and averaged weights; final accuracy, the spread of the last 5 epochs, time to target.

    flock /work/wt/bench.lock python benchmarks/learning_at_scale.py [--quick] [--models signal,torch]
        [--workers 1,2,4,8] [--seeds 0,1] [--epochs 10] [--n-train 4000] [--n-val 2000] [--target 0.9]
        [--variants defaults,scheduled[,constant,averaged,scaled,sqrt-scaled]] [--asgd-study [--asgd-candidates L]]
        [--json PATH] [--png PATH] [--note TEXT]
    python benchmarks/learning_at_scale.py --report PATH.json [--png PATH]     # the table and plot of a JSON

The data are benchmarks/signal_cnn.py's noisy sinusoids of 8 frequencies (the Bayes-optimal classifier's
accuracy on the validation signals is the ceiling); the models are that file's SignalCNN (pytensor, ``signal``) and
benchmarks/_torch_models.py's TorchSignalCNN (the same network in PyTorch, ``torch``), both momentum SGD at lr 0.02,
momentum 0.9, batch 32 per worker, with no schedule of their own (``MODEL_DECAY_EPOCH=0``). Every run is a real
session (the ``theanompi`` handles) with the same model, epochs and seed for every rule:

* rules: BSP ``cdd`` and ``avg`` (``BSP_AVG_FREQ=1``), EASGD, GOSGD and ASGD at each option's default; one worker
  is BSP's (the reference; BSP ``avg``'s and GOSGD's one-worker sessions are the same local SGD), EASGD's and
  ASGD's (a server and one worker);
* variants: ``defaults`` (no option set: what a user gets, LR_SCHEDULE=constant and AVERAGE_WEIGHTS=ema), on
  request ``constant`` (the same training, AVERAGE_WEIGHTS=none: the defaults until 2026-12-06; the JSONs' runs
  of the defaults before that day are relabelled so) and ``averaged`` (AVERAGE_WEIGHTS=ema with EMA_DECAY
  ``--ema-decay`` set: the defaults since, at the default decay), and ``scheduled``
  (LR_SCHEDULE=cosine, AVERAGE_WEIGHTS=ema with EMA_DECAY ``--ema-decay``); on request ``scaled``: ``scheduled``
  with Goyal et al.'s LR_SCALING=linear over WARMUP_EPOCHS=2, the large-batch recipe, and ``sqrt-scaled``: the same
  with LR_SCALING=sqrt (the square root of the workers, for where the linear rule diverges). Both are for the rules
  whose model is an average of the workers' (BSP, EASGD's centre, GOSGD's consensus: an average of N workers' steps
  acts as one step on N times the batch); not for ASGD, whose server applies every worker's step on its own;
* ``--asgd-study``: ASGD at each ``--workers``, in each ``--variants``, on the first model, with each candidate of
  issue 38's item 3 (:data:`ASGD_CANDIDATES`): bounded staleness, the implicit-momentum correction, staleness
  handling, the workers' momentum set by hand, a warm-up from a small rate (WARMUP_START_FACTOR), and pairs of them.

Per run: the final model's validation accuracy after the last epoch (the averaged weights' when they are on), the
spread (max - min) of that accuracy over the last 5 epochs, the wall seconds from the first epoch's start to the
first epoch at ``--target`` or above, and ASGD's mean staleness. The JSON keeps every epoch's curve, every setting,
the machine (CPU, cores) and the load average before and after each run; it is written after every run, and a run
already in it is not run again (``--json`` of an interrupted run continues it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: model name -> (MODELFILE, MODELCLASS, extra model options)
MODELS = {
    "signal": (str(HERE / "signal_cnn.py"), "SignalCNN", {"decay_epoch": 0}),
    "torch": (str(HERE / "_torch_models.py"), "TorchSignalCNN", {}),
}
#: rule label -> (RULE, rule options)
RULES = {
    "BSP cdd": ("BSP", {"sync_type": "cdd"}),
    "BSP avg": ("BSP", {"sync_type": "avg", "avg_freq": 1}),
    "EASGD": ("EASGD", {}),
    "GOSGD": ("GOSGD", {}),
    "ASGD": ("ASGD", {}),
}
#: the rules run with one worker (BSP avg's and GOSGD's one-worker sessions are BSP cdd's local SGD)
ONE_WORKER_RULES = ("BSP cdd", "EASGD", "ASGD")
#: ASGD's candidates of issue 38, item 3 (--asgd-study): label -> ASGD options (``model_options``: the model's own).
#: "momentum 0.5" is the workers' momentum that the staleness measured at 8 workers here (a mean of 3.5-4.6 server
#: updates between a worker's pull and its push) implies under Mitliagkas et al.'s model, 1 - (1 + 4)(1 - 0.9),
#: where ASGD_MOMENTUM_CORRECTION=implicit assumes 8 concurrent workers: 1 - 8(1 - 0.9) = 0.2.
#: "warm-up from lr/8" ramps the workers' rate from 1/8 of both models' 0.02 up to it over the first 3 epochs
#: (WARMUP_START_FACTOR): the signal CNN's lost seeds collapse to chance within their first 1-6 epochs. Its runs
#: before WARMUP_START_FACTOR existed reached the same rates through LR_SCALING=linear's warm-up on a base rate of
#: 0.0025 (``MODEL_LR``; their recorded options say so)
WARMUP_FROM_LR_OVER_8 = {"warmup_epochs": 3, "warmup_start_factor": 1 / 8}
ASGD_CANDIDATES = {
    "ASGD bounded 2": {"max_staleness": 2},
    "ASGD implicit momentum": {"momentum_correction": "implicit"},
    "ASGD unscaled, implicit momentum": {"staleness": "none", "momentum_correction": "implicit"},
    "ASGD unscaled, implicit momentum, bounded 2": {"staleness": "none", "momentum_correction": "implicit",
                                                    "max_staleness": 2},
    "ASGD unscaled, momentum 0.5": {"staleness": "none", "model_options": {"momentum": 0.5}},
    "ASGD warm-up from lr/8": WARMUP_FROM_LR_OVER_8,
    "ASGD unscaled, implicit momentum, warm-up from lr/8": {"staleness": "none", "momentum_correction": "implicit",
                                                            **WARMUP_FROM_LR_OVER_8},
    "ASGD bounded 2, warm-up from lr/8": {"max_staleness": 2, **WARMUP_FROM_LR_OVER_8},
    "ASGD unscaled, momentum 0.5, warm-up from lr/8": {"staleness": "none", "model_options": {"momentum": 0.5},
                                                       **WARMUP_FROM_LR_OVER_8},
    # ASGD's defaults since 2026-12-06 warm up from lr/8 over 3 epochs: this one is the defaults before that day
    "ASGD without warm-up": {"warmup_epochs": 0.0},
}
LAST = 5  # the epochs whose spread is reported
#: the run's settings that flags set: flag -> (type, default)
SETTING_FLAGS = {"--epochs": (int, 10), "--n-train": (int, 4000), "--n-val": (int, 2000), "--target": (float, 0.9),
                 "--ema-decay": (float, 0.998)}


VARIANTS = ("defaults", "constant", "averaged", "scheduled", "scaled", "sqrt-scaled")


def variant_options(variant: str, ema_decay: float) -> dict:
    """The session options of a variant: ``defaults`` (none set), ``constant`` (the defaults' training without
    averaged weights), ``averaged`` (the defaults' training, evaluated on averaged weights of decay ``ema_decay``),
    ``scheduled`` (cosine + averaged), ``scaled`` (``scheduled`` with the learning rate times the workers after a
    2-epoch warm-up), ``sqrt-scaled`` (the same with the square root of the workers).

    >>> variant_options("scaled", 0.99)["lr_scaling"], variant_options("sqrt-scaled", 0.99)["lr_scaling"]
    ('linear', 'sqrt')
    >>> variant_options("defaults", 0.99), variant_options("constant", 0.99), variant_options("averaged", 0.99)
    ({}, {'average_weights': 'none'}, {'average_weights': 'ema', 'ema_decay': 0.99})
    """
    if variant == "defaults":
        return {}
    if variant == "constant":
        return {"average_weights": "none"}
    averaged = {"average_weights": "ema", "ema_decay": ema_decay}
    if variant == "averaged":
        return averaged
    scheduled = {"lr_schedule": "cosine", **averaged}
    if variant == "scheduled":
        return scheduled
    return {**scheduled, "lr_scaling": "sqrt" if variant == "sqrt-scaled" else "linear", "warmup_epochs": 2}


def run_key(model: str, variant: str, label: str, workers: int, seed: int) -> str:
    return f"{model} | {variant} | {label} | {workers} | {seed}"


def planned_runs(models, variants, workers, seeds, asgd_study: bool, rules=tuple(RULES),
                 candidates=tuple(ASGD_CANDIDATES)) -> list[dict]:
    """Every run to make, in order: for each model and variant, each worker count, each rule (of ``rules``), each
    seed; then, with ``asgd_study``, each of ASGD's ``candidates`` at each worker count.

    >>> runs = planned_runs(["signal"], ["defaults"], [1, 2], [0], asgd_study=False)
    >>> [(r["label"], r["workers"]) for r in runs]
    [('BSP cdd', 1), ('EASGD', 1), ('ASGD', 1), ('BSP cdd', 2), ('BSP avg', 2), ('EASGD', 2), ('GOSGD', 2), ('ASGD', 2)]
    """
    runs = []
    for model in models:
        for variant in variants:
            for n in workers:
                labels = ONE_WORKER_RULES if n == 1 else tuple(RULES)
                for label in (lab for lab in labels if lab in rules):
                    rule, options = RULES[label]
                    runs += [dict(model=model, variant=variant, label=label, rule=rule, options=options, workers=n,
                                  seed=seed) for seed in seeds]
    if asgd_study:  # the first model, each variant
        for variant, n in ((v, w) for v in variants for w in workers):
            for label in candidates:
                runs += [dict(model=models[0], variant=variant, label=label, rule="ASGD",
                              options=ASGD_CANDIDATES[label], workers=n, seed=seed) for seed in seeds]
    return runs


def read_curve(run_dir: Path) -> list[dict]:
    """A finished session's epochs: the final model's validation accuracy (the averaged weights' when on), the
    model's own, and the seconds since the first epoch started."""
    records = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]
    first = records[0]["elapsed_s"] - records[0]["epoch_s"]
    return [{"epoch": r["epoch"] + 1, "seconds": r["elapsed_s"] - first,
             "accuracy": r.get("ema_val_accuracy", r["val_accuracy"]), "model_accuracy": r["val_accuracy"],
             "lr": r.get("lr")} for r in records]


def summarise(curve: list[dict], target: float) -> dict:
    """Final accuracy, the spread of the last LAST epochs, epochs and seconds to ``target``.

    >>> s = summarise([{"epoch": e, "seconds": 2.0 * e, "accuracy": a} for e, a in enumerate([.5, .9, .8, .95], 1)],
    ...               target=0.9)
    >>> s["final_accuracy"], round(s["last_spread"], 2), s["epochs_to_target"], s["seconds_to_target"]
    (0.95, 0.45, 2, 4.0)
    """
    hit = next((p for p in curve if p["accuracy"] >= target), None)
    last = [p["accuracy"] for p in curve[-LAST:]]
    return {"final_accuracy": curve[-1]["accuracy"], "last_spread": max(last) - min(last),
            "epochs_to_target": hit and hit["epoch"], "seconds_to_target": hit and hit["seconds"],
            "train_s": curve[-1]["seconds"]}


def mean_staleness(run_dir: Path) -> float | None:
    summary = json.loads((run_dir / "summary.json").read_text())
    values = [s["mean"] for s in summary.get("staleness", {}).values()]
    return sum(values) / len(values) if values else None


def run_session(run: dict, settings: dict, run_dir: Path) -> dict:
    """One session; its curve and summary (the figures above)."""
    import theanompi

    modelfile, modelclass, model_options = MODELS[run["model"]]
    devices = [f"cpu{i}" for i in range(run["workers"] + (1 if run["rule"] == "EASGD" else 0))]
    handle = getattr(theanompi, run["rule"])()
    options = {**run["options"], **variant_options(run["variant"], settings["ema_decay"])}
    own = options.pop("model_options", {})
    start = time.time()
    handle.init(devices=devices, modelfile=modelfile, modelclass=modelclass, n_epochs=settings["epochs"],
                seed=run["seed"], run_dir=str(run_dir), log_level="WARNING", plots=False, tensorboard=False,
                progress_every=0, model_options={**model_options, **own, "n_train": settings["n_train"],
                                                 "n_val": settings["n_val"]}, **options)
    if handle.wait() != 0:
        return {"failed": str(handle.failure), "wall_s": time.time() - start}
    curve = read_curve(run_dir)
    result = {**summarise(curve, settings["target"]), "wall_s": time.time() - start, "curve": curve,
              "options": {**options, **({"model_options": own} if own else {})}}
    if run["rule"] == "ASGD":
        result["mean_staleness"] = mean_staleness(run_dir)
    return result


def ceiling(n_val: int) -> float:
    """The Bayes-optimal classifier's accuracy on the validation signals."""
    from signal_cnn import bayes_predict, make_signals

    _, (x_val, y_val) = make_signals(n_train=1, n_val=n_val)
    return float((bayes_predict(x_val) == y_val).mean())


# ----- the report ---------------------------------------------------------------------------------
def grouped(results: dict) -> dict:
    """(model, variant, label, workers) -> the runs of every seed."""
    groups: dict = {}
    for run in results["runs"].values():
        if "failed" in run:
            continue
        groups.setdefault((run["model"], run["variant"], run["label"], run["workers"]), []).append(run)
    return groups


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def table(results: dict) -> str:
    """The markdown table: per model, variant, rule and workers, the means over the seeds, and the gap to one
    worker (BSP's one-worker run of the same model and variant)."""
    groups = grouped(results)
    lines = ["| model | variant | rule | workers | final accuracy | vs 1 worker | last-5 spread | epochs to target "
             "| seconds to target | staleness |", "|---|---|---|---|---|---|---|---|---|---|"]
    for (model, variant, label, n), runs in sorted(groups.items(), key=lambda kv: (
            kv[0][0], kv[0][1], list(RULES).index(kv[0][2]) if kv[0][2] in RULES else 9, kv[0][2], kv[0][3])):
        reference = groups.get((model, variant, "BSP cdd", 1))
        final = mean([r["final_accuracy"] for r in runs])
        gap = final - mean([r["final_accuracy"] for r in reference]) if reference and n > 1 else None
        hits = [r["epochs_to_target"] for r in runs]
        seconds = [r["seconds_to_target"] for r in runs]
        reached = f"{mean(hits):.1f}" if None not in hits else f"{sum(h is not None for h in hits)}/{len(hits)} runs"
        stale = mean([r.get("mean_staleness") for r in runs])
        lines.append(
            f"| {model} | {variant} | {label} | {n} | {100 * final:.2f} % | "
            f"{'—' if gap is None else f'{100 * gap:+.2f}'} | {100 * mean([r['last_spread'] for r in runs]):.2f} | "
            f"{reached} | {f'{mean(seconds):.0f}' if None not in seconds else '—'} | "
            f"{'' if stale is None else f'{stale:.2f}'} |")
    return "\n".join(lines)


def plot(results: dict, png: Path) -> None:
    """Final accuracy (mean of the seeds) against workers, one panel per model and variant, one line per rule
    (and per ASGD candidate of ``--asgd-study``), the one-worker reference dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = grouped(results)
    panels = sorted({(m, v) for m, v, _, _ in groups})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.6), sharey=True, squeeze=False)
    for ax, (model, variant) in zip(axes[0], panels):
        reference = groups.get((model, variant, "BSP cdd", 1))
        for index, label in enumerate([*RULES, *ASGD_CANDIDATES]):  # a rule's colour is the same in every panel
            points = sorted((n, mean([r["final_accuracy"] for r in runs])) for (m, v, lab, n), runs in groups.items()
                            if (m, v, lab) == (model, variant, label) and n > 1)
            if points:
                ax.plot([n for n, _ in points], [100 * a for _, a in points], marker="o", color=f"C{index}",
                        label=label)
        if reference:
            one = 100 * mean([r["final_accuracy"] for r in reference])
            ax.axhline(one, color="k", ls="--", lw=1, label="1 worker")
            ax.axhspan(one - 0.5, one + 0.5, color="k", alpha=0.08)
        ax.set_xscale("log", base=2)
        ax.set_xticks([2, 4, 8], ["2", "4", "8"])
        ax.set_title(f"{model}, {variant}")
        ax.set_xlabel("workers")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("final validation accuracy (%)")
    legend = {}  # every rule of any panel, once
    for ax in axes[0]:
        legend.update({label: handle for handle, label in zip(*ax.get_legend_handles_labels())})
    axes[0][-1].legend(legend.values(), legend.keys(), fontsize=7, loc="best")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


# ----- the run ---------------------------------------------------------------------------------
def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="a minute or two: the pytensor CNN, BSP cdd and ASGD at 1 and 2 workers, one seed, "
                             "3 epochs of 1000 signals")
    parser.add_argument("--models", default="signal,torch")
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--variants", default="defaults,scheduled")
    parser.add_argument("--rules", default=",".join(RULES), help="comma list of the rules' labels")
    for flag, (kind, default) in SETTING_FLAGS.items():
        parser.add_argument(flag, type=kind, default=default)
    parser.add_argument("--asgd-study", action="store_true", help="also ASGD's candidates at each --workers")
    parser.add_argument("--asgd-candidates", default=";".join(ASGD_CANDIDATES),
                        help="the labels of the candidates that --asgd-study runs, separated by ';' (a label "
                             "may hold a comma)")
    parser.add_argument("--json", default=str(HERE / "results" / "learning_at_scale.json"))
    parser.add_argument("--png", default=str(HERE / "results" / "learning_at_scale.png"))
    parser.add_argument("--report", metavar="JSON", help="only print the table of JSON and draw --png")
    parser.add_argument("--note", default="", help="a note for the JSON (default: the note it holds)")
    args = parser.parse_args(argv)
    if args.quick:
        args.models, args.workers, args.seeds, args.rules = "signal", "1,2", "0", "BSP cdd,ASGD"
        args.epochs, args.n_train, args.n_val = 3, 1000, 1000
        args.json = args.json.replace(".json", "_quick.json")
        args.png = args.png.replace(".png", "_quick.png")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.report:
        results = json.loads(Path(args.report).read_text())
        print(table(results))
        plot(results, Path(args.png))
        return
    unknown = sorted(set(args.rules.split(",")) - set(RULES))
    if unknown:
        sys.exit(f"--rules: {unknown[0]!r} is not one of: {', '.join(RULES)}")
    unknown = sorted(set(args.asgd_candidates.split(";")) - set(ASGD_CANDIDATES))
    if unknown:
        sys.exit(f"--asgd-candidates: {unknown[0]!r} is not one of: {'; '.join(ASGD_CANDIDATES)}")
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        sys.exit(f"--variants: {unknown[0]!r} is not one of: {', '.join(VARIANTS)}")
    settings = {"epochs": args.epochs, "n_train": args.n_train, "n_val": args.n_val, "target": args.target,
                "ema_decay": args.ema_decay, "batch_size": 32, "lr": 0.02, "momentum": 0.9}
    path = Path(args.json)
    results = json.loads(path.read_text()) if path.exists() else {}
    if results.get("settings") not in (None, settings):
        sys.exit(f"{path} holds runs of other settings ({results['settings']}); name another --json")
    from asgd_staleness import machine

    results.update(settings=settings, machine=machine(), note=args.note or results.get("note", ""),
                   ceiling=results.get("ceiling") or ceiling(args.n_val))
    results.setdefault("runs", {})
    runs = planned_runs(args.models.split(","), args.variants.split(","), [int(w) for w in args.workers.split(",")],
                        [int(s) for s in args.seeds.split(",")], args.asgd_study, tuple(args.rules.split(",")),
                        tuple(args.asgd_candidates.split(";")))
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for i, run in enumerate(runs):
            key = run_key(run["model"], run["variant"], run["label"], run["workers"], run["seed"])
            if key in results["runs"] and "failed" not in results["runs"][key]:
                continue
            load_before = os.getloadavg()
            result = run_session(run, settings, Path(tmp) / f"run-{i}")
            results["runs"][key] = {**{k: v for k, v in run.items() if k != "options"}, **result,
                                    "load_before": load_before, "load_after": os.getloadavg()}
            shown = result.get("failed") or f"{100 * result['final_accuracy']:.2f} % ({result['wall_s']:.0f} s)"
            print(f"[{i + 1}/{len(runs)}] {key}: {shown}", flush=True)
            results["wall_s"] = results.get("wall_s", 0.0) + result["wall_s"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(results, indent=1))
    print(f"\n{len(runs)} runs in {time.time() - started:.0f} s; ceiling {100 * results['ceiling']:.1f} %")
    print(table(results))
    plot(results, Path(args.png))
    print(f"json: {path}\npng: {args.png}")


if __name__ == "__main__":
    main()
