"""One PyTorch DistributedDataParallel (gloo) rank for benchmarks/scaling_vs_ddp.py (run under mpiexec).

Prints one JSON line on rank 0: {"samples_per_s": ...}. Same architectures as theanompi's zoo.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def cifar_cnn(torch):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def resnet(torch, depth: int = 20):
    """CIFAR ResNet (He et al. 2016): 3 stages of (depth-2)/6 basic blocks, 16/32/64 filters,
    option-A shortcuts (stride-2 subsampling + zero-padded channels)."""
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, c_in, c_out, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(c_out)
            self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(c_out)
            self.pad = c_out - c_in
            self.stride = stride

        def forward(self, x):
            y = F.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            short = x[:, :, ::self.stride, ::self.stride] if self.stride > 1 else x
            if self.pad:
                short = F.pad(short, (0, 0, 0, 0, 0, self.pad))
            return F.relu(y + short)

    n = (depth - 2) // 6
    layers, c = [nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()], 16
    for stage, width in enumerate((16, 32, 64)):
        for i in range(n):
            layers.append(Block(c, width, 2 if stage and i == 0 else 1))
            c = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["cnn", "resnet20"], required=True)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    import torch
    from exchange_vs_mpi4py import init_gloo
    from mpi4py import MPI

    torch.set_num_threads(1)  # one core per worker, as theanompi's ranks get with THREADS_PER_WORKER=1
    comm = MPI.COMM_WORLD
    dist = init_gloo(comm) if comm.size > 1 else None
    torch.manual_seed(0)
    model = cifar_cnn(torch) if args.model == "cnn" else resnet(torch, 20)
    if dist is not None:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(comm.rank)
    x = torch.randn(args.batch, 3, 32, 32, generator=gen)
    y = torch.randint(0, 10, (args.batch,), generator=gen)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            comm.Barrier()
            start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    elapsed = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    if comm.rank == 0:
        print(json.dumps({"samples_per_s": args.steps * args.batch * comm.size / elapsed}))
    if dist is not None:  # gloo's threads stopped before the interpreter's teardown (else an abort at exit, seen once)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
