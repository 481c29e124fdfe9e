"""Conv2d forward + both gradients: theanompi's ops vs PyTorch CPU, per layer shape.

For each 3x3 convolution shape of the CIFAR CNN and of ResNet-20/32 (batch 128, padding 1; ResNet's
stride-2 convolutions included) one pytensor function returns ``conv2d(x, W)`` and the gradients of
``sum(conv * gy)`` with respect to x and W; torch runs ``F.conv2d`` forward and ``backward(gy)``.
``ours_im2col`` is the same function with ``THEANOMPI_CONV_ALGO=im2col``: every convolution on the
im2col + GEMM kernels (the op before the Winograd path). Same threads (``--threads``; 1 and 2 are the
figures in docs/performance.md), interleaved blocks, medians; outputs compared before timing. Each
variant's float32 error (largest absolute difference over the largest absolute value, for y, dx and dW)
against the float64 result of the same op (its im2col path) goes into the JSON as ``error``.

Example
-------
    .venv/bin/python benchmarks/conv_vs_torch.py --threads 1 --json benchmarks/results/conv_1thread.json
    .venv/bin/python benchmarks/conv_vs_torch.py --threads 2
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._op_bench import parse_args, time_variants, with_env, write_result
from benchmarks.cnn_step_vs_torch import set_threads

# (batch, in channels, size, out channels, stride): CNN conv1 and conv2; ResNet conv1, the three stages'
# stride-1 convolutions and the two stride-2 ones opening stages 2 and 3
SHAPES = ((128, 3, 32, 32, 1), (128, 32, 16, 64, 1), (128, 3, 32, 16, 1), (128, 16, 32, 16, 1),
          (128, 32, 16, 32, 1), (128, 64, 8, 64, 1), (128, 16, 32, 32, 2), (128, 32, 16, 64, 2))


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

    def ours_fn(stride, dtype="float32"):
        x_var, w_var, gy_var = (pt.tensor4(n, dtype=dtype) for n in ("x", "W", "gy"))
        y_var = conv2d(x_var, w_var, stride=stride, pad=1)
        grads = pytensor.grad((y_var * gy_var).sum(), [x_var, w_var])
        return pytensor.function([x_var, w_var, gy_var], [y_var, *grads])

    ours_by_stride = {stride: ours_fn(stride) for stride in {shape[-1] for shape in SHAPES}}
    reference_by_stride = {stride: ours_fn(stride, "float64") for stride in ours_by_stride}

    def relative_errors(got, ref):
        return [float(np.abs(a - r).max() / np.abs(r).max()) for a, r in zip(got, ref)]

    def torch_step(xt, wt, gyt, stride):
        y = torch.nn.functional.conv2d(xt, wt, stride=stride, padding=1)
        y.backward(gyt)
        return y

    rng = np.random.default_rng(0)
    rows = {}
    for n, c, size, o, stride in SHAPES:
        ours = ours_by_stride[stride]
        ours_im2col = with_env(ours, "THEANOMPI_CONV_ALGO", "im2col")
        x = rng.standard_normal((n, c, size, size)).astype("float32")
        w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype("float32")
        out = (size - 1) // stride + 1
        gy = rng.standard_normal((n, o, out, out)).astype("float32")
        xt, wt = torch.from_numpy(x).requires_grad_(True), torch.from_numpy(w).requires_grad_(True)
        gyt = torch.from_numpy(gy)
        yt = torch_step(xt, wt, gyt, stride)
        theirs = (yt.detach().numpy(), xt.grad.numpy().copy(), wt.grad.numpy().copy())
        reference = reference_by_stride[stride](*(a.astype("float64") for a in (x, w, gy)))
        error = {"torch": relative_errors(theirs, reference)}
        for name, fn in (("ours", ours), ("ours_im2col", ours_im2col)):
            got = fn(x, w, gy)
            error[name] = relative_errors(got, reference)
            for a, b in zip(got, theirs):
                np.testing.assert_allclose(a, b, rtol=2e-3, atol=2e-3 * float(np.abs(b).max()))
        key = f"{n}x{c}x{size}x{size}->{o}" + (f"/s{stride}" if stride > 1 else "")
        variants = {"ours": (ours, (x, w, gy)), "ours_im2col": (ours_im2col, (x, w, gy)),
                    "torch": (torch_step, (xt, wt, gyt, stride))}
        rows[key] = row = {**time_variants(variants, args, warmup=2), "error": error}
        med = row["ms_median"]
        print(f"conv3x3 fwd+bwd {key:<22} ours {med['ours']:7.2f} ms (im2col {med['ours_im2col']:7.2f})  "
              f"torch {med['torch']:7.2f} ms  ratio {med['ours'] / med['torch']:.2f}x  error y/dx/dW ours "
              f"{'/'.join(f'{e:.0e}' for e in error['ours'])}, im2col "
              f"{'/'.join(f'{e:.0e}' for e in error['ours_im2col'])}", flush=True)
    write_result("conv_vs_torch", args, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
