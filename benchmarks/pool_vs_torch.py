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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._op_bench import one_omp_thread, parse_args, time_variants, write_result
from benchmarks.cnn_step_vs_torch import set_threads

SHAPES = ((128, 32, 32, 32), (128, 64, 16, 16))


def main(argv=None) -> int:
    args = parse_args(__doc__, "pool.json", rounds=6, block=10, argv=argv)
    set_threads(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    import theanompi  # noqa: F401  (pytensor configuration)
    from theanompi.backend.ops import max_pool2d

    x_var, gy_var = pt.tensor4("x", dtype="float32"), pt.tensor4("gy", dtype="float32")
    y_var = max_pool2d(x_var, 2)
    ours = pytensor.function([x_var, gy_var], [y_var, pytensor.grad((y_var * gy_var).sum(), x_var)])

    ours_one_thread = one_omp_thread(ours, args.threads)

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
        key = "x".join(map(str, shape))
        rows[key] = row = time_variants({"ours": (ours, (x, gy)), "ours_1thread": (ours_one_thread, (x, gy)),
                                         "torch": (torch_fwd_bwd, (xt, gyt))}, args, warmup=3)
        med = row["ms_median"]
        print(f"max_pool2d 2x2 fwd+bwd {key:<16} ours {med['ours']:6.2f} ms (1 thread {med['ours_1thread']:6.2f})  "
              f"torch {med['torch']:6.2f} ms  "
              f"ratio {med['ours'] / med['torch']:.2f}x")
    write_result("pool_vs_torch", args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
