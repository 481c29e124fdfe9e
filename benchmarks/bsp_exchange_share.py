"""How much of a BSP (cdd) step is the gradient exchange, for the zoo's pytensor models: is overlapping it
with backward worth building?

    python benchmarks/bsp_exchange_share.py [--models cnn,resnet20] [--workers 2,4] [--batch 32] [--steps 20]

For each model and worker count, two measurements:

* a real BSP-cdd session (``scaling_vs_ddp.bsp_session_epochs``: synthetic 3x32x32 data, per-worker batch
  ``--batch``, one thread per worker, ``--steps`` steps per epoch): rank 0's records of the second epoch
  split its steps into calc (forward, backward, the update), comm (the allreduce of the fused gradient,
  including the wait for the slowest worker) and wait (data). ``comm_share`` = comm / (calc + comm + wait);
* in an mpiexec world of the same size, the allreduce alone of a float32 buffer of the model's parameter
  count, started after a barrier (the transfer itself: what an overlap with backward could hide at most);
  ``transfer_share`` = its median / the session's mean step.

Overlap cannot hide the wait for the slowest worker (a BSP step needs every worker's gradient), so
``transfer_share`` is the figure that decides; the issue's threshold is 5 %. Writes JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.scaling_vs_ddp import MODELS, bsp_session_epochs  # noqa: E402


def parameter_count(model: str) -> int:
    """The model's number of trainable values (its class built once, not compiled)."""
    import importlib

    from theanompi.models.contract import WorkerConfig

    modelfile, modelclass, extra = MODELS[model]
    cls = getattr(importlib.import_module(modelfile), modelclass)
    options = {"data": "synthetic", "batch_size": 32, "train_size": 64, "val_size": 32, **extra}
    built = cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options=options))
    return int(sum(p.get_value(borrow=True).size for p in built.params))


def allreduce_ms(workers: int, floats: int, reps: int) -> float:
    """Median milliseconds of an in-place float32 Allreduce of ``floats`` values on ``workers`` ranks."""
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    argv = [find_mpiexec(), "--oversubscribe", "--bind-to", "none", "-n", str(workers), sys.executable, __file__,
            "--allreduce-child", str(floats), "--reps", str(reps)]
    env = {**mpiexec_env(), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"allreduce on {workers} ranks failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["median_ms"]


def allreduce_child(floats: int, reps: int) -> None:
    import numpy as np
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    buf = np.ones(floats, dtype=np.float32)
    times = []
    for rep in range(reps + 3):
        comm.Barrier()
        t0 = time.perf_counter()
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        elapsed = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if rep >= 3:  # warm-up
            times.append(elapsed)
    if comm.rank == 0:
        print(json.dumps({"median_ms": statistics.median(times) * 1e3}))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="cnn,resnet20")
    p.add_argument("--workers", default="2,4")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=50, help="repetitions of the lone allreduce")
    p.add_argument("--json", type=Path, default=HERE / "results" / "bsp_exchange_share.json")
    p.add_argument("--allreduce-child", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.allreduce_child is not None:
        allreduce_child(args.allreduce_child, args.reps)
        return 0
    from benchmarks.cnn_step_vs_torch import machine_info

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models.split(","):
            n_params = parameter_count(model)
            for workers in (int(w) for w in args.workers.split(",")):
                second = bsp_session_epochs(model, workers, args.batch, args.steps, Path(tmp) / f"{model}{workers}")[1]
                step_s = second["calc_s"] + second["comm_s"] + second["wait_s"]
                transfer = allreduce_ms(workers, n_params, args.reps)
                row = {"model": model, "workers": workers, "params": n_params, "steps": args.steps,
                       "step_ms": step_s / args.steps * 1e3, "calc_ms": second["calc_s"] / args.steps * 1e3,
                       "comm_ms": second["comm_s"] / args.steps * 1e3, "wait_ms": second["wait_s"] / args.steps * 1e3,
                       "comm_share": second["comm_s"] / step_s, "transfer_ms": transfer,
                       "transfer_share": transfer / (step_s / args.steps * 1e3)}
                rows.append(row)
                print(f"{model:<9} {workers} workers: step {row['step_ms']:7.1f} ms, comm {row['comm_ms']:6.2f} ms "
                      f"({row['comm_share']:.1%} of the step, the wait for the slowest worker included), "
                      f"allreduce alone of {n_params} floats {transfer:.3f} ms ({row['transfer_share']:.2%})",
                      flush=True)
    result = {"benchmark": "bsp_exchange_share", "batch": args.batch, "threads_per_worker": 1, "rows": rows,
              "worth_overlapping": any(r["transfer_share"] > 0.05 for r in rows), "machine": machine_info()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
