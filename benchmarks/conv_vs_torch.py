"""Conv2d forward + both gradients: theanompi's ops vs PyTorch CPU, per layer shape.

For each shape (the CNN benchmark's and ResNet-20's convolutions) one pytensor
function returns ``conv2d(x, W)`` and the gradients of ``sum(conv * gy)`` with
respect to x and W; torch runs ``F.conv2d`` forward and ``backward(gy)``.
``ours_1thread_chunks`` holds OpenMP to one thread, so image chunks run in
order on multi-threaded GEMMs (the kernels before chunk threading). Same
threads, interleaved blocks, medians; outputs compared before timing.

Example
-------
    .venv/bin/python benchmarks/conv_vs_torch.py --rounds 4
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

# (batch, in channels, size, out channels, stride)
SHAPES = ((128, 3, 32, 32, 1), (128, 32, 16, 64, 1), (128, 16, 32, 16, 1), (128, 32, 16, 32, 1),
          (128, 64, 8, 64, 1))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--block", type=int, default=3)
    p.add_argument("--pause", type=float, default=0.2)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "conv.json")
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
    from theanompi.models.ops import conv2d

    x_var, w_var, gy_var = (pt.tensor4(n, dtype="float32") for n in ("x", "W", "gy"))
    y_var = conv2d(x_var, w_var, pad=1)
    ours = pytensor.function([x_var, w_var, gy_var], [y_var, *pytensor.grad((y_var * gy_var).sum(), [x_var, w_var])])
    gomp = ctypes.CDLL("libgomp.so.1")

    def ours_serial_chunks(*a):
        gomp.omp_set_num_threads(1)
        try:
            return ours(*a)
        finally:
            gomp.omp_set_num_threads(args.threads)

    def torch_step(xt, wt, gyt):
        y = torch.nn.functional.conv2d(xt, wt, padding=1)
        y.backward(gyt)
        return y

    rng = np.random.default_rng(0)
    rows = {}
    for n, c, size, o, _stride in SHAPES:
        x = rng.standard_normal((n, c, size, size)).astype("float32")
        w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
        gy = rng.standard_normal((n, o, size, size)).astype("float32")
        xt, wt = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(w).requires_grad_(True)
        gyt = torch.from_numpy(gy)
        got = ours(x, w, gy)
        yt = torch_step(xt, wt, gyt)
        for a, b in zip(got, (yt.detach().numpy(), xt.grad.numpy(), wt.grad.numpy())):
            np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3 * float(np.abs(b).max()))
        times = time_interleaved({"ours": (ours, (x, w, gy)), "ours_1thread_chunks": (ours_serial_chunks, (x, w, gy)),
                                  "torch": (torch_step, (xt, wt, gyt))},
                                 warmup=2, rounds=args.rounds, block=args.block, pause=args.pause)
        med = {name: statistics.median(t) for name, t in times.items()}
        key = f"{n}x{c}x{size}x{size}->{o}"
        rows[key] = {"ms_median": med, "ratio_vs_torch": med["ours"] / med["torch"],
                     "ratio_serial_chunks_vs_torch": med["ours_1thread_chunks"] / med["torch"]}
        print(f"conv3x3 fwd+bwd {key:<22} ours {med['ours']:7.2f} ms (chunks in order "
              f"{med['ours_1thread_chunks']:7.2f})  torch {med['torch']:7.2f} ms  "
              f"ratio {med['ours'] / med['torch']:.2f}x",
              flush=True)
    result = {"benchmark": "conv_vs_torch", "threads": args.threads, "rounds": args.rounds, "block": args.block,
              "shapes": rows, "machine": machine_info(),
              "versions": {"torch": torch.__version__, "pytensor": pytensor.__version__}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
