"""Elastic sessions: how long a restart after ``kill -9`` of one of 3 workers takes, and what a worker's state
costs to send when a session resumes (a joiner's included).

    python benchmarks/elastic_restart.py [--quick] [--reps 5] [--rule BSP|EASGD|GOSGD|ASGD] [--hidden 256]
                                         [--json PATH] [--note TEXT]

Each repetition is a real session (``tmlauncher``): the digits MLP (``MODEL_HIDDEN``) on 3 workers (EASGD: a server
and 3), ``CHECKPOINT_EVERY_ITERS=5``, ``MAX_RESTARTS=1``, ``MIN_WORKERS=2``, ``ELASTIC_COOLDOWN=4``. Once the first
checkpoint is written, worker rank 1 is killed with SIGKILL; the session restarts with the 2 others, and when the
killed worker's device is back from its cooldown it grows to 3 again at its next checkpoint. Measured, per run:

* ``restart_s``: from the kill to the end of the first training step after the restart (the model file logs each
  step's end; this is the issue's goal: within 10 s + the model's compile-from-cache time);
* ``compile_s``: a restarted session's model build and compile, from the caches (the last session's, the one grown
  back to 3 workers: the one after the loss may stop for growth before it records it);
* ``launcher_s``: from the kill to the launcher's restart line (detecting the loss, ending the session, planning);
* ``state_bytes`` / ``joiner_ratio``: what worker 0 sends each worker from the checkpoint when the session grows
  back (its log line), against the model's parameter bytes -- a joiner's share;
* ``checkpoint_bytes``: the checkpoint file (every worker's parameters and state): what each worker would read were
  the state not sent by worker 0.

Timing runs go under the shared lock: ``flock /work/wt/bench.lock python benchmarks/elastic_restart.py``. The JSON
records the machine (CPU model, cores) and the load average before and after. ``--quick``: one repetition (about a
minute on 2 cores); the default 5 repetitions take about 5 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from theanompi.models.mlp import MLP

HERE = Path(__file__).resolve().parent
TMLAUNCHER = str(Path(sys.executable).parent / "tmlauncher")
_SHARE_RE = re.compile(r"each worker's state from the checkpoint: at most (\d+) bytes \(([\d.]+) x the model's "
                       r"(\d+) bytes of parameters; a worker that joins: ([^)]*)\)")


class TimedMLP(MLP):
    """The digits MLP, logging the end of every training step (and the session's number of workers)."""

    def train_iter(self, count, recorder):
        out = super().train_iter(count, recorder)
        time.sleep(0.05)  # a step long enough to kill a worker mid-run on a fast machine
        if self.config.run_dir is not None:
            folder = Path(self.config.run_dir) / "steps"
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / f"{os.getpid()}.jsonl", "a") as f:
                f.write(json.dumps({"iteration": recorder.iteration, "workers": self.config.size,
                                    "rank": self.config.rank, "time": time.time()}) + "\n")
        return out


def machine() -> dict:
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    model = next((line.split(":", 1)[1].strip() for line in lscpu if line.startswith("Model name")), "")
    return {"cpu": model, "cores": os.cpu_count()}


def one_run(rule: str, hidden: int, work: Path) -> dict:
    run = work / "run"
    devices = "cpu0,cpu1,cpu2,cpu3" if rule == "EASGD" else "cpu0,cpu1,cpu2"
    cfg = work / "s.cfg"
    cfg.write_text("\n".join(f"{k}={v}" for k, v in {
        "RULE": rule, "MODELFILE": str(Path(__file__).resolve()), "MODELCLASS": "TimedMLP", "DEVICES": devices,
        "N_EPOCHS": 4, "MODEL_HIDDEN": hidden, "MODEL_BATCH_SIZE": 20, "PLOTS": "false", "RUN_DIR": run,
        "AVERAGE_WEIGHTS": "none",
        "CHECKPOINT_EVERY_ITERS": 5, "MAX_RESTARTS": 1, "MIN_WORKERS": 2, "ELASTIC_COOLDOWN": 4}.items()) + "\n")
    proc = subprocess.Popen([TMLAUNCHER, f"-cfg={cfg}"], cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.time() + 300
    while not (run / "checkpoints" / "latest").exists():
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"no checkpoint: {proc.communicate()[1][-2000:]}")
        time.sleep(0.05)
    time.sleep(0.5)
    checkpoint_bytes = max(p.stat().st_size for p in (run / "checkpoints").glob("ckpt-*.hkl"))
    os.kill(int((run / "ranks" / "rank-2.pid").read_text()), signal.SIGKILL)  # EASGD: its worker 1
    killed = time.time()
    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the session failed: {err[-2000:]}")
    summary = json.loads((run / "summary.json").read_text())
    lost = next(r for r in summary["restarts"] if r["reason"] == "lost")
    rows = [json.loads(line) for path in (run / "steps").glob("*.jsonl") for line in path.read_text().splitlines()]
    after = [r["time"] for r in rows if r["time"] > lost["unix_time"] and r["workers"] == 2]
    shares = _SHARE_RE.findall(out)
    # the model's build and compile from the caches, in a restarted session (the last one: grown back to 3)
    compile_s = max(w.get("compile_s", 0.0) for w in summary["per_worker"])
    return {"restart_s": round(min(after) - killed, 3), "launcher_s": round(lost["unix_time"] - killed, 3),
            "compile_s": compile_s, "restarts": [(r["reason"], r["workers_before"], r["workers_after"])
                                                   for r in summary["restarts"]],
            "state_bytes": [int(s[0]) for s in shares], "model_bytes": int(shares[-1][2]) if shares else None,
            "joiner_ratio": shares[-1][3] if shares else None, "checkpoint_bytes": checkpoint_bytes,
            "final_val_accuracy": summary["final_val_accuracy"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repetition")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--rule", default="BSP", choices=["BSP", "EASGD", "GOSGD", "ASGD"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--json", default=str(HERE / "results" / "elastic_restart.json"))
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    load_before = os.getloadavg()
    runs = []
    for _ in range(1 if args.quick else args.reps):
        with tempfile.TemporaryDirectory(prefix="theanompi-elastic-bench-") as work:
            runs.append(one_run(args.rule, args.hidden, Path(work)))
            print(json.dumps(runs[-1]), flush=True)
    result = {"benchmark": "elastic_restart", "rule": args.rule, "hidden": args.hidden, "runs": runs,
              "restart_s_median": sorted(r["restart_s"] for r in runs)[len(runs) // 2],
              "machine": {**machine(), "load_before": load_before, "load_after": os.getloadavg()}, "note": args.note}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
