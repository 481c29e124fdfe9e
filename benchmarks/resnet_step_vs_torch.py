"""ResNet-20 training step (CIFAR-shaped, batch 128): theanompi's zoo model vs PyTorch CPU, and its compile time.

Ours is ``theanompi.models.zoo.resnet.ResNet20`` (option-A shortcuts, batch norm,
momentum SGD with weight decay) compiled as a worker compiles it
(``compile_iter_fns``). Variants, timed in the same process: ``ours`` (the
training function a worker runs), ``ours_nogc`` (the same graph with
pytensor's ``allow_gc=False``), ``ours_graph_bn`` (batch norm built from
generic ops, ``batch_norm_fused=False``: the state before the fused op).
Torch runs the same architecture (``benchmarks/_ddp_worker.resnet``) with
SGD(momentum 0.9, weight decay 1e-4). Same threads (``--threads``), interleaved
blocks, medians (see ``cnn_step_vs_torch.py``). Initial weights differ, so no
loss comparison here (the ops are checked against references in the tests).

Compile time: child processes build and compile the model with an empty
compile cache (cold: every C module is built, the rewritten functions are
stored), then with that cache filled (warm: the functions load from the
function cache, ``theanompi.backend.function_cache``), then warm again with
the function cache off (``warm_rewrite``: pytensor rewrites the graphs, as
every rank did before that cache); each is timed from model construction
to compiled functions. ``warm_first`` is the first process after the cold
one: it also pays pytensor's first look at the newly built modules.

Example
-------
    .venv/bin/python benchmarks/resnet_step_vs_torch.py --rounds 4 --block 3
    .venv/bin/python benchmarks/resnet_step_vs_torch.py --compile-only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cnn_step_vs_torch import (  # noqa: E402
    add_clock_option,
    check_clock,
    machine_info,
    set_threads,
    time_interleaved,
)

DEFAULT_JSON = ROOT / "benchmarks" / "results" / "resnet_step.json"
#: where ``--compile-only`` writes (not over the step timings of a full run)
COMPILE_JSON = ROOT / "benchmarks" / "results" / "resnet_compile.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--block", type=int, default=3)
    p.add_argument("--pause", type=float, default=0.3)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    p.add_argument("--compile-only", action="store_true", help="only the cold/warm compile-time measurement")
    p.add_argument("--skip-compile", action="store_true", help="skip the cold/warm compile-time measurement")
    p.add_argument("--child-compile", action="store_true", help=argparse.SUPPRESS)
    add_clock_option(p)
    args = p.parse_args(argv)
    check_clock(p, args)
    return args


def build_model(batch: int):
    from theanompi.models.contract import WorkerConfig
    from theanompi.models.zoo.resnet import ResNet20

    options = {"data": "synthetic", "batch_size": batch, "train_size": 2 * batch, "val_size": batch}
    return ResNet20(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=options))


def compile_seconds(batch: int) -> dict:
    """Model construction and ``compile_iter_fns`` in this process, in seconds."""
    t0 = time.perf_counter()
    model = build_model(batch)
    t1 = time.perf_counter()
    model.compile_iter_fns(None)
    t2 = time.perf_counter()
    return {"build_s": t1 - t0, "compile_s": t2 - t1, "total_s": t2 - t0}


def measure_compile(batch: int, threads: int) -> dict:
    """Cold (empty cache), warm and warm-without-function-cache compile times, each in a fresh interpreter."""
    out = {}
    with tempfile.TemporaryDirectory(prefix="tmpi-cache-") as cache:
        env = {**os.environ, "THEANOMPI_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        env.pop("PYTENSORRC", None)
        env.pop("THEANOMPI_FUNCTION_CACHE", None)
        runs = [("cold", {}), ("warm_first", {}), ("warm", {}),
                ("warm_rewrite", {"THEANOMPI_FUNCTION_CACHE": "off"})]
        for label, extra in runs:
            argv = [sys.executable, __file__, "--child-compile", "--batch", str(batch), "--threads", str(threads)]
            proc = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, timeout=1800)
            if proc.returncode != 0:
                raise SystemExit(f"compile child failed:\n{proc.stderr[-3000:]}")
            out[label] = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"compile {label}: build {out[label]['build_s']:.1f} s + compile {out[label]['compile_s']:.1f} s "
                  f"= {out[label]['total_s']:.1f} s")
    return out


def pytensor_step_variants(model):
    """name -> step(x, y) for the variants in the module docstring."""
    import pytensor
    from pytensor.compile.mode import Mode

    import theanompi.nn as L

    model.compile_iter_fns(None)

    def compiled(logits, mode):
        loss, _ = model.loss_and_error(logits)
        grads = pytensor.grad(model.regularised(loss), model.params)
        return pytensor.function([model.x, model.y], loss, updates=model.sgd_updates(grads), mode=mode)

    return {
        "ours": model._train_fn,
        "ours_nogc": compiled(model.logits, Mode(linker="cvm_nogc", optimizer="fast_run")),
        "ours_graph_bn": compiled(L.get_output(model.network, batch_norm_fused=False), None),
    }


def torch_step():
    import torch

    from benchmarks._ddp_worker import resnet

    torch.manual_seed(0)
    net = resnet(torch, 20)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9, weight_decay=1e-4)

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def main(argv=None) -> int:
    args = parse_args(argv)
    set_threads(args.threads)
    if args.child_compile:
        import theanompi  # pytensor configuration, THEANOMPI_CACHE_DIR

        print(json.dumps(compile_seconds(args.batch)))
        return 0
    compile_times = None if args.skip_compile else measure_compile(args.batch, args.threads)
    if args.compile_only:
        result = {"benchmark": "resnet_step_vs_torch", "batch": args.batch, "compile": compile_times,
                  "machine": machine_info()}
        _write(args.json if args.json != DEFAULT_JSON else COMPILE_JSON, result)
        return 0
    try:
        import torch
    except ImportError:
        print("PyTorch is not installed; install the CPU build with\n  .venv/bin/pip install torch==2.13.0",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    import numpy as np
    import pytensor

    import theanompi  # noqa: F401

    model = build_model(args.batch)
    steps = pytensor_step_variants(model)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 3, 32, 32)).astype("float32")
    y = rng.integers(0, 10, size=args.batch).astype("int32")
    theirs = torch_step()
    xt, yt = torch.from_numpy(x), torch.from_numpy(y.astype("int64"))
    load_before = os.getloadavg()[0]
    timed = {name: (fn, (x, y)) for name, fn in steps.items()}
    timed["torch"] = (theirs, (xt, yt))
    times = time_interleaved(timed, args.warmup, args.rounds, args.block, args.pause, args.clock)
    load_after = os.getloadavg()[0]
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio = {name: med[name] / med["torch"] for name in steps}
    print(f"ResNet-20 training step, batch {args.batch}x3x32x32, {args.threads} threads, {args.clock} clock, "
          f"median of {args.rounds * args.block} steps each")
    print(f"{'impl':<16}{'ms/step':>9}{'min':>9}{'max':>9}{'vs torch':>10}")
    for name in timed:
        vs = f"{ratio[name]:.2f}x" if name in ratio else ""
        print(f"{name:<16}{med[name]:>9.1f}{min(times[name]):>9.1f}{max(times[name]):>9.1f}{vs:>10}")
    print(f"load average before/after: {load_before:.2f} / {load_after:.2f} ({os.cpu_count()} CPUs)")
    result = {
        "benchmark": "resnet_step_vs_torch", "batch": args.batch, "threads": args.threads, "clock": args.clock,
        "warmup": args.warmup, "rounds": args.rounds, "block": args.block, "pause_s": args.pause,
        "ms_median": med, "ratio_vs_torch": ratio, "ms_all": times, "compile": compile_times,
        "versions": {"python": platform.python_version(), "numpy": np.__version__,
                     "pytensor": pytensor.__version__, "torch": torch.__version__},
        "machine": {**machine_info(), "loadavg_1min_before_after": [load_before, load_after]},
    }
    _write(args.json, result)
    return 0


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
