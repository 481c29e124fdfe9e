"""JAX and Keras users: our models' training step against the frameworks' own loops, and BSP at 2 workers against
PyTorch's DDP, in one run.

    flock /work/wt/bench.lock python benchmarks/jax_keras_models.py [--quick] [--batch 32] [--steps 40]
                                                                     [--repeats 3] [--json PATH]

The network is _ddp_worker.py's CIFAR CNN (conv32-pool-conv64-pool-dense10, 60 k parameters) on synthetic
32x32x3 images, channels last (benchmarks/_jax_models.py, _keras_models.py), batch ``--batch``.

* **step**, in one process per framework and backend (a fresh Python process each: Keras picks its backend once
  per process), blocks of ``--steps`` steps alternating between the two sides, the first block of each a warm-up
  (compiles), the median per-step time over ``--repeats`` blocks:
  - flax: ``JaxClassifierModel.train_iter`` (the local step every rule but BSP cdd runs; loss and error read to
    the host every step, as the recorder needs) vs the same ``nnx`` network in plain JAX: one ``jax.jit`` step of
    optax's momentum SGD (``optax.sgd(lr, momentum=0.9)``) over ``nnx.split``'s state, also reading loss and error
    every step, on slices of the same images.
  - keras-torch, keras-jax: ``KerasClassifierModel.train_iter`` vs ``model.fit`` (``keras.optimizers.SGD`` with
    momentum 0.9, sparse cross-entropy on logits and accuracy, ``verbose=0``; one ``fit`` call of ``--steps``
    batches per block) on the same backend, the same images and batch size.
  The goal: ours / theirs <= 1.1.
* **bsp**: samples/s of the second epoch of a BSP-cdd session (``tmlauncher``'s ``BSP().init``, one thread per
  worker, ``--steps`` steps per epoch) at 1 and 2 workers, for the Flax model and the Keras one on each backend,
  against DistributedDataParallel (gloo) training the same CNN in PyTorch (``_ddp_worker.py``, one torch thread
  per worker). XLA sizes its CPU thread pool from the cores it sees, whatever THREADS_PER_WORKER says, so two JAX
  workers share the machine's cores with two pools.

``--quick`` (about 4 minutes on a 2-core machine under a load of 3-5) takes 20 steps a block, 3 repeats (one block
of 12 steps put the step ratios anywhere from 0.9 to 1.5 on a loaded machine); the full run about 15.
The machine (CPU model, cores) and its load average before and after go into the JSON (default
``benchmarks/results/jax_keras_models.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
#: flavour -> (model file, ModelClass, KERAS_BACKEND)
FLAVOURS = {"flax": ("_jax_models.py", "FlaxCifarCNN", None),
            "keras-torch": ("_keras_models.py", "KerasCifarCNN", "torch"),
            "keras-jax": ("_keras_models.py", "KerasCifarCNN", "jax")}
LR, MOMENTUM = 0.01, 0.9


def build_ours(flavour: str, batch: int, steps: int):
    """Our ModelClass of ``flavour`` as a 1-worker rank builds it, compiled for local steps."""
    from theanompi.models.contract import WorkerConfig
    from theanompi.models.loader import load_model_class

    modelfile, modelclass, _ = FLAVOURS[flavour]
    cls = load_model_class(str(HERE / modelfile), modelclass)
    model = cls(WorkerConfig(rank=0, size=1, seed=0, device="cpu0", model_options={
        "batch_size": batch, "train_size": steps * batch, "val_size": batch, "lr": LR, "momentum": MOMENTUM}))
    model.compile_iter_fns("local")
    model.adjust_hyperp(0)
    return model


def plain_flax_steps(model, batch: int):
    """A function running ``steps`` steps of the plain JAX loop (jax.jit + optax) on the model's images."""
    import jax
    import optax
    from _jax_models import CifarCNN
    from flax import nnx

    graph, params, rest = nnx.split(CifarCNN(nnx.Rngs(0)), nnx.Param, ...)
    tx = optax.sgd(LR, momentum=MOMENTUM)
    state = {"params": params, "opt": tx.init(params)}

    def loss_fn(params, x, y):
        logits = nnx.merge(graph, params, rest)(x)
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return loss, (logits.argmax(-1) != y).mean()

    @jax.jit
    def step(params, opt_state, x, y):
        (loss, error), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, error

    x, y = model.data.x_train, model.data.y_train

    def run(steps: int) -> None:
        for i in range(steps):
            part = slice(i * batch, (i + 1) * batch)
            state["params"], state["opt"], loss, error = step(state["params"], state["opt"], x[part], y[part])
            jax.device_get((loss, error))  # read back every step, as the recorder does on our side

    return run


def keras_fit_steps(model, batch: int):
    """A function running ``steps`` steps of ``model.fit`` on the same network and images."""
    from _keras_models import cifar_cnn

    from theanompi.models.keras_classifier import keras

    keras.utils.set_random_seed(0)
    net = cifar_cnn()
    net.compile(optimizer=keras.optimizers.SGD(LR, momentum=MOMENTUM),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    x, y = model.data.x_train, model.data.y_train

    def run(steps: int) -> None:
        net.fit(x[:steps * batch], y[:steps * batch], batch_size=batch, epochs=1, shuffle=False, verbose=0)

    return run


def step_part(flavour: str, batch: int, steps: int, repeats: int) -> dict:
    """Ours vs the framework's loop, ms per step (runs in the process of ``flavour``'s backend)."""
    from theanompi.session.recorder import Recorder

    model = build_ours(flavour, batch, steps)
    theirs = plain_flax_steps(model, batch) if flavour == "flax" else keras_fit_steps(model, batch)
    recorder = Recorder(None)
    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    for block in range(repeats + 1):  # block 0 compiles and warms up
        t0 = time.perf_counter()
        for i in range(steps):
            model.train_iter(i, recorder)
        t1 = time.perf_counter()
        theirs(steps)
        t2 = time.perf_counter()
        if block:
            times["ours"].append(1e3 * (t1 - t0) / steps)
            times["theirs"].append(1e3 * (t2 - t1) / steps)
    ours, other = statistics.median(times["ours"]), statistics.median(times["theirs"])
    return {"ours_ms": ours, "theirs_ms": other, "ratio": ours / other, "blocks": times}


def bsp_part(flavour: str, workers: int, batch: int, steps: int) -> dict:
    """Samples/s of a BSP-cdd session of ``flavour``'s model (the second epoch) and its exchange ms per step."""
    from torch_bsp_vs_ddp import bsp_session

    from theanompi.core.session_options import BSPOptions

    modelfile, modelclass, _ = FLAVOURS[flavour]
    with tempfile.TemporaryDirectory() as tmp:  # (the default buckets: Keras on torch overlaps its exchange)
        return bsp_session(str(HERE / modelfile), modelclass, workers, batch, steps, BSPOptions().bucket_mb,
                           Path(tmp) / "run")


def in_subprocess(part: str, flavour: str, args: argparse.Namespace, workers: int = 0) -> dict:
    """Run ``part`` for ``flavour`` in a fresh Python process on its Keras backend; its JSON result."""
    env = dict(os.environ)
    backend = FLAVOURS[flavour][2]
    if backend:
        env["KERAS_BACKEND"] = backend
    argv = [sys.executable, __file__, "--part", part, "--flavour", flavour, "--workers", str(workers),
            "--batch", str(args.batch), "--steps", str(args.steps), "--repeats", str(args.repeats)]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{part} {flavour} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="20 steps a block, 3 repeats (a few minutes)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=str(HERE / "results" / "jax_keras_models.json"))
    parser.add_argument("--part", choices=["step", "bsp"], help=argparse.SUPPRESS)  # one measurement (internal)
    parser.add_argument("--flavour", choices=sorted(FLAVOURS), help=argparse.SUPPRESS)
    parser.add_argument("--workers", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.part:
        result = (step_part(args.flavour, args.batch, args.steps, args.repeats) if args.part == "step"
                  else bsp_part(args.flavour, args.workers, args.batch, args.steps))
        print(json.dumps(result))
        return
    if args.quick:
        args.steps, args.repeats = 20, 3
    from cnn_step_vs_torch import machine_info
    from scaling_vs_ddp import ddp

    load_before, start = os.getloadavg(), time.perf_counter()
    steps = {flavour: in_subprocess("step", flavour, args) for flavour in FLAVOURS}
    bsp: dict[str, dict] = {flavour: {} for flavour in FLAVOURS}
    bsp["ddp"] = {}
    for workers in (1, 2):
        for flavour in FLAVOURS:
            bsp[flavour][workers] = in_subprocess("bsp", flavour, args, workers)["samples_per_s"]
        bsp["ddp"][workers] = ddp("cnn", workers, args.batch, args.steps)
    print(f"step, ms (median of {args.repeats} blocks of {args.steps}), CIFAR CNN batch {args.batch}")
    print(f"{'flavour':<12} {'ours':>8} {'theirs':>8} {'ours/theirs':>11}   theirs")
    for flavour, r in steps.items():
        theirs = "jax.jit + optax" if flavour == "flax" else "model.fit"
        print(f"{flavour:<12} {r['ours_ms']:>8.2f} {r['theirs_ms']:>8.2f} {r['ratio']:>11.2f}   {theirs}")
    print("BSP cdd samples/s (second epoch), 1 thread per worker asked for; DDP: gloo, 1 torch thread per worker")
    print(f"{'':<12} {'1 worker':>9} {'2 workers':>9} {'2w / DDP 2w':>11}")
    for name, r in bsp.items():
        print(f"{name:<12} {r[1]:>9.1f} {r[2]:>9.1f} {r[2] / bsp['ddp'][2]:>11.2f}")
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    Path(args.json).write_text(json.dumps({
        "batch": args.batch, "steps": args.steps, "repeats": args.repeats, "quick": args.quick,
        "machine": machine_info(), "load_average_before": load_before, "load_average_after": os.getloadavg(),
        "seconds": time.perf_counter() - start, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "step": steps, "bsp_samples_per_s": bsp,
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
