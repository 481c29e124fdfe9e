"""One PyTorch rank of benchmarks/theanompi_table.py (under mpiexec; 2 ranks: DistributedDataParallel over gloo).

Prints one JSON line on rank 0: {"step_s": mean seconds of a timed training step (forward, backward, the gradient
allreduce with 2 ranks, momentum SGD)}. ``--device cuda``: one rank on the GPU, cuDNN autotuned
(``cudnn.benchmark``), TF32 allowed in convolutions and matrix products (JAX's default on a GPU), three untimed
steps, and each timed step closed by ``torch.cuda.synchronize()``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--net", required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--side", type=int, required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    import torch
    from _torch_theanompi_nets import NETS
    from exchange_vs_mpi4py import init_gloo
    from mpi4py import MPI

    torch.set_num_threads(args.threads)
    comm = MPI.COMM_WORLD
    dist = init_gloo(comm) if comm.size > 1 else None
    torch.manual_seed(0)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
        args.warmup = max(args.warmup, 3)  # cuDNN tries its algorithms during the first steps
    model = NETS[args.net](torch).to(device)
    if dist is not None:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=0.0005)
    gen = torch.Generator().manual_seed(comm.rank)
    x = torch.randn(args.batch, 3, args.side, args.side, generator=gen).to(device)
    y = torch.randint(0, 1000, (args.batch,), generator=gen).to(device)
    model.train()
    times = []
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        opt.zero_grad()
        out = model(x)
        outs = out if isinstance(out, list) else [out]
        loss = torch.nn.functional.cross_entropy(outs[0], y)
        for aux in outs[1:]:
            loss = loss + 0.3 * torch.nn.functional.cross_entropy(aux, y)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    step_s = max(comm.allgather(sum(times) / len(times)))  # the slowest rank sets the pace
    if comm.rank == 0:
        print(json.dumps({"step_s": step_s}))


if __name__ == "__main__":
    main()
