"""Our JAX-mode training step vs a hand-written pure-JAX ``jax.jit`` step of the same net.

    python benchmarks/jax_step_vs_pure_jax.py [--steps 200] [--repeats 5] [--json PATH]

"ours": ``MLP.train_iter`` with ``COMPUTE=jax`` (pytensor's JAX mode; params, velocities
        and learning rate stay ``jax.Array`` in the shared variables' storage), recorder included.
"pure": one ``jax.jit`` function (softmax cross-entropy, momentum SGD) on a tuple of params.
Both start from the same parameters, see the same batches and read loss and error back to
the host every step (the recorder does); the final parameters are compared (they drift apart
only by float rounding over the run). Blocks of ``--steps`` steps alternate between
the two and the medians of per-step times are compared. Runs on whatever device jax
sees (CPU here, a GPU with the [cuda] extra); the device is printed and saved.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time


def build_ours(model_options):
    from theanompi.core.session_options import SessionOptions
    from theanompi.models.contract import WorkerConfig
    from theanompi.models.mlp import MLP

    config = WorkerConfig(rank=0, size=1, seed=0, device="cpu0", options=SessionOptions(compute="jax"),
                          model_options=model_options)
    model = MLP(config)
    initial = [p.get_value() for p in model.params]  # before compile: numpy copies
    model.compile_iter_fns("local")
    model.adjust_hyperp(0)
    return model, initial


def build_pure(initial, lr, mu):
    import jax
    import jax.numpy as jnp

    def loss_fn(params, x, y):
        h = x
        for i in range(0, len(params), 2):
            h = h @ params[i] + params[i + 1]
            if i < len(params) - 2:
                h = jnp.maximum(h, 0)
        logp = jax.nn.log_softmax(h, axis=1)
        onehot = jax.nn.one_hot(y, h.shape[1], dtype=h.dtype)
        return -jnp.mean(jnp.sum(onehot * logp, axis=1)), jnp.mean(jnp.argmax(h, axis=1) != y)

    @jax.jit
    def step(params, vels, x, y):
        (loss, err), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        vels = tuple(mu * v - lr * g for v, g in zip(vels, grads))
        params = tuple(p + v for p, v in zip(params, vels))
        return params, vels, loss, err

    params = tuple(jnp.asarray(p) for p in initial)
    return step, params, tuple(jnp.zeros_like(p) for p in params)


def measure(model_options, steps, repeats):
    import numpy as np

    from theanompi.session.recorder import Recorder

    model, initial = build_ours(model_options)
    recorder = Recorder(tempfile.mkdtemp(), write=False)
    step, params, vels = build_pure(initial, np.float32(model.hp["lr"]), np.float32(model.hp["momentum"]))
    data = model.data
    n = data.n_batch_train
    t_ours, t_pure = [], []
    for block in range(repeats + 1):  # block 0 compiles and warms up
        t0 = time.perf_counter()
        for i in range(steps):
            model.train_iter((block * steps + i) % n, recorder)
        t1 = time.perf_counter()
        for i in range(steps):
            xb, yb = data.train_batch((block * steps + i) % n)
            params, vels, loss, err = step(params, vels, xb, yb)
            float(loss), float(err)
        t2 = time.perf_counter()
        if block:
            t_ours.append((t1 - t0) / steps)
            t_pure.append((t2 - t1) / steps)
    gap = max(float(np.abs(np.asarray(a.get_value()) - np.asarray(b)).max()) for a, b in zip(model.params, params))
    ours, pure = float(np.median(t_ours)) * 1e3, float(np.median(t_pure)) * 1e3
    return {"ours_ms_per_step": ours, "pure_jax_ms_per_step": pure, "ratio": ours / pure, "max_param_gap": gap}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "jax_step.json"))
    args = parser.parse_args()
    from theanompi.backend.pytensor_config import configure_pytensor

    configure_pytensor()
    import jax

    dev = jax.devices()[0]
    device = f"{dev.platform} ({dev.device_kind})"
    cases = {
        "digits MLP 64-256-10, batch 32": {"hidden": 256, "batch_size": 32},
        "MLP 64-1024-1024-10, batch 128": {"hidden": "1024,1024", "batch_size": 128},
    }
    results = {name: measure(opts, args.steps, args.repeats) for name, opts in cases.items()}
    print(f"JAX-mode step vs pure JAX on {device} (median of {args.repeats} blocks of {args.steps} steps)")
    print(f"{'model':<34} {'pure ms/step':>12} {'ours ms/step':>12} {'ours/pure':>9} {'max |param gap|':>15}")
    for name, r in results.items():
        print(f"{name:<34} {r['pure_jax_ms_per_step']:>12.3f} {r['ours_ms_per_step']:>12.3f} {r['ratio']:>9.2f} "
              f"{r['max_param_gap']:>15.1e}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"device": device, "cases": results}, f, indent=2)


if __name__ == "__main__":
    main()
