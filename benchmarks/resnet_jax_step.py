"""ResNet-20/32 training step on one device: our JAX-mode step vs the same network in pure JAX vs PyTorch.

    python benchmarks/resnet_jax_step.py [--depths 20,32] [--batch 128] [--rounds 5] [--block 10] [--json PATH]
    python benchmarks/resnet_jax_step.py --depths 20 --batch 8 --rounds 2 --block 2   # a quick run on a CPU

"ours":  ``theanompi.models.zoo.resnet.ResNet`` with ``COMPUTE=jax`` (pytensor's JAX mode, parameters,
         momenta and batch-norm statistics kept as jax arrays on the device), its compiled training
         step as a worker calls it.
"pure":  the same network written directly in JAX -- conv, batch norm with running statistics,
         option-A shortcuts, global pool, dense, softmax cross-entropy, weight decay on weights, momentum
         SGD -- as one ``jax.jit`` function, starting from our initial parameters.
"torch": the same architecture in PyTorch (``benchmarks/_ddp_worker.resnet``; cuDNN with
         ``cudnn.benchmark`` on a GPU), SGD with momentum and weight decay, its own initial weights.

Each step gets the same CIFAR-shaped synthetic batch from host memory and reads the loss back (a worker's
recorder does), so all three pay the same transfers and one synchronisation per step. Blocks of steps
alternate between the three and the medians compare (``cnn_step_vs_torch.time_interleaved``). Ours and pure
start from the same parameters: their first losses, the largest relative gap over every parameter, momentum
and running statistic after the first step, and the parameter gap after the timed steps are printed and saved.
In float32 that gap is not a bug: where a ReLU's input lies within rounding of zero the two may take different
signs, batch norm spreads the flipped gradient over a channel, and the steps amplify it (docs/gpu.md: at
batch 8 on a CPU, 5e-3 relative at the first step). So the same steps are also run in float64 at the first
depth (``--float64-steps``, jax's x64 and pytensor's floatX), where ours and pure agree to ~4e-15 relative:
any difference in what they compute (update, weight decay, statistics, shortcut, padding) would show there.
``resnet_step_ratio_vs_pure_jax`` is ours / pure in step time (the goal on a GPU: at most 1.1); the epoch
figure is 50,000 images at the measured samples/s (Multiverso published 100 s for ResNet-32 on a GTX TITAN X).
Runs on whatever device jax and torch see: a GPU if there is one.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.cnn_step_vs_torch import time_interleaved  # noqa: E402

DEFAULT_JSON = ROOT / "benchmarks" / "results" / "resnet_jax_step.json"
EPOCH_IMAGES = 50_000
MULTIVERSO_RESNET32_EPOCH_S = 100.0  # Multiverso's published figure (GTX TITAN X), for the printout


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depths", default="20,32", help="comma-separated ResNet depths (6n+2)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--pause", type=float, default=0.2)
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--float64-steps", type=int, default=3,
                   help="steps of ours and pure side by side in float64 at the first depth (0: skip)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = p.parse_args(argv)
    if args.float64_steps < 0:
        p.error(f"--float64-steps must be >= 0, got {args.float64_steps}")
    return args


# ----- ours ---------------------------------------------------------------------------------------------
def build_ours(depth: int, batch: int, device: str):
    from theanompi.core.session_options import SessionOptions
    from theanompi.models.contract import WorkerConfig
    from theanompi.models.zoo.resnet import ResNet

    options = {"data": "synthetic", "depth": depth, "batch_size": batch, "train_size": 2 * batch, "val_size": batch}
    model = ResNet(WorkerConfig(rank=0, size=1, seed=0, device=device, options=SessionOptions(compute="jax"),
                                model_options=options))
    initial = {p.name: p.get_value() for p in model.params}  # before compile: host copies
    model.compile_iter_fns("local")
    model.adjust_hyperp(0)

    def step(x, y):
        loss, _ = model._train_fn(x, y)
        return float(loss)

    return model, initial, step


# ----- pure JAX -------------------------------------------------------------------------------------------
def build_pure(model, initial: dict):
    """The zoo ResNet's architecture (option-A shortcuts) as one jitted step on a dict of named arrays."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    hp = model.hp
    n, width = (hp["depth"] - 2) // 6, hp["width"]
    dtype = np.dtype(model.floatX)  # float32; float64 where pytensor's floatX and jax's x64 are (a drift check)
    lr, mu, wd = (dtype.type(hp[k]) for k in ("lr", "momentum", "weight_decay"))
    eps, alpha = dtype.type(1e-4), dtype.type(0.1)  # theanompi.nn.BatchNormLayer's defaults

    def conv(x, w, stride):
        return jax.lax.conv_general_dilated(x, w, (stride, stride), [(1, 1), (1, 1)],
                                            dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def bn(x, p, stats, name):
        mean = jnp.mean(x, axis=(0, 2, 3))
        inv_std = 1 / jnp.sqrt(jnp.var(x, axis=(0, 2, 3)) + eps)
        stats[f"{name}.mean"] = (1 - alpha) * stats[f"{name}.mean"] + alpha * mean
        stats[f"{name}.inv_std"] = (1 - alpha) * stats[f"{name}.inv_std"] + alpha * inv_std
        scale = (p[f"{name}.gamma"] * inv_std)[None, :, None, None]
        return (x - mean[None, :, None, None]) * scale + p[f"{name}.beta"][None, :, None, None]

    def conv_bn(x, p, stats, name, stride, relu=True):
        y = bn(conv(x, p[f"{name}.W"], stride), p, stats, f"{name}.bn")
        return jax.nn.relu(y) if relu else y

    def forward(p, stats, x):
        h = conv_bn(x, p, stats, "conv1", 1)
        for stage, filters in enumerate((width, 2 * width, 4 * width), start=1):
            for k in range(n):
                stride = 2 if stage > 1 and k == 0 else 1
                name = f"stage{stage}.block{k + 1}"
                out = conv_bn(h, p, stats, f"{name}.conv1", stride)
                out = conv_bn(out, p, stats, f"{name}.conv2", 1, relu=False)
                short = h
                if stride != 1 or h.shape[1] != filters:
                    extra = filters - h.shape[1]
                    short = jnp.pad(h[:, :, ::stride, ::stride], ((0, 0), (extra // 2, extra - extra // 2),
                                                                  (0, 0), (0, 0)))
                h = jax.nn.relu(out + short)
        h = jnp.mean(h, axis=(2, 3))
        return h @ p["fc.W"] + p["fc.b"]

    def loss_fn(p, stats, x, y):
        stats = dict(stats)
        logits = forward(p, stats, x)
        loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits, axis=1), y[:, None], axis=1))
        decay = 0.5 * wd * sum(jnp.sum(v ** 2) for v in p.values() if v.ndim > 1)
        return loss + decay, (loss, stats)

    @jax.jit
    def step(p, vels, stats, x, y):
        (_, (loss, stats)), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, stats, x, y)
        vels = {k: mu * vels[k] - lr * grads[k] for k in p}
        return {k: p[k] + vels[k] for k in p}, vels, stats, loss

    bn_layers = [name[:-len(".gamma")] for name in initial if name.endswith(".gamma")]
    state = {
        "p": {k: jnp.asarray(v) for k, v in initial.items()},
        "vels": {k: jnp.zeros(v.shape, v.dtype) for k, v in initial.items()},
        "stats": {**{f"{b}.mean": jnp.zeros(initial[f"{b}.gamma"].shape, dtype) for b in bn_layers},
                  **{f"{b}.inv_std": jnp.ones(initial[f"{b}.gamma"].shape, dtype) for b in bn_layers}},
    }

    def run(x, y):
        state["p"], state["vels"], state["stats"], loss = step(state["p"], state["vels"], state["stats"], x, y)
        return float(loss)

    return run, state


def ours_state(model) -> dict:
    """Our parameters, momenta and batch-norm running statistics as host arrays, named as ``build_pure``'s state."""
    import numpy as np

    from theanompi.nn import get_all_params

    velocities = {v.name[len("v_"):]: v for v in model.state_vars if (v.name or "").startswith("v_")}
    stats = [p for p in get_all_params(model.network) if p.name.endswith((".mean", ".inv_std"))]
    return {"p": {p.name: np.asarray(p.get_value()) for p in model.params},
            "vels": {k: np.asarray(v.get_value()) for k, v in velocities.items()},
            "stats": {p.name: np.asarray(p.get_value()) for p in stats}}


def max_relative_gap(ours: dict, pure: dict) -> tuple[float, str]:
    """The largest ``max |ours - pure| / max |pure|`` over every tensor of the two states, and its name."""
    import numpy as np

    def gap(a, b):
        b = np.asarray(b)
        return float(np.max(np.abs(a - b))) / max(float(np.max(np.abs(b))), 1e-30)

    return max((gap(ours[kind][k], v), f"{kind}:{k}") for kind in ("p", "vels", "stats") for k, v in pure[kind].items())


def synthetic_batch(batch: int, dtype: str = "float32"):
    import numpy as np

    rng = np.random.default_rng(0)
    return (rng.standard_normal((batch, 3, 32, 32)).astype(dtype), rng.integers(0, 10, size=batch).astype("int32"))


def float64_gaps(depth: int, batch: int, steps: int, device: str) -> list[tuple[float, str]]:
    """Ours and pure built and stepped side by side in float64 (jax's x64, pytensor's floatX) on one batch:
    the largest relative gap over every parameter, momentum and running statistic after each step.

    Rounding (1e-16 here) cannot flip a ReLU whose input is not within ~1e-15 of zero, so a gap above that
    is a difference in what the two compute (the update, the statistics, a shortcut, a padding).
    """
    import jax
    import pytensor

    gaps = []
    with jax.enable_x64(True), pytensor.config.change_flags(floatX="float64"):
        model, initial, ours = build_ours(depth, batch, device)
        pure, state = build_pure(model, initial)
        x, y = synthetic_batch(batch, "float64")
        for _ in range(steps):
            ours(x, y)
            pure(x, y)
            gaps.append(max_relative_gap(ours_state(model), state))
    return gaps


# ----- PyTorch --------------------------------------------------------------------------------------------
def build_torch(depth: int, hp: dict):
    import torch

    from benchmarks._ddp_worker import resnet

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    net = resnet(torch, depth).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=hp["lr"], momentum=hp["momentum"], weight_decay=hp["weight_decay"])

    def step(x, y):
        xt = torch.from_numpy(x).to(device, non_blocking=True)
        yt = torch.from_numpy(y).to(device, non_blocking=True).long()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(net(xt), yt)
        loss.backward()
        opt.step()
        return float(loss.detach())

    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    return step, name


# ----- one depth ------------------------------------------------------------------------------------------
def measure(depth: int, args, device: str) -> dict:
    import numpy as np

    model, initial, ours = build_ours(depth, args.batch, device)
    pure, state = build_pure(model, initial)
    x, y = synthetic_batch(args.batch)
    first = {"ours": ours(x, y), "pure": pure(x, y)}  # same parameters, same batch: the same loss
    first_gap = max_relative_gap(ours_state(model), state)
    timed = {"ours": (ours, (x, y)), "pure": (pure, (x, y))}
    torch_device = None
    if not args.no_torch and importlib.util.find_spec("torch") is None:
        print("PyTorch is not installed: left out (pip install 'theanompi[bench]')")
        args.no_torch = True
    if not args.no_torch:
        torch_step, torch_device = build_torch(depth, model.hp)
        timed["torch"] = (torch_step, (x, y))
    times = time_interleaved(timed, args.warmup, args.rounds, args.block, args.pause)
    # both ran the same steps on the same batch
    gap = max(float(np.max(np.abs(np.asarray(p.get_value()) - np.asarray(state["p"][p.name])))) for p in model.params)
    ms = {name: statistics.median(t) for name, t in times.items()}
    samples = {name: args.batch / (m / 1e3) for name, m in ms.items()}
    return {
        "ms_per_step": ms, "samples_per_s": samples,
        "epoch_50k_s": {name: EPOCH_IMAGES / s for name, s in samples.items()},
        "ratio_vs_pure_jax": ms["ours"] / ms["pure"],
        "first_loss": first, "first_step_max_rel_gap": first_gap, "max_param_gap_ours_vs_pure": gap,
        "torch_device": torch_device,
        "ms_all": times, "n_params": model.n_params,
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    import jax

    import theanompi  # noqa: F401  (pytensor's configuration)

    dev = jax.devices()[0]
    device_name = dev.device_kind if dev.platform == "gpu" else f"cpu ({dev.device_kind})"
    worker_device = "cuda0" if dev.platform == "gpu" else "cpu0"
    depths = [int(d) for d in args.depths.split(",")]
    results = {str(d): measure(d, args, worker_device) for d in depths}
    print(f"ResNet training step, batch {args.batch}x3x32x32, on {device_name}; median of "
          f"{args.rounds * args.block} steps each")
    print(f"{'net':<10}{'impl':<7}{'ms/step':>9}{'samples/s':>11}{'50k epoch s':>13}")
    for d, r in results.items():
        for name, ms in r["ms_per_step"].items():
            print(f"{'ResNet-' + d:<10}{name:<7}{ms:>9.2f}{r['samples_per_s'][name]:>11.0f}"
                  f"{r['epoch_50k_s'][name]:>13.1f}")
        print(f"{'':<10}ours/pure {r['ratio_vs_pure_jax']:.3f}x; first loss ours {r['first_loss']['ours']:.5f} "
              f"pure {r['first_loss']['pure']:.5f}; max |param gap| {r['max_param_gap_ours_vs_pure']:.1e} "
              f"(float32; after step 1: max relative gap {r['first_step_max_rel_gap'][0]:.1e} in "
              f"{r['first_step_max_rel_gap'][1]})")
    if "32" in results:
        print(f"Multiverso's published ResNet-32 epoch: {MULTIVERSO_RESNET32_EPOCH_S:.0f} s (GTX TITAN X)")
    result = {
        "benchmark": "resnet_jax_step", "device": device_name, "jax_platform": dev.platform, "batch": args.batch,
        "rounds": args.rounds, "block": args.block, "depths": results,
        "resnet_step_ratio_vs_pure_jax": {d: r["ratio_vs_pure_jax"] for d, r in results.items()},
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")  # the timings are kept whatever the check does
    if args.float64_steps:
        gaps = float64_gaps(depths[0], args.batch, args.float64_steps, worker_device)
        for step, (gap, where) in enumerate(gaps, start=1):
            print(f"float64, ResNet-{depths[0]}, ours vs pure after step {step}: max relative gap {gap:.1e} in {where}")
        result["float64_max_rel_gap_per_step"] = {"depth": depths[0], "gaps": gaps}
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
