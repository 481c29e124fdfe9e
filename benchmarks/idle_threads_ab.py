"""Idle-thread policies, side by side: our CNN and ResNet-20 training steps under each setting of
OMP_WAIT_POLICY / OPENBLAS_THREAD_TIMEOUT (theanompi's default is both; a variable set, even empty, is
left alone, so the library defaults are reached by setting it empty).

Each policy has to be in place before libgomp and OpenBLAS load, so every (model, policy) runs in a
fresh process: build, compile, 2 warm-up steps, then ``--steps`` timed steps (median). Policies
alternate within each of ``--rounds`` rounds. Prints ms/step per policy and its ratio to the library
defaults; writes JSON.

Example
-------
    .venv/bin/python benchmarks/idle_threads_ab.py --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: policy -> the variables set to "" (the library's default) in that policy's process
POLICIES = {"both (theanompi)": (), "OPENBLAS_THREAD_TIMEOUT=4 only": ("OMP_WAIT_POLICY",),
            "OMP_WAIT_POLICY=PASSIVE only": ("OPENBLAS_THREAD_TIMEOUT",),
            "library defaults": ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}


def child(model: str, steps: int) -> None:
    """Time ``steps`` training steps of ``model`` in this process; print JSON."""
    import time

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from cnn_step_vs_torch import build_pytensor_step, init_params, set_threads

    set_threads(2)
    import numpy as np

    import theanompi  # noqa: F401  (the policy is chosen here, before the C ops load their libraries)

    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 3, 32, 32)).astype("float32")
    y = rng.integers(0, 10, 128).astype("int32")
    if model == "cnn":
        step = build_pytensor_step(init_params(rng), 0.01)
    else:
        from resnet_step_vs_torch import build_model

        net = build_model(128)
        net.compile_iter_fns(None)
        step = net._train_fn
    for _ in range(2):
        step(x, y)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step(x, y)
        times.append(1000 * (time.perf_counter() - start))
    print(json.dumps({"ms_median": statistics.median(times), "ms_min": min(times)}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="cnn,resnet20")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "idle_threads.json")
    p.add_argument("--child", choices=("cnn", "resnet20"), help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=0, help="timed steps per process (default: 20 cnn, 8 resnet20)")
    args = p.parse_args(argv)
    if args.child:
        child(args.child, args.steps or (20 if args.child == "cnn" else 8))
        return 0
    results: dict = {}
    for model in args.models.split(","):
        runs = {name: [] for name in POLICIES}
        for _ in range(args.rounds):
            for name, emptied in POLICIES.items():
                env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
                env.update({var: "" for var in emptied})
                env["PYTHONPATH"] = str(ROOT)
                proc = subprocess.run([sys.executable, __file__, "--child", model, "--steps", str(args.steps)],
                                      env=env, capture_output=True, text=True, timeout=1800)
                if proc.returncode != 0:
                    raise SystemExit(f"{model} under {name} failed:\n{proc.stderr[-2000:]}")
                runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1])["ms_median"])
        base = statistics.median(runs["library defaults"])
        results[model] = {name: {"ms_medians": v, "ms": statistics.median(v), "vs_library_defaults":
                                 statistics.median(v) / base} for name, v in runs.items()}
        for name, row in results[model].items():
            print(f"{model:<9} {name:<32} {row['ms']:8.1f} ms/step  {row['vs_library_defaults']:.2f}x of defaults")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"benchmark": "idle_threads_ab", "rounds": args.rounds, "models": results,
                                     "loadavg_1min": os.getloadavg()[0]}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
