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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._op_bench import one_omp_thread, parse_args, time_variants, write_result
from benchmarks.cnn_step_vs_torch import set_threads

# (batch, in channels, size, out channels, stride)
SHAPES = ((128, 3, 32, 32, 1), (128, 32, 16, 64, 1), (128, 16, 32, 16, 1), (128, 32, 16, 32, 1),
          (128, 64, 8, 64, 1))


def main(argv=None) -> int:
    args = parse_args(__doc__, "conv.json", rounds=4, block=3, argv=argv)
    set_threads(args.threads)
    import torch

    torch.set_num_threads(args.threads)
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    import theanompi  # noqa: F401  (pytensor configuration)
    from theanompi.backend.ops import conv2d

    x_var, w_var, gy_var = (pt.tensor4(n, dtype="float32") for n in ("x", "W", "gy"))
    y_var = conv2d(x_var, w_var, pad=1)
    ours = pytensor.function([x_var, w_var, gy_var], [y_var, *pytensor.grad((y_var * gy_var).sum(), [x_var, w_var])])
    ours_serial_chunks = one_omp_thread(ours, args.threads)

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
        key = f"{n}x{c}x{size}x{size}->{o}"
        variants = {"ours": (ours, (x, w, gy)), "ours_1thread_chunks": (ours_serial_chunks, (x, w, gy)),
                    "torch": (torch_step, (xt, wt, gyt))}
        rows[key] = row = time_variants(variants, args, warmup=2)
        med = row["ms_median"]
        print(f"conv3x3 fwd+bwd {key:<22} ours {med['ours']:7.2f} ms (chunks in order "
              f"{med['ours_1thread_chunks']:7.2f})  torch {med['torch']:7.2f} ms  "
              f"ratio {med['ours'] / med['torch']:.2f}x",
              flush=True)
    write_result("conv_vs_torch", args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
