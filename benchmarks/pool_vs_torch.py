"""Max-pool forward + backward: theanompi's Pool2d/Pool2dGrad ops vs PyTorch CPU.

For each shape (the two pools of ``cnn_step_vs_torch.py`` by default) one
pytensor function returns ``max_pool2d(x)`` and the gradient of
``sum(pool(x) * gy)`` with respect to x; torch runs ``F.max_pool2d`` forward
and ``backward(gy)``. Both use ``--threads`` threads and take turns in
``--rounds`` blocks of ``--block`` calls (medians of all calls); the outputs
are compared before timing. ``ours_1thread`` is ours with OpenMP held to one
thread (the effect of sharing planes out over threads). Prints a table, writes JSON with ``ratio_vs_torch``.

Example
-------
    .venv/bin/python benchmarks/pool_vs_torch.py --rounds 6
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cnn_step_vs_torch import machine_info, set_threads, time_interleaved  # noqa: E402

SHAPES = ((128, 32, 32, 32), (128, 64, 16, 16))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--pause", type=float, default=0.2)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "pool.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    import theanompi  # noqa: F401  (pytensor configuration)
    from theanompi.models.ops import max_pool2d

    x_var, gy_var = pt.tensor4("x", dtype="float32"), pt.tensor4("gy", dtype="float32")
    y_var = max_pool2d(x_var, 2)
    ours = pytensor.function([x_var, gy_var], [y_var, pytensor.grad((y_var * gy_var).sum(), x_var)])

    gomp = ctypes.CDLL("libgomp.so.1")  # the OpenMP runtime our C ops link (torch bundles its own)

    def ours_one_thread(x, gy):
        gomp.omp_set_num_threads(1)
        try:
            return ours(x, gy)
        finally:
            gomp.omp_set_num_threads(args.threads)

    def torch_fwd_bwd(xt, gyt):
        y = torch.nn.functional.max_pool2d(xt, 2)
        y.backward(gyt)
        return y

    rng = np.random.default_rng(0)
    rows = {}
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype("float32")
        gy = rng.standard_normal((*shape[:2], shape[2] // 2, shape[3] // 2)).astype("float32")
        xt = torch.from_numpy(x).requires_grad_(True)
        gyt = torch.from_numpy(gy)
        y, dx = ours(x, gy)
        yt = torch_fwd_bwd(xt, gyt)
        assert np.array_equal(y, yt.detach().numpy()) and np.array_equal(dx, xt.grad.numpy())
        times = time_interleaved({"ours": (ours, (x, gy)), "ours_1thread": (ours_one_thread, (x, gy)),
                                  "torch": (torch_fwd_bwd, (xt, gyt))},
                                 warmup=3, rounds=args.rounds, block=args.block, pause=args.pause)
        med = {name: statistics.median(t) for name, t in times.items()}
        key = "x".join(map(str, shape))
        rows[key] = {"ms_median": med, "ratio_vs_torch": med["ours"] / med["torch"],
                     "ms_min": {n: min(t) for n, t in times.items()}, "ms_max": {n: max(t) for n, t in times.items()}}
        print(f"max_pool2d 2x2 fwd+bwd {key:<16} ours {med['ours']:6.2f} ms (1 thread {med['ours_1thread']:6.2f})  "
              f"torch {med['torch']:6.2f} ms  "
              f"ratio {med['ours'] / med['torch']:.2f}x")
    result = {"benchmark": "pool_vs_torch", "threads": args.threads, "rounds": args.rounds, "block": args.block,
              "shapes": rows, "ratio_vs_torch": max(r["ratio_vs_torch"] for r in rows.values()),
              "machine": machine_info(), "versions": {"torch": torch.__version__, "pytensor": pytensor.__version__}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
