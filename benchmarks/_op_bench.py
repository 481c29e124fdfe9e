"""The harness of the per-op benchmarks (conv_vs_torch.py, pool_vs_torch.py): arguments, a one-OpenMP-thread
variant of our op, interleaved timing with medians, and the JSON result."""

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

from benchmarks.cnn_step_vs_torch import add_clock_option, check_clock, machine_info, time_interleaved  # noqa: E402


def parse_args(doc: str, json_name: str, rounds: int, block: int, argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", 2)))
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--block", type=int, default=block)
    p.add_argument("--pause", type=float, default=0.2)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / json_name)
    add_clock_option(p)
    args = p.parse_args(argv)
    check_clock(p, args)
    return args


def one_omp_thread(fn, threads: int):
    """``fn`` run with the OpenMP runtime our C ops link held to one thread (torch bundles its own)."""
    gomp = ctypes.CDLL("libgomp.so.1")

    def call(*args):
        gomp.omp_set_num_threads(1)
        try:
            return fn(*args)
        finally:
            gomp.omp_set_num_threads(threads)

    return call


def with_env(fn, name: str, value: str):
    """``fn`` run with the environment variable ``name`` set to ``value`` (read by our C ops at each call)."""

    def call(*args):
        old = os.environ.get(name)
        os.environ[name] = value
        try:
            return fn(*args)
        finally:
            if old is None:
                del os.environ[name]
            else:
                os.environ[name] = old

    return call


def time_variants(variants: dict, args: argparse.Namespace, warmup: int) -> dict:
    """name -> (fn, args) timed in interleaved blocks; returns the row: medians, min, max, ratio of ours."""
    times = time_interleaved(variants, warmup=warmup, rounds=args.rounds, block=args.block, pause=args.pause,
                             clock=args.clock)
    med = {name: statistics.median(t) for name, t in times.items()}
    return {"ms_median": med, "ratio_vs_torch": med["ours"] / med["torch"],
            "ms_min": {n: min(t) for n, t in times.items()}, "ms_max": {n: max(t) for n, t in times.items()}}


def write_result(name: str, args: argparse.Namespace, rows: dict, **extra) -> None:
    import pytensor
    import torch

    result = {"benchmark": name, "threads": args.threads, "clock": args.clock, "rounds": args.rounds,
              "block": args.block, "shapes": rows, "ratio_vs_torch": max(r["ratio_vs_torch"] for r in rows.values()),
              **extra,
              "machine": machine_info(), "versions": {"torch": torch.__version__, "pytensor": pytensor.__version__}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
