"""PNG plots of a run directory's records (matplotlib, headless).

* ``curves.png``: train/val loss and val accuracy against epoch and against wall time
  (compile excluded: the time axis starts when training starts); final values are written beside the curves
* ``breakdown.png``: per epoch, calc / comm / wait and the rest of the epoch's wall time
  (validation, records), then the session's totals with the compile phase beside them
  (one panel per worker when the rule keeps per-worker records under ``workers/``)

Example
-------
>>> paths = plot_run("runs/bsp-20261122-125022-3960")   # doctest: +SKIP
>>> [p.name for p in paths]                              # doctest: +SKIP
['curves.png', 'breakdown.png']
>>> epoch_walls([{"elapsed_no_compile_s": 1.5}, {"elapsed_no_compile_s": 2.0}])
[1.5, 0.5]
"""

from __future__ import annotations

import json
from pathlib import Path

from theanompi.core.no_follow import bounded_lines
from theanompi.core.safe_io import atomic_write

#: the parts of the time bars: record key, label, colour
TIME_PARTS = (("calc_s", "calc", "tab:blue"), ("comm_s", "comm", "tab:orange"), ("wait_s", "wait", "tab:gray"),
              ("other_s", "other (validation, records)", "tab:olive"))
COMPILE_COLOUR = "tab:purple"
#: above this many epochs, curves drop their markers and time bars become stacked areas
MANY_EPOCHS = 40
#: the longest line of a records file (a longer one is no record theanompi wrote)
LINE_LIMIT = 1 << 20


def read_epochs(records_dir: Path, root: Path | None = None) -> list[dict]:
    """The epoch records of ``records_dir`` (RUN_DIR, or a worker's records below it: ``root``, reached without
    following a link), lines that are not one JSON object (cut short by a killed session) skipped."""
    path = Path(records_dir) / "epochs.jsonl"
    if not path.exists():
        return []
    rows = []
    for line in bounded_lines(path, LINE_LIMIT, "records file", root=root or Path(records_dir), label="RUN_DIR"):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows


def _pyplot():
    import matplotlib  # noqa: PLC0415 - the launcher loads this module: matplotlib only to draw

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415 - the launcher loads this module: matplotlib only to draw

    return plt


def _series(epochs, key):
    return [e.get(key, e.get(key.replace("_all", ""))) for e in epochs]


def _points(xs, ys):
    """The (x, y) pairs where y is a number (workers that do not validate leave None)."""
    pairs = [(x, y) for x, y in zip(xs, ys) if isinstance(y, (int, float))]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _time_axis(epochs: list[dict]) -> tuple[list, str]:
    """Each epoch's end in wall seconds, compile excluded where the records say it, and the axis label."""
    if all("elapsed_no_compile_s" in e for e in epochs):
        return [e["elapsed_no_compile_s"] for e in epochs], "wall time without compile (s)"
    return [e.get("elapsed_s") for e in epochs], "wall time (s)"


def epoch_walls(epochs: list[dict]) -> list[float] | None:
    """Each epoch's wall seconds (compile excluded), from ``elapsed_no_compile_s``; None without it."""
    if not all("elapsed_no_compile_s" in e for e in epochs):
        return None
    ends = [e["elapsed_no_compile_s"] for e in epochs]
    return [end - start for start, end in zip([0.0] + ends[:-1], ends)]


def _draw_series(ax, xs, ys, many: bool, **style) -> None:
    """One curve; a single point or a short run gets markers, every curve gets its last value written."""
    ax.plot(xs, ys, marker=None if many else "o", **style)
    ax.annotate(f"{ys[-1]:.3g}", (xs[-1], ys[-1]), textcoords="offset points", xytext=(4, 4), fontsize=8,
                color=style.get("color"))


def plot_curves(run_dir: Path, epochs: list[dict]) -> Path:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - the launcher loads this module: matplotlib only to draw

    many = len(epochs) > MANY_EPOCHS
    x_epoch = [e["epoch"] + 1 for e in epochs]
    x_time, time_label = _time_axis(epochs)
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    for col, (x, label) in enumerate(((x_epoch, "epoch"), (x_time, time_label))):
        if any(v is None for v in x):
            axes[0, col].set_visible(False)
            axes[1, col].set_visible(False)
            continue
        for key, name, colour in (("train_loss_all", "train loss", "tab:blue"), ("val_loss", "val loss", "tab:red")):
            xs, ys = _points(x, _series(epochs, key))
            if xs:
                _draw_series(axes[0, col], xs, ys, many, label=name, color=colour)
        axes[0, col].set_ylabel("loss")
        axes[0, col].legend()
        xs, ys = _points(x, _series(epochs, "val_accuracy"))
        if xs:
            _draw_series(axes[1, col], xs, [100 * v for v in ys], many, color="tab:green")
        axes[1, col].set_ylabel("val accuracy (%)")
        for ax in axes[:, col]:
            ax.set_xlabel(label)
            ax.grid(alpha=0.3)
            ax.margins(y=0.12)  # room for the last value's label
            if col == 0:
                ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
                ax.set_xlim(min(x) - 0.5, max(x) + 0.5 + 0.08 * len(x))  # room for the last value
            else:
                ax.set_xlim(0, 1.12 * max(x))
    compile_s = sum(e.get("compile_s", 0.0) for e in epochs)
    note = f"  (compile {compile_s:.1f} s, not on the time axis)" if compile_s else ""
    fig.suptitle(f"{Path(run_dir).name}{note}")
    path = atomic_write(Path(run_dir) / "curves.png", lambda f: fig.savefig(f, format="png", dpi=90), label="RUN_DIR")
    plt.close(fig)
    return path


def _time_parts(recs: list[dict]) -> dict[str, list[float]]:
    """Per epoch: calc/comm/wait seconds and the rest of its wall time ('other_s', when the records have it)."""
    parts = {key: [r.get(key, 0.0) for r in recs] for key, _, _ in TIME_PARTS[:3]}
    walls = epoch_walls(recs)
    if walls is not None:
        timed = [sum(values) for values in zip(*parts.values())]
        parts["other_s"] = [max(0.0, wall - t) for wall, t in zip(walls, timed)]
    return parts


def _draw_epoch_times(ax, recs: list[dict], parts: dict[str, list[float]]) -> None:
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - the launcher loads this module: matplotlib only to draw

    x = [r["epoch"] + 1 for r in recs]
    styles = [(key, label, colour) for key, label, colour in TIME_PARTS if key in parts]
    if len(recs) > MANY_EPOCHS:
        ax.stackplot(x, *[parts[key] for key, _, _ in styles], labels=[s[1] for s in styles],
                     colors=[s[2] for s in styles])
    else:
        bottom = [0.0] * len(recs)
        for key, label, colour in styles:
            ax.bar(x, parts[key], bottom=bottom, color=colour, label=label, width=0.8)
            bottom = [b + v for b, v in zip(bottom, parts[key])]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds per epoch (compile excluded)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _draw_totals(ax, recs: list[dict], parts: dict[str, list[float]]) -> None:
    """One bar per part of the session's time, compile included, each labelled with its seconds and share."""
    totals = [("compile", sum(r.get("compile_s", 0.0) for r in recs), COMPILE_COLOUR)]
    totals += [(label.split(" ")[0], sum(parts[key]), colour) for key, label, colour in TIME_PARTS if key in parts]
    whole = sum(t for _, t, _ in totals) or 1.0
    rows = list(range(len(totals)))[::-1]
    ax.barh(rows, [t for _, t, _ in totals], color=[c for _, _, c in totals])
    ax.set_yticks(rows, [label for label, _, _ in totals])
    for row, (_, seconds, _) in zip(rows, totals):
        ax.annotate(f"{seconds:.2f} s ({100 * seconds / whole:.0f} %)", (seconds, row), textcoords="offset points",
                    xytext=(3, 0), va="center", fontsize=8)
    ax.set_xlim(0, 1.35 * max(t for _, t, _ in totals) or 1.0)
    ax.set_xlabel("seconds in the session")


def plot_breakdown(run_dir: Path, epochs: list[dict]) -> Path:
    plt = _pyplot()
    panels = [("session", epochs)]
    for worker_dir in sorted((Path(run_dir) / "workers").glob("*")):
        panels.append((worker_dir.name, read_epochs(worker_dir, root=Path(run_dir))))
    panels = [(name, recs) for name, recs in panels
              if recs and any(r.get("calc_s") or r.get("compile_s") for r in recs)]
    n = max(1, len(panels))
    fig, axes = plt.subplots(2, n, figsize=(7 * n, 7), squeeze=False, constrained_layout=True,
                             gridspec_kw={"height_ratios": [3, 2]})
    for col, (name, recs) in enumerate(panels):
        parts = _time_parts(recs)
        _draw_epoch_times(axes[0, col], recs, parts)
        axes[0, col].set_title(name)
        _draw_totals(axes[1, col], recs, parts)
    path = atomic_write(Path(run_dir) / "breakdown.png", lambda f: fig.savefig(f, format="png", dpi=90),
                        label="RUN_DIR")
    plt.close(fig)
    return path


def plot_run(run_dir) -> list[Path]:
    """Draw the run's plots into the run directory; returns their paths ([] without epoch records)."""
    epochs = read_epochs(run_dir)
    if not epochs:
        return []
    return [plot_curves(run_dir, epochs), plot_breakdown(run_dir, epochs)]
