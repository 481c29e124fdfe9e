"""Every rule on slow links: sessions on 4 tools/netsim hosts at unlimited, 1 Gbit/s, 100 Mbit/s and 20 Mbit/s.

    flock /work/wt/bench.lock python benchmarks/slow_links.py [--quick] [--parts rules,mixed,goals,allreduce]
        [--rates unlimited,1gbit,100mbit,20mbit] [--models mlp,resnet20] [--configs "BSP cdd,EASGD"]
        [--json benchmarks/results/slow_links.json] [--png benchmarks/results/slow_links.png] [--dry-run]
    python benchmarks/slow_links.py --markdown benchmarks/results/slow_links.json   # the tables for the docs

Each session is a real ``tmlauncher`` session started on host1 of ``python tools/netsim.py run --hosts 4 --rate R``
(one worker per host, one BLAS thread a rank: the hosts share this machine's cores; EASGD's server and ASGD's
server are extra ranks on host1), as a user would rehearse one
(docs/several-hosts.md). Per session: validation accuracy per epoch and the seconds since training began, the time
to the model's target accuracy, ``bytes_sent`` per worker (summary.json) and each host's ``tx_bytes`` (netsim's last
line), and the compute share of wall time (the workers' mean ``calc`` seconds over the session's training seconds).

Parts:

* ``rules``: every configuration of :data:`CONFIGS` x :data:`MODELS` (a 1.1 M-parameter MLP on the digits, 4.5 MB
  a message: communication-heavy; ResNet-20 on the digits, 0.27 M parameters: compute-heavy) x the link rates;
* ``mixed``: the MLP with one host's link at 1/20 of the others' (100 Mbit/s, host4 at 5 Mbit/s; ``--quick``:
  1 Gbit/s and 50 Mbit/s);
* ``goals``: what issue 36's goals are measured on: BSP ``cdd`` and DiLoCo (every 8 steps; every 50 with the
  epoch-end exchanges and every 50 or 100 without them: ``BSP_AVG_AT_EPOCH_END=false``) on 2 hosts at 20 Mbit/s,
  :data:`GOALS_DILOCO_EPOCHS` epochs; ``cdd``
  uncompressed, fp16, bf16 and PowerSGD (rank 2) on 4 hosts at 50 Mbit/s;
* ``allreduce``: on 2 hosts at 100 Mbit/s (and 20), the allreduce of 16 and 64 MB vectors by mpi4py with Open MPI's
  defaults, and by BSP's exchanger and mpi4py with the settings of a theanompi rank, side by side: the fraction of
  the link's rate each moves (the bytes each rank sends, :mod:`theanompi.comm.traffic`, over the time), under the
  kernel's TCP congestion control and under ``reno`` (``netsim run --tcp-congestion``).

Configurations whose options this theanompi does not have (BSP_COMPRESSION, BSP_OUTER_OPTIMIZER: issue 36 items 3
and 4) are skipped with a printed note, found through the options table. ``--quick`` (a few minutes): the MLP,
2 epochs (its target: 90 %), unlimited and 100 Mbit/s links, BSP ``cdd``, BSP ``avg`` and EASGD, and the mixed case,
with them; one allreduce size. Every run prints its estimated duration first (``--dry-run``: only that). Timing runs
take the shared lock (``flock /work/wt/bench.lock``); the JSON records the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
NETSIM = ROOT / "tools" / "netsim.py"
TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
RATES = ("unlimited", "1gbit", "100mbit", "20mbit")
HOSTS = 4
#: the allreduce part: timed sums per way and size (best of them; the ways take turns), and its minutes
ALLREDUCE_REPEATS = 5
ALLREDUCE_MINUTES = 14
#: the 2-host allreduces run under each of these TCP congestion controls (None: the kernel's default, bbr on the
#: VMs measured here; reno: loss-based, as Linux's usual default cubic, which a namespace here may not choose)
ALLREDUCE_CONGESTION = (None, "reno")


@dataclass(frozen=True)
class Model:
    modelfile: str
    modelclass: str
    keys: dict[str, object]
    epochs: int
    target: float  # the accuracy whose time is measured; --quick's 2 epochs aim lower
    quick_target: float
    params: int  # parameters (float32): what a message carries
    compute_epoch_s: float  # one epoch's compute on 4 workers of this 2-core machine (for the estimate; ResNet-20 on
    # the 8x8 digits measured 0.23-0.35 s of compute a worker an epoch, 2026-11-29: 2.0 leaves room for its phases)


@dataclass(frozen=True)
class Config:
    rule: str
    keys: dict[str, object]
    #: model keys this configuration needs where the model has them (e.g. EASGD validates the centre's batch norm)
    model_keys: dict[str, object] = field(default_factory=dict)
    #: exchanged messages per step per worker, in parameter vectors (for the duration estimate)
    vectors_per_step: float = 1.5


MODELS = {
    "mlp": Model("theanompi.models.mlp", "MLP", {"MODEL_HIDDEN": "1024,1024", "MODEL_BATCH_SIZE": 32}, epochs=5,
                 target=0.95, quick_target=0.90, params=1_126_410, compute_epoch_s=4.0),
    "resnet20": Model("theanompi.models.zoo.resnet", "ResNet20", {"MODEL_DATA": "digits", "MODEL_BATCH_SIZE": 32},
                      epochs=4, target=0.90, quick_target=0.80, params=269_722, compute_epoch_s=2.0),
}
AVG = {"BSP_SYNC_TYPE": "avg", "BSP_AVG_FREQ": 8}
CONFIGS = {
    "BSP cdd": Config("BSP", {"BSP_SYNC_TYPE": "cdd"}),
    "BSP cdd fp16": Config("BSP", {"BSP_SYNC_TYPE": "cdd", "BSP_COMPRESSION": "fp16"}, vectors_per_step=0.75),
    "BSP cdd bf16": Config("BSP", {"BSP_SYNC_TYPE": "cdd", "BSP_COMPRESSION": "bf16"}, vectors_per_step=0.75),
    "BSP cdd PowerSGD": Config("BSP", {"BSP_SYNC_TYPE": "cdd", "BSP_COMPRESSION": "powersgd",
                                       "BSP_POWERSGD_RANK": 2}, vectors_per_step=0.05),
    "BSP avg": Config("BSP", AVG, vectors_per_step=1.5 / 8),
    "DiLoCo": Config("BSP", {**AVG, "BSP_OUTER_OPTIMIZER": "nesterov"}, vectors_per_step=1.5 / 8),
    # DiLoCo as its paper runs it, many local steps an outer step (here 50 or 100 of the goals' 230 steps a
    # worker); "across epochs": without the epoch-end exchanges (BSP_AVG_AT_EPOCH_END=false), as DiLoCo itself runs
    "DiLoCo H50": Config("BSP", {**AVG, "BSP_AVG_FREQ": 50, "BSP_OUTER_OPTIMIZER": "nesterov"},
                         vectors_per_step=1.5 / 23),
    "DiLoCo H50 across epochs": Config("BSP", {**AVG, "BSP_AVG_FREQ": 50, "BSP_OUTER_OPTIMIZER": "nesterov",
                                               "BSP_AVG_AT_EPOCH_END": "false"}, vectors_per_step=1.5 / 50),
    "DiLoCo H100 across epochs": Config("BSP", {**AVG, "BSP_AVG_FREQ": 100, "BSP_OUTER_OPTIMIZER": "nesterov",
                                                "BSP_AVG_AT_EPOCH_END": "false"}, vectors_per_step=1.5 / 100),
    "EASGD": Config("EASGD", {"EASGD_TAU": 4, "EASGD_ALPHA": 0.5}, {"MODEL_BN_EVAL": "batch"}, vectors_per_step=0.5),
    "GOSGD": Config("GOSGD", {"GOSGD_P": 0.1}, vectors_per_step=0.1),
    "ASGD": Config("ASGD", {"ASGD_FREQ": 4}, vectors_per_step=0.5),
}
QUICK_CONFIGS = ("BSP cdd", "BSP avg", "EASGD")
GOALS_COMPRESSION = ("BSP cdd", "BSP cdd fp16", "BSP cdd bf16", "BSP cdd PowerSGD")
GOALS_DILOCO = ("BSP cdd", "DiLoCo", "DiLoCo H50", "DiLoCo H50 across epochs", "DiLoCo H100 across epochs")
GOALS_ONLY = GOALS_DILOCO[2:]  # configurations run in the goals part only
#: the goals' DiLoCo sessions (2 hosts, 20 Mbit/s): 10 epochs of the MLP, 230 steps a worker, so that an outer step
#: every 50 or 100 of them can send 50x fewer bytes than cdd's 230 exchanges (5 epochs: 115 steps, 23x at most)
GOALS_DILOCO_EPOCHS = 10
MIXED = ("100mbit", "host4=5mbit")
QUICK_MIXED = ("1gbit", "host4=50mbit")
#: every netsim host sees all of this machine's cores, so the default (cores / ranks on the host) would give each
#: rank all of them: 8 BLAS threads of 4 lock-step BSP ranks on 2 cores made a BSP step 4-8x slower than with one
THREADS_PER_WORKER = 1
STARTUP_S = 30.0  # a 4-host session's start: launching, importing, loading the compiled functions


def missing_options(config: Config) -> list[str]:
    """The cfg keys of ``config`` that its rule's options table does not have (an option not merged yet)."""
    from theanompi.core.session_options import options_of

    known = set(options_of(config.rule).cfg_keys())
    return [key for key in config.keys if key not in known]


def model_has_option(model: Model, key: str) -> bool:
    from theanompi.models.loader import load_model_class

    name = key.removeprefix("MODEL_").lower()
    return name in load_model_class(model.modelfile, model.modelclass).option_table


def devices(config: Config, n_hosts: int) -> str:
    """One worker per host; EASGD's server is the first device (an extra rank on host1)."""
    hosts = [f"host{k}:cpu0" for k in range(1, n_hosts + 1)]
    if config.rule == "EASGD":
        hosts[0] = "host1:cpu0,cpu1"
    return ";".join(hosts)


def write_cfg(path: Path, model: Model, config: Config, run_dir: Path, n_hosts: int, epochs: int) -> None:
    keys: dict[str, object] = {"RULE": config.rule, "MODELFILE": model.modelfile, "MODELCLASS": model.modelclass,
                               "DEVICES": devices(config, n_hosts), "N_EPOCHS": epochs, "SEED": 0,
                               "PLOTS": "false", "TENSORBOARD": "false", "RUN_DIR": run_dir, "AVERAGE_WEIGHTS": "none",
                               "THREADS_PER_WORKER": THREADS_PER_WORKER, **model.keys,
                               **config.keys}
    keys.update({k: v for k, v in config.model_keys.items() if model_has_option(model, k)})
    path.write_text("".join(f"{k}={v}\n" for k, v in keys.items()))


def read_records(run_dir: Path) -> tuple[dict, list[dict], float]:
    """The session's summary, its epoch records and its workers' compute seconds (mean over workers)."""
    summary = json.loads((run_dir / "summary.json").read_text())
    epochs = [json.loads(line) for line in (run_dir / "epochs.jsonl").read_text().splitlines()]
    calc = [w["calc_s"] for w in summary.get("per_worker", []) if "calc_s" in w]
    if not calc:  # EASGD: each worker's own records
        calc = [sum(json.loads(line).get("calc_s", 0.0) for line in path.read_text().splitlines())
                for path in sorted((run_dir / "workers").glob("worker-*/epochs.jsonl"))]
    return summary, epochs, sum(calc) / max(1, len(calc))


def worker_bytes(summary: dict) -> list[int]:
    """The workers' entries of ``bytes_sent`` (EASGD: after its server, rank 0; ASGD: before its servers)."""
    sent, n = summary["bytes_sent"], summary["workers"]
    return sent[1:] if summary["rule"] == "EASGD" else sent[:n]


def run_session(work: Path, label: str, model: Model, config: Config, rate: str, rate_of: list[str],
                n_hosts: int = HOSTS, epochs: int | None = None, target: float | None = None) -> dict:
    """One session on ``n_hosts`` netsim hosts; its measures, or its error."""
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    run_dir, cfg = work / slug, work / f"{slug}.cfg"
    epochs = epochs or model.epochs
    write_cfg(cfg, model, config, run_dir, n_hosts, epochs)
    argv = [sys.executable, str(NETSIM), "run", "--hosts", str(n_hosts), "--rate", rate,
            *[a for item in rate_of for a in ("--rate-of", item)], "--", TMLAUNCHER, f"-cfg={cfg}"]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    session_s = time.perf_counter() - start
    (work / f"{slug}.log").write_text(proc.stdout + proc.stderr)
    tx = {h: int(n) for h, n in re.findall(r"(host\d)=(\d+)", proc.stderr.strip().splitlines()[-1])} \
        if proc.stderr.strip() else {}
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if "error" in line or "failed" in line]
        return {"error": (errors or [f"exit status {proc.returncode}"])[-1], "session_s": session_s}
    summary, records, calc_s = read_records(run_dir)
    first = records[0]["elapsed_s"] - records[0]["epoch_s"]  # when training began
    curve = [{"epoch": r["epoch"] + 1, "seconds": r["elapsed_s"] - first, "val_accuracy": r["val_accuracy"]}
             for r in records]
    target = target or model.target
    hit = next((p for p in curve if p["val_accuracy"] >= target), None)
    train_s = curve[-1]["seconds"]
    sent = worker_bytes(summary)
    steps = summary["iterations"] / (summary["workers"] if config.rule == "EASGD" else 1)  # EASGD counts them all
    return {"rule": config.rule, "rate": rate, "rate_of": rate_of, "hosts": n_hosts, "epochs": len(curve),
            "curve": curve, "target": target, "seconds_to_target": hit and hit["seconds"],
            "epochs_to_target": hit and hit["epoch"], "final_accuracy": curve[-1]["val_accuracy"], "train_s": train_s,
            "steps_per_worker": steps, "seconds_per_step": train_s / max(1, steps),
            "bytes_sent": summary["bytes_sent"], "bytes_per_worker": sum(sent) / len(sent),
            "bytes_per_worker_step": sum(sent) / len(sent) / max(1, steps),
            "tx_bytes": tx, "compute_share": calc_s / train_s if train_s else None, "session_s": session_s}


def rate_bits(rate: str) -> float:
    sys.path.insert(0, str(ROOT / "tools"))
    from netsim_cluster import parse_rate

    return parse_rate(rate) or 10e9


def estimate_s(model: Model, config: Config, rate: str, epochs: int, rate_of: Sequence[str] = (),
               hosts: int = HOSTS) -> float:
    """A rough duration of one session: start, compute, and the exchanged vectors at the slowest link's rate (a
    lock-step rule waits for it; the asynchronous ones' slow worker ends last).

    >>> mlp, cdd = MODELS["mlp"], CONFIGS["BSP cdd"]
    >>> round(estimate_s(mlp, cdd, "100mbit", 5, ["host4=5mbit"]) / estimate_s(mlp, cdd, "100mbit", 5))
    8
    """
    steps = 1437 // (32 * hosts) + 1
    slowest = min(rate_bits(r) for r in [rate, *(one.partition("=")[2] for one in rate_of)])
    comm = steps * config.vectors_per_step * model.params * 4 * 8 / slowest
    return STARTUP_S + epochs * (model.compute_epoch_s + comm)


@dataclass
class Plan:
    """The sessions to run: (part, label, model name, config name, rate, rate_of, hosts, epochs)."""

    sessions: list[tuple[str, str, str, str, str, list[str], int, int]] = field(default_factory=list)
    skipped: dict[str, list[str]] = field(default_factory=dict)  # config -> its missing options

    def add(self, part: str, model: str, config: str, rate: str, rate_of: list[str], hosts: int, epochs: int) -> None:
        missing = missing_options(CONFIGS[config])
        if missing:
            self.skipped[config] = missing
            return
        where = f"{rate}" + (f" ({', '.join(rate_of)})" if rate_of else "") + f", {hosts} hosts"
        self.sessions.append((part, f"{part} {model} {config} {where}", model, config, rate, rate_of, hosts, epochs))

    def estimate_s(self) -> float:
        return sum(estimate_s(MODELS[m], CONFIGS[c], r, e, slow, h) for _, _, m, c, r, slow, h, e in self.sessions)


def make_plan(args: argparse.Namespace) -> Plan:
    plan, parts = Plan(), args.parts.split(",")
    rates = args.rates.split(",")
    for name in args.models.split(","):
        epochs = 2 if args.quick else MODELS[name].epochs
        for config in (c for c in args.configs.split(",") if c not in GOALS_ONLY):
            for rate in rates:
                if "rules" in parts:
                    plan.add("rules", name, config, rate, [], HOSTS, epochs)
            if "mixed" in parts and name == "mlp":
                rate, slow = QUICK_MIXED if args.quick else MIXED
                plan.add("mixed", name, config, rate, [slow], HOSTS, epochs)
    if "goals" in parts and not args.quick:
        chosen = args.configs.split(",")
        for config in (c for c in GOALS_DILOCO if c in chosen):
            plan.add("goals", "mlp", config, "20mbit", [], 2, GOALS_DILOCO_EPOCHS)
        for config in (c for c in GOALS_COMPRESSION if c in chosen):
            plan.add("goals", "mlp", config, "50mbit", [], HOSTS, MODELS["mlp"].epochs)
    return plan


def run_allreduce(work: Path, quick: bool) -> list[dict]:
    """The allreduce part: mpi4py with Open MPI's defaults, then theanompi's exchanger and mpi4py with a theanompi
    rank's settings, each on 2 netsim hosts (the same rate), under the kernel's TCP congestion control and under
    ``reno`` (:data:`ALLREDUCE_CONGESTION`); then, on 4 hosts at 50 Mbit/s, the fp16 allreduce (in pairwise rounds
    and all at once) beside the fp32 exchanger, with the MLP's 4.3 MB; best of a few sums per size."""
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    rows = []
    both = [("100mbit", "16")] if quick else [("100mbit", "16,64"), ("20mbit", "16")]
    congestion = ALLREDUCE_CONGESTION[:1] if quick else ALLREDUCE_CONGESTION
    cases = [(rate, sizes, 2, mode, tcp) for tcp in congestion for rate, sizes in both
             for mode in ("raw", "theanompi")]
    if not quick:
        cases += [("50mbit", "4.3", HOSTS, "fp16", tcp) for tcp in congestion]
    script = str(HERE / "_slow_links_allreduce.py")
    env = dict(mpiexec_env(), PYTHONPATH=str(ROOT))
    for rate, sizes, hosts, mode, tcp in cases:
        mpi = [find_mpiexec(), "--hostfile", "$NETSIM_HOSTFILE", "-n", str(hosts), "-x", "PYTHONPATH",
               sys.executable, script, mode, sizes, str(ALLREDUCE_REPEATS)]
        proc = subprocess.run([sys.executable, str(NETSIM), "run", "--hosts", str(hosts), "--rate", rate,
                               *(["--tcp-congestion", tcp] if tcp else []), "--", "sh", "-c", " ".join(mpi)],
                              cwd=work, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            rows.append({"rate": rate, "mode": mode, "tcp": tcp, "error": proc.stderr.strip().splitlines()[-3:]})
            continue
        used = re.search(r"on a bridge, TCP (\S+);", proc.stderr)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                wire = row["bytes_per_rank"] * 8 / rate_bits(rate)  # seconds at the link's rate
                row.update(rate=rate, tcp=used.group(1) if used else tcp or "unknown",
                           link_fraction=wire / row["seconds"], worst_link_fraction=wire / max(row["all_seconds"]))
                rows.append(row)
                print(f"  allreduce {row['size_mb']:g} MB at {rate}, {hosts} hosts, TCP {row['tcp']}: "
                      f"{row['what']:<36} {row['seconds']:7.3f} s {100 * row['link_fraction']:5.1f} % of the link "
                      f"(the worst of {len(row['all_seconds'])}: {100 * row['worst_link_fraction']:.1f} %)",
                      flush=True)
    return rows


# ----- the report ------------------------------------------------------------------------------------------
def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_table(results: dict[str, dict], part: str, model: str, rates: list[str]) -> None:
    """Per configuration and rate: seconds to the target | MB sent per worker | compute share of wall time."""
    rows = {key: r for key, r in results.items() if r.get("part") == part and r.get("model") == model}
    if not rows:
        return
    target = next(iter(rows.values())).get("target", MODELS[model].target)
    print(f"\n{part}: {model}, {HOSTS} hosts; seconds to {100 * target:.0f} % | MB sent per worker | compute share")
    print(f"{'':<18}" + "".join(f"{rate:>24}" for rate in rates))
    for config in CONFIGS:
        cells = []
        for rate in rates:
            r = next((r for r in rows.values() if r["config"] == config and r["rate"] == rate), None)
            if r is None:
                cells.append("")
            elif "error" in r:
                cells.append("failed")
            else:
                share = r["compute_share"]
                cells.append(f"{fmt_s(r['seconds_to_target'])} | {r['bytes_per_worker'] / 1e6:.1f} | "
                             f"{'-' if share is None else f'{100 * share:.0f}%'}")
        if any(cells):
            print(f"{config:<18}" + "".join(f"{c:>24}" for c in cells))


def markdown(data: dict) -> str:
    """The JSON's sessions as the Markdown tables docs/performance.md shows: per part and model, a row per
    configuration, a column per link rate: seconds to the target / MB sent per worker / compute share."""
    sessions = [r for r in data["sessions"].values() if "error" not in r]
    out = []
    for part in ("rules", "mixed", "goals"):
        for model in MODELS:
            rows = [r for r in sessions if r["part"] == part and r["model"] == model]
            if not rows:
                continue
            known = dict.fromkeys((*RATES, "50mbit", MIXED[0], QUICK_MIXED[0]))
            rates = [rate for rate in known if any(r["rate"] == rate for r in rows)]
            hosts = sorted({r["hosts"] for r in rows})
            out.append(f"\n{part}, {model} ({'/'.join(map(str, hosts))} hosts, {rows[0]['epochs']} epochs; s to "
                       f"{100 * rows[0]['target']:.0f} % / MB per worker / compute share):\n")
            out.append("| configuration | " + " | ".join(rates) + " |")
            out.append("|---|" + "---|" * len(rates))
            for config in CONFIGS:
                cells = []
                for rate in rates:
                    r = next((r for r in rows if r["config"] == config and r["rate"] == rate), None)
                    cells.append("" if r is None else
                                 f"{fmt_s(r['seconds_to_target'])} / {r['bytes_per_worker'] / 1e6:.1f} / "
                                 f"{100 * (r['compute_share'] or 0):.0f} %")
                if any(cells):
                    out.append(f"| {config} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def find(results: dict[str, dict], part: str, config: str, rate: str) -> dict | None:
    r = next((r for r in results.values() if r.get("part") == part and r["config"] == config and r["rate"] == rate),
             None)
    return r if r is not None and "error" not in r else None


def goals(results: dict[str, dict], allreduce: list[dict]) -> dict[str, str]:
    """Issue 36's goals, each as measured here (or why not)."""
    out: dict[str, str] = {}
    cdd = find(results, "goals", "BSP cdd", "20mbit")
    for name in GOALS_DILOCO[1:]:
        diloco = find(results, "goals", name, "20mbit")
        if not (cdd and diloco):
            continue
        reach = next((p["seconds"] for p in diloco["curve"] if p["val_accuracy"] >= cdd["final_accuracy"]), None)
        out[f"{name} vs BSP cdd, 20 Mbit/s, 2 hosts"] = (
            f"accuracy {100 * diloco['final_accuracy']:.2f} vs {100 * cdd['final_accuracy']:.2f} at equal epochs; "
            f"{cdd['bytes_per_worker'] / diloco['bytes_per_worker']:.1f}x fewer bytes; "
            + (f"{cdd['train_s'] / reach:.1f}x less time to cdd's final accuracy" if reach else
               "cdd's final accuracy not reached"))
    base = find(results, "goals", "BSP cdd", "50mbit")
    for config in GOALS_COMPRESSION[1:]:
        r = find(results, "goals", config, "50mbit")
        if base and r:
            out[f"{config} vs uncompressed, 50 Mbit/s"] = (
                f"{base['bytes_per_worker_step'] / r['bytes_per_worker_step']:.1f}x fewer bytes per step, steps "
                f"{base['seconds_per_step'] / r['seconds_per_step']:.2f}x faster, accuracy "
                f"{100 * (r['final_accuracy'] - base['final_accuracy']):+.2f} points at equal steps")
    big = [row for row in allreduce if "error" not in row and row["size_mb"] >= 16]
    for row in big:
        tcp = f", TCP {row['tcp']}" if "tcp" in row else ""
        worst = (f" (the worst of {len(row['all_seconds'])}: {100 * row['worst_link_fraction']:.1f} %)"
                 if "worst_link_fraction" in row else "")
        out[f"allreduce {row['size_mb']:g} MB at {row['rate']}{tcp}: {row['what']}"] = \
            f"{100 * row['link_fraction']:.1f} % of the link rate{worst}"
    four = [row for row in allreduce if "error" not in row and row["ranks"] == HOSTS]
    for tcp in dict.fromkeys(row.get("tcp") for row in four):
        ways = {row["what"]: row for row in four if row.get("tcp") == tcp}
        fp32 = ways.get("theanompi BSP exchanger")
        for what in (w for w in ways if "fp16" in w and fp32):
            half = ways[what]
            out[f"allreduce {half['size_mb']:g} MB at {half['rate']}, {HOSTS} hosts"
                + (f", TCP {tcp}" if tcp else "") + f": {what}"] = (
                f"{fp32['seconds'] / half['seconds']:.2f}x faster than fp32, "
                f"{100 * half['link_fraction']:.1f} % of the link rate (fp32: {100 * fp32['link_fraction']:.1f} %)")
    mixed = {r["config"]: r for r in results.values() if r.get("part") == "mixed" and "error" not in r}
    if "BSP cdd" in mixed:
        others = {c: r["seconds_to_target"] for c, r in mixed.items() if r["rule"] != "BSP" and r["seconds_to_target"]}
        bsp = mixed["BSP cdd"]["seconds_to_target"]
        if others and bsp:
            best = min(others, key=lambda c: others[c])
            out["mixed links: best non-BSP rule vs BSP cdd"] = f"{best}: {bsp / others[best]:.1f}x sooner to target"
        elif others:
            out["mixed links: best non-BSP rule vs BSP cdd"] = "BSP cdd did not reach the target"
    return out


def plot(results: dict[str, dict], rates: list[str], path: Path) -> bool:
    """The rules part's figures, drawn to ``path``; False (nothing drawn) without rules sessions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = [m for m in MODELS if any(r.get("model") == m and r.get("part") == "rules" for r in results.values())]
    if not models:
        return False
    fig, axes = plt.subplots(3, len(models), figsize=(6 * len(models), 11), squeeze=False, constrained_layout=True)
    x = {rate: rate_bits(rate) / 1e6 for rate in rates}
    xlabel = "link rate, Mbit/s (10 000: unlimited)"
    for col, model in enumerate(models):
        for config in CONFIGS:
            runs = [find(results, "rules", config, rate) for rate in rates]
            points = [(x[rate], r) for rate, r in zip(rates, runs) if r and r["model"] == model]
            if not points:
                continue
            reached = [(xv, r["seconds_to_target"]) for xv, r in points if r["seconds_to_target"]]
            if reached:
                axes[0][col].plot(*zip(*reached), marker="o", label=config)
            for row, key, scale in ((1, "seconds_per_step", 1.0), (2, "bytes_per_worker", 1e-6)):
                axes[row][col].plot([xv for xv, _ in points], [r[key] * scale for _, r in points], marker="o",
                                    label=config)
        target = next(r["target"] for r in results.values() if r.get("model") == model and "target" in r)
        axes[0][col].set(title=f"{model}: seconds to {100 * target:.0f} % (4 hosts; none: not reached)",
                         xscale="log", xlabel=xlabel, ylabel="seconds")
        axes[1][col].set(title=f"{model}: seconds per step (training time / steps per worker)", xscale="log",
                         yscale="log", xlabel=xlabel, ylabel="seconds")
        axes[2][col].set(title=f"{model}: MB sent per worker", xscale="log", yscale="log", xlabel=xlabel,
                         ylabel="MB")
        for ax in axes[:, col]:
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def machine() -> dict:
    sys.path.insert(0, str(HERE))
    from asgd_staleness import machine as describe

    return describe()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a few minutes: the MLP, 2 epochs, unlimited and 100mbit, "
                        "BSP cdd, BSP avg, EASGD")
    parser.add_argument("--parts", default="rules,mixed,goals,allreduce")
    parser.add_argument("--rates", default=None, help=f"comma list (default {','.join(RATES)})")
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--configs", default=None, help=f"comma list of {', '.join(CONFIGS)}")
    parser.add_argument("--dry-run", action="store_true", help="print the sessions and the estimated duration only")
    parser.add_argument("--markdown", metavar="JSON", help="print a result file's tables in Markdown, run nothing")
    parser.add_argument("--json", default=str(HERE / "results" / "slow_links.json"))
    parser.add_argument("--png", default=str(HERE / "results" / "slow_links.png"))
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    args.rates = args.rates or ("unlimited,100mbit" if args.quick else ",".join(RATES))
    args.models = args.models or ("mlp" if args.quick else ",".join(MODELS))
    args.configs = args.configs or ",".join(QUICK_CONFIGS if args.quick else CONFIGS)
    unknown = [c for c in args.configs.split(",") if c not in CONFIGS] + \
        [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        sys.exit(f"slow_links: unknown configuration or model: {', '.join(unknown)}")
    plan = make_plan(args)
    for config, missing in plan.skipped.items():
        print(f"slow_links: skipped {config!r}: {', '.join(missing)} is not an option of this theanompi "
              "(issue 36 items 3-4 not merged)")
    parts = args.parts.split(",")
    print(f"slow_links: {len(plan.sessions)} sessions" + (" and the allreduce part" if "allreduce" in parts else "")
          + f"; estimated {plan.estimate_s() / 60 + (ALLREDUCE_MINUTES if 'allreduce' in parts else 0):.0f} min",
          flush=True)
    if args.dry_run:
        for _, label, model, config, rate, rate_of, hosts, epochs in plan.sessions:
            print(f"  {label}: ~{estimate_s(MODELS[model], CONFIGS[config], rate, epochs, rate_of, hosts):.0f} s")
        return
    if os.geteuid() != 0:
        sys.exit("slow_links: needs root (tools/netsim.py makes the hosts)")
    load_before, started = os.getloadavg(), time.time()
    results: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="theanompi-slow-links-", dir="/var/tmp"))  # every host sees it
    try:
        for part, label, model, config, rate, rate_of, hosts, epochs in plan.sessions:
            target = MODELS[model].quick_target if args.quick else MODELS[model].target
            r = run_session(work, label, MODELS[model], CONFIGS[config], rate, rate_of, hosts, epochs, target)
            results[label] = {"part": part, "model": model, "config": config, "rate": rate, **r}
            shown = r.get("error") or (f"{fmt_s(r['seconds_to_target'])} s to target, final "
                                       f"{100 * r['final_accuracy']:.2f} %, {r['bytes_per_worker'] / 1e6:.1f} MB "
                                       f"per worker, compute {100 * (r['compute_share'] or 0):.0f} %")
            print(f"  {label}: {shown} ({r['session_s']:.0f} s)", flush=True)
        allreduce = run_allreduce(work, args.quick) if "allreduce" in parts else []
    finally:
        failed = any("error" in r for r in results.values())
        if failed:
            print(f"slow_links: the failed sessions' logs are in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    rates = args.rates.split(",")
    for part in ("rules", "mixed"):
        for model in MODELS:
            print_table(results, part, model, [(QUICK_MIXED if args.quick else MIXED)[0]] if part == "mixed"
                        else rates)
    measured = goals(results, allreduce)
    print("\ngoals, as measured:")
    for goal, value in measured.items():
        print(f"  {goal}: {value}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "quick": args.quick, "hosts": HOSTS, "models": {k: vars(v) for k, v in MODELS.items()},
        "configs": {k: {"rule": c.rule, **c.keys} for k, c in CONFIGS.items()},
        "skipped": plan.skipped, "machine": {**machine(), "load_before": load_before, "load_after": os.getloadavg()},
        "wall_s": time.time() - started, "sessions": results, "allreduce": allreduce, "goals": measured},
        indent=2, default=str))
    drawn = plot(results, rates, Path(args.png))
    print(f"json: {args.json}; plot: {args.png if drawn else 'none (no rules sessions)'}; "
          f"{(time.time() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
