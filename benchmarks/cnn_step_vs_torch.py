"""CIFAR-size CNN training step: theanompi conv/pool ops in pytensor vs PyTorch CPU.

Network (both frameworks, identical initial weights)::

    x (128, 3, 32, 32) -> conv3x3(32, pad 1) + relu -> maxpool 2
                       -> conv3x3(64, pad 1) + relu -> maxpool 2
                       -> dense(4096 -> 10) -> softmax cross-entropy, plain SGD

Both are timed in one process with the same thread count (``--threads``,
default 2: OPENBLAS/OMP threads for pytensor, ``torch.set_num_threads`` for
torch). After ``--warmup`` steps each, the implementations take turns in
``--rounds`` rounds of ``--block`` timed steps, so drifting machine load hits
all of them alike. Before every block the process sleeps ``--pause`` seconds
(OpenBLAS worker threads busy-wait ~0.1 s after their last call and would
otherwise steal a core from torch's first steps) and runs one untimed step.
The table reports the median over all timed steps (>= 10 each).

pytensor is timed twice: with its default linker (``cvm``, which frees every
intermediate array after its last use, so each step re-allocates, and
page-faults, ~100 MB) and with ``cvm_nogc`` (pytensor's ``allow_gc=False``:
intermediates keep their storage between calls; more memory, less time).
The first-step losses are compared as a check that the implementations
compute the same thing. Prints a table and writes JSON (``--json``).

Example
-------
    .venv/bin/python benchmarks/cnn_step_vs_torch.py --rounds 6 --block 5
    .venv/bin/python benchmarks/cnn_step_vs_torch.py --profile   # + pytensor per-op profile

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
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--block", type=int, default=5, help="timed steps per implementation per round")
    p.add_argument("--pause", type=float, default=0.3, help="seconds of idle before each block")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    p.add_argument("--profile", action="store_true",
                   help="print pytensor's per-op profile (of the cvm_nogc function)")
    add_clock_option(p)
    args = p.parse_args(argv)
    check_clock(p, args)
    if args.rounds * args.block < 10:
        p.error("--rounds * --block must be >= 10 (timed steps per implementation)")
    return args


def set_threads(n: int) -> None:
    """Pin BLAS/OpenMP thread pools to n threads (before numpy/torch load them)."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (or platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_info() -> dict:
    """Where a benchmark ran: platform, CPU model and count, load, and the BLAS kernels in use."""
    from theanompi.backend.pytensor_config import blas_report

    return {"platform": platform.platform(), "cpu_model": cpu_model(), "cpus": os.cpu_count(),
            "loadavg_1min": os.getloadavg()[0], "blas": blas_report()}


def init_params(rng):
    """Initial weights shared by both frameworks (torch-default-like uniform, float32)."""
    import numpy as np

    def uniform(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, size=shape).astype("float32")

    return {
        "W1": uniform((32, 3, 3, 3), 27), "b1": uniform((32,), 27),
        "W2": uniform((64, 32, 3, 3), 288), "b2": uniform((64,), 288),
        "Wd": uniform((4096, 10), 4096), "bd": uniform((10,), 4096),
    }


def build_pytensor_step(params, lr, linker="cvm", profile=False):
    """Compile ``step(x, y) -> loss`` that also applies the SGD update in place."""
    import pytensor
    import pytensor.tensor as pt
    from pytensor.compile.mode import Mode

    from theanompi.backend.ops import conv2d, max_pool2d

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
    # log-sum-exp by hand: pytensor's LogSoftmax/Softmax ops run in Python (~2 ms).
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_z = pt.log(pt.exp(shifted).sum(axis=1))
    loss = (log_z - shifted[pt.arange(y.shape[0]), y]).mean()
    grads = pytensor.grad(loss, list(shared.values()))
    updates = [(p, p - pt.constant(lr, dtype="float32") * g) for p, g in zip(shared.values(), grads)]
    mode = Mode(linker=linker, optimizer="fast_run")
    return pytensor.function(
        [x, y], loss, updates=updates, mode=mode, profile=True if profile else None
    )


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
        return float(loss.detach())

    return step


#: ``--clock``: wall-clock seconds, or this process's CPU seconds (one thread only: then the CPU time of the
#: step, which other programs on a shared machine do not lengthen the way they lengthen its wall time)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def add_clock_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="what a step's time is: wall clock, or CPU time of the process (with --threads 1)")


def check_clock(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.clock == "cpu" and args.threads != 1:
        parser.error(f"--clock cpu measures one thread's work: it needs --threads 1, got --threads {args.threads}")


def time_interleaved(steps, warmup, rounds, block, pause, clock="wall"):
    """Per-step milliseconds (on ``CLOCKS[clock]``) for each ``name -> (fn, args)``, taking turns in blocks."""
    now = CLOCKS[clock]
    for fn, fn_args in steps.values():
        for _ in range(warmup):
            fn(*fn_args)
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, (fn, fn_args) in steps.items():
            time.sleep(pause)  # let the other implementation's spinning threads go idle
            fn(*fn_args)  # re-warm
            for _ in range(block):
                t0 = now()
                fn(*fn_args)
                times[name].append((now() - t0) * 1e3)
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
    import numpy as np
    import pytensor

    import theanompi  # noqa: F401  (pytensor's C backend with BLAS; OPENBLAS_CORETYPE)

    rng = np.random.default_rng(0)
    params = init_params(rng)
    x = rng.standard_normal((args.batch, 3, 32, 32)).astype("float32")
    y = rng.integers(0, 10, size=args.batch).astype("int32")

    t0 = time.perf_counter()
    ours = build_pytensor_step(params, args.lr)
    compile_s = time.perf_counter() - t0
    ours_nogc = build_pytensor_step(params, args.lr, linker="cvm_nogc", profile=args.profile)
    theirs = build_torch_step(params, args.lr)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype("int64"))

    # Same weights, same data: the first losses must agree (float32 tolerance).
    # (The two pytensor functions share the weights, so only ``ours`` is checked.)
    first_loss = {"ours": float(ours(x, y)), "torch": theirs(xt, yt)}

    names = {
        "ours": "theanompi (pytensor)",
        "ours_nogc": "theanompi, cvm_nogc",
        "torch": f"torch {torch.__version__}",
    }
    load_before = os.getloadavg()
    times = time_interleaved(
        {"ours": (ours, (x, y)), "ours_nogc": (ours_nogc, (x, y)), "torch": (theirs, (xt, yt))},
        args.warmup, args.rounds, args.block, args.pause, args.clock,
    )
    load_after = os.getloadavg()
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = {name: med[name] / med["torch"] for name in ("ours", "ours_nogc")}

    n_timed = args.rounds * args.block
    print(f"CNN training step, batch {args.batch}x3x32x32, {args.threads} threads, median of "
          f"{n_timed} steps each ({args.rounds} interleaved rounds of {args.block})")
    print(f"{'impl':<24}{'ms/step':>9}{'min':>9}{'max':>9}{'vs torch':>10}")
    for name, label in names.items():
        vs = f"{ratio[name]:.2f}x" if name in ratio else ""
        print(f"{label:<24}{med[name]:>9.1f}{min(times[name]):>9.1f}{max(times[name]):>9.1f}{vs:>10}")
    print(f"first-step loss: ours {first_loss['ours']:.6f}, torch {first_loss['torch']:.6f}; "
          f"pytensor compile {compile_s:.1f} s")
    blas = machine_info()["blas"]
    print(f"BLAS: OpenBLAS {blas['corename']} kernels (OPENBLAS_CORETYPE={blas['coretype']}, "
          f"chosen by {blas['chosen_by']}); CPU: {cpu_model()}")
    print(f"load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} "
          f"({os.cpu_count()} CPUs; other load makes all numbers noisy)")

    result = {
        "benchmark": "cnn_step_vs_torch",
        "batch": args.batch,
        "threads": args.threads,
        "clock": args.clock,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "block": args.block,
        "pause_s": args.pause,
        "ms_median": med,
        "ratio_vs_torch": ratio,
        "ms_all": times,
        "first_loss": first_loss,
        "compile_s": compile_s,
        "env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_NUM_THREADS")},
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "pytensor": pytensor.__version__,
            "torch": torch.__version__,
        },
        "machine": {**machine_info(), "loadavg_1min_before_after": [load_before[0], load_after[0]]},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    if args.profile:
        ours_nogc.profile.summary()
    return 0


if __name__ == "__main__":
    sys.exit(main())
