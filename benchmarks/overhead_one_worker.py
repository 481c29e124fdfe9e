"""1-worker theanompi BSP vs a plain pytensor training loop of the same model, same batches.

    python benchmarks/overhead_one_worker.py [--epochs 3] [--json PATH]

"plain": one compiled function (loss, momentum-SGD updates) called on each batch.
"ours":  the BSP rank loop's iteration (recorder timers, exchanger, the model's
         train_iter) in a 1-worker session, as ``tmlauncher`` runs it.
Both train from the same initial parameters on the same batch order; the two
loops alternate epoch by epoch and the medians of per-epoch training time are
compared. Two sizes: the default digits MLP (tiny steps: the worst case for
per-step overhead) and a 64-1024-1024-10 MLP with batch 128.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def build(model_options, sync_type):
    from mpi4py import MPI

    from theanompi.core.session_options import BSPOptions
    from theanompi.rules.bsp import BSPWorker
    from theanompi.runtime.rank_context import RankContext
    from theanompi.session.spec import SessionSpec

    spec = SessionSpec(rule="BSP", devices=["cpu0"], modelfile="theanompi.models.mlp", modelclass="MLP", cwd=".",
                       options=BSPOptions(sync_type=sync_type, n_epochs=1, run_dir=tempfile.mkdtemp(),
                                          average_weights="none"),
                       model_options=model_options)
    worker = BSPWorker.create(RankContext(spec=spec, rank=0, role="worker", device="cpu0", comm=MPI.COMM_WORLD))
    worker.start()  # run() would start it itself
    return worker


def plain_step_fn(model):
    import pytensor

    loss, error = model.loss_and_error()
    grads = pytensor.grad(loss, model.params)
    return pytensor.function([model.x, model.y], loss, updates=model.sgd_updates(grads))


def measure(model_options, epochs):
    import numpy as np

    ours = build(model_options, "cdd")
    reference = build(model_options, "cdd")  # same seed: same initial params and data order
    plain = plain_step_fn(reference.model)
    t_ours, t_plain = [], []
    for epoch in range(epochs + 1):
        ours.model.adjust_hyperp(epoch)
        t0 = time.perf_counter()
        for count in range(ours.model.data.n_batch_train):
            ours.step_local(count)
            ours.recorder.end_iteration()
        t1 = time.perf_counter()
        data = reference.model.data
        data.set_epoch(epoch)
        t2 = time.perf_counter()
        for count in range(data.n_batch_train):
            xb, yb = data.train_batch(count)
            plain(xb, yb)
        t3 = time.perf_counter()
        if epoch:  # the first epoch warms caches
            t_ours.append(t1 - t0)
            t_plain.append(t3 - t2)
    gap = max(float(np.abs(a.get_value() - b.get_value()).max())
              for a, b in zip(ours.model.params, reference.model.params))
    n_steps = ours.model.data.n_batch_train
    return {"steps_per_epoch": n_steps, "plain_ms_per_step": float(np.median(t_plain)) / n_steps * 1e3,
            "ours_ms_per_step": float(np.median(t_ours)) / n_steps * 1e3,
            "overhead": float(np.median(t_ours) / np.median(t_plain) - 1.0), "max_param_gap": gap}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "overhead.json"))
    args = parser.parse_args()
    from theanompi.backend.pytensor_config import configure_pytensor

    configure_pytensor()
    cases = {
        "digits MLP 64-256-10, batch 32": {"hidden": 256, "batch_size": 32},
        "MLP 64-1024-1024-10, batch 128": {"hidden": "1024,1024", "batch_size": 128},
    }
    results = {name: measure(opts, args.epochs) for name, opts in cases.items()}
    print(f"1-worker BSP vs plain pytensor loop (median of {args.epochs} epochs)")
    print(f"{'model':<34} {'plain ms/step':>13} {'ours ms/step':>12} {'overhead':>9} {'same params':>11}")
    for name, r in results.items():
        print(f"{name:<34} {r['plain_ms_per_step']:>13.3f} {r['ours_ms_per_step']:>12.3f} "
              f"{100 * r['overhead']:>8.2f}% {'yes' if r['max_param_gap'] < 1e-5 else 'NO':>11}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
