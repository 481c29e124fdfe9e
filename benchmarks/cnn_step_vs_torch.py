"""CIFAR-size CNN training step: theanompi conv/pool ops in pytensor vs PyTorch CPU.

Network (both frameworks, identical initial weights)::

    x (128, 3, 32, 32) -> conv3x3(32, pad 1) + relu -> maxpool 2
                       -> conv3x3(64, pad 1) + relu -> maxpool 2
                       -> dense(4096 -> 10) -> softmax cross-entropy, plain SGD

Both are timed in one process with the same thread count (``--threads``,
default 2: OPENBLAS/OMP threads for pytensor, ``torch.set_num_threads`` for
torch): ``--warmup`` steps, then the median of ``--steps`` steps each. The
first-step losses of the two are compared as a check that they compute the
same thing. Prints a table and writes JSON (``--json``).

Example
-------
    .venv/bin/python benchmarks/cnn_step_vs_torch.py --steps 20
    .venv/bin/python benchmarks/cnn_step_vs_torch.py --profile   # pytensor per-op profile

Exit status 2 when torch is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "cnn_step.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    p.add_argument("--profile", action="store_true", help="print pytensor's per-op profile")
    args = p.parse_args(argv)
    if args.steps < 10:
        p.error("--steps must be >= 10")
    return args


def set_threads(n: int) -> None:
    """Pin BLAS/OpenMP thread pools to n threads (before numpy/torch load them)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def init_params(rng):
    """Initial weights shared by both frameworks (He-uniform-ish, float32)."""
    import numpy as np

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype("float32")

    return {
        "W1": uniform((32, 3, 3, 3), 27), "b1": uniform((32,), 27),
        "W2": uniform((64, 32, 3, 3), 288), "b2": uniform((64,), 288),
        "Wd": uniform((4096, 10), 4096), "bd": uniform((10,), 4096),
    }


def build_pytensor_step(params, lr, profile=False):
    """Compile ``step(x, y) -> loss`` that also applies the SGD update in place."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.tensor.special import log_softmax

    from theanompi.models.ops import conv2d, max_pool2d

    shared = {k: pytensor.shared(v, name=k) for k, v in params.items()}
    x = pt.tensor4("x", dtype="float32")
    y = pt.ivector("y")

    # The conv bias goes inside the op: pytensor's broadcast add fused with relu
    # (two 4-D outputs) and its (0, 2, 3) reduction gradient cost ~45 ms/step here.
    h = pt.maximum(conv2d(x, shared["W1"], pad=1, bias=shared["b1"]), 0)
    h = max_pool2d(h, 2)
    h = pt.maximum(conv2d(h, shared["W2"], pad=1, bias=shared["b2"]), 0)
    h = max_pool2d(h, 2)
    logits = h.flatten(2) @ shared["Wd"] + shared["bd"]
    loss = -log_softmax(logits, axis=1)[pt.arange(y.shape[0]), y].mean()
    grads = pytensor.grad(loss, list(shared.values()))
    updates = [(p, p - pt.constant(lr, dtype="float32") * g) for p, g in zip(shared.values(), grads)]
    return pytensor.function([x, y], loss, updates=updates, profile=True if profile else None)


def build_torch_step(params, lr):
    """The same network and SGD step in PyTorch; returns ``step(x, y) -> loss``."""
    import torch
    from torch import nn

    net = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4096, 10),
    )
    with torch.no_grad():
        net[0].weight.copy_(torch.from_numpy(params["W1"]))
        net[0].bias.copy_(torch.from_numpy(params["b1"]))
        net[3].weight.copy_(torch.from_numpy(params["W2"]))
        net[3].bias.copy_(torch.from_numpy(params["b2"]))
        net[7].weight.copy_(torch.from_numpy(params["Wd"].T.copy()))
        net[7].bias.copy_(torch.from_numpy(params["bd"]))
    opt = torch.optim.SGD(net.parameters(), lr=lr)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return float(loss)

    return step


def time_steps(step, args, warmup, steps):
    """Milliseconds per call of ``step(*args)`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        step(*args)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(*args)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def main(argv=None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    try:
        import torch
    except ImportError:
        print(
            "PyTorch is not installed; install the CPU build with\n"
            "  .venv/bin/pip install torch==2.13.0\n"
            "and run this benchmark again.",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(args.threads)

    sys.path.insert(0, str(ROOT))
    from theanompi.backend import configure_pytensor

    configure_pytensor()
    import numpy as np
    import pytensor

    rng = np.random.default_rng(0)
    params = init_params(rng)
    x = rng.standard_normal((args.batch, 3, 32, 32)).astype("float32")
    y = rng.integers(0, 10, size=args.batch).astype("int32")

    t0 = time.perf_counter()
    ours = build_pytensor_step(params, args.lr, profile=args.profile)
    compile_s = time.perf_counter() - t0
    theirs = build_torch_step(params, args.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype("int64"))

    # Same weights, same data: the first losses must agree (float32 tolerance).
    loss_ours, loss_torch = float(ours(x, y)), theirs(xt, yt)

    ours_ms = time_steps(ours, (x, y), args.warmup, args.steps)
    torch_ms = time_steps(theirs, (xt, yt), args.warmup, args.steps)
    med_ours, med_torch = statistics.median(ours_ms), statistics.median(torch_ms)
    ratio = med_ours / med_torch

    print(f"CNN training step, batch {args.batch}x3x32x32, {args.threads} threads, "
          f"median of {args.steps} steps after {args.warmup} warm-up")
    print(f"{'impl':<22}{'ms/step':>10}{'min':>10}{'max':>10}")
    print(f"{'theanompi (pytensor)':<22}{med_ours:>10.1f}{min(ours_ms):>10.1f}{max(ours_ms):>10.1f}")
    print(f"{'torch ' + torch.__version__:<22}{med_torch:>10.1f}{min(torch_ms):>10.1f}{max(torch_ms):>10.1f}")
    print(f"ratio ours/torch: {ratio:.2f}x   first-step loss: ours {loss_ours:.6f}, "
          f"torch {loss_torch:.6f}   (pytensor compile {compile_s:.1f} s)")

    result = {
        "benchmark": "cnn_step_vs_torch",
        "batch": args.batch,
        "threads": args.threads,
        "warmup": args.warmup,
        "steps": args.steps,
        "ours_ms_median": med_ours,
        "torch_ms_median": med_torch,
        "ratio": ratio,
        "ours_ms": ours_ms,
        "torch_ms": torch_ms,
        "first_loss": {"ours": loss_ours, "torch": loss_torch},
        "compile_s": compile_s,
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "pytensor": pytensor.__version__,
            "torch": torch.__version__,
        },
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    if args.profile:
        ours.profile.summary()
    return 0


if __name__ == "__main__":
    sys.exit(main())
