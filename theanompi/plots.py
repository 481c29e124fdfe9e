"""PNG plots of a run directory's records (matplotlib, headless).

* ``curves.png``: train/val loss and val accuracy against epoch and against wall time
* ``breakdown.png``: calc / comm / wait seconds per epoch (per worker when the rule keeps
  per-worker records under ``workers/``)

Example
-------
>>> paths = plot_run("runs/bsp-20261122-125022-3960")   # doctest: +SKIP
>>> [p.name for p in paths]                              # doctest: +SKIP
['curves.png', 'breakdown.png']
"""

from __future__ import annotations

import json
from pathlib import Path


def read_epochs(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "epochs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _series(epochs, key):
    return [e.get(key, e.get(key.replace("_all", ""))) for e in epochs]


def _points(xs, ys):
    """The (x, y) pairs where y is a number (workers that do not validate leave None)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def plot_curves(run_dir: Path, epochs: list[dict]) -> Path:
    plt = _pyplot()
    x_epoch = [e["epoch"] + 1 for e in epochs]
    x_time = [e.get("elapsed_s") for e in epochs]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for col, (x, label) in enumerate(((x_epoch, "epoch"), (x_time, "wall time (s)"))):
        if any(v is None for v in x):
            axes[0, col].set_visible(False)
            axes[1, col].set_visible(False)
            continue
        for key, name in (("train_loss_all", "train loss"), ("val_loss", "val loss")):
            xs, ys = _points(x, _series(epochs, key))
            if xs:
                axes[0, col].plot(xs, ys, marker="o", label=name)
        axes[0, col].set_xlabel(label)
        axes[0, col].set_ylabel("loss")
        axes[0, col].legend()
        xs, ys = _points(x, _series(epochs, "val_accuracy"))
        axes[1, col].plot(xs, [100 * v for v in ys], marker="o", color="tab:green")
        axes[1, col].set_xlabel(label)
        axes[1, col].set_ylabel("val accuracy (%)")
    fig.suptitle(f"{Path(run_dir).name}")
    path = Path(run_dir) / "curves.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_breakdown(run_dir: Path, epochs: list[dict]) -> Path:
    plt = _pyplot()
    panels = [("session", epochs)]
    for worker_dir in sorted((Path(run_dir) / "workers").glob("*")):
        panels.append((worker_dir.name, read_epochs(worker_dir)))
    panels = [(name, recs) for name, recs in panels if recs and any(r.get("calc_s") for r in recs)]
    fig, axes = plt.subplots(1, max(1, len(panels)), figsize=(5 * max(1, len(panels)), 4), squeeze=False,
                             constrained_layout=True)
    for ax, (name, recs) in zip(axes[0], panels):
        x = [r["epoch"] + 1 for r in recs]
        bottom = [0.0] * len(recs)
        for kind, color in (("calc", "tab:blue"), ("comm", "tab:orange"), ("wait", "tab:gray")):
            values = [r.get(f"{kind}_s", 0.0) for r in recs]
            ax.bar(x, values, bottom=bottom, color=color, label=kind)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xlabel("epoch")
        ax.set_ylabel("seconds")
        ax.set_title(name)
        ax.legend()
    path = Path(run_dir) / "breakdown.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def plot_run(run_dir) -> list[Path]:
    """Draw the run's plots into the run directory; returns their paths ([] without epoch records)."""
    epochs = read_epochs(run_dir)
    if not epochs:
        return []
    return [plot_curves(run_dir, epochs), plot_breakdown(run_dir, epochs)]
