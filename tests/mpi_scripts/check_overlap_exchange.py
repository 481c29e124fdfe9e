"""Under mpiexec: BSP's cdd exchange overlapped with backward equals the plain one, bit for bit.

``python check_overlap_exchange.py BUCKET_BYTES [DEVICE STRATEGY]`` (default ``cpu0 ar``: host MPI, on 2 ranks;
``cuda0 nccl32`` or ``cuda0 cudampi`` on one rank per GPU). Each rank builds two copies of a PyTorch model
(examples/torch_digits.py, weight decay on): one with an :class:`OverlappedAllreduce` attached (its gradient
buckets of BUCKET_BYTES started from the autograd hooks: MPI ``Iallreduce``, or NCCL enqueued on the stream), one
exchanged as BSP does without it (one allreduce of the whole flat gradient after backward). Every step checks that

* every bucket started during backward, in reverse parameter order (the last params first),
* the overlapped sum equals the plain sum exactly (with 2 ranks a sum is one rounding either way), and
* the parameters after ``apply_update`` are equal,

and prints one line on rank 0.
"""

import sys
from pathlib import Path

import _abort_on_error  # noqa: F401
import numpy as np
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from torch_digits import DigitsCNN

from theanompi.backend import arrays
from theanompi.comm.exchange import make_exchanger
from theanompi.comm.exchange.overlap import OverlappedAllreduce, plan_buckets
from theanompi.models.contract import WorkerConfig
from theanompi.session.recorder import Recorder

bucket_bytes = int(sys.argv[1])
device, strategy = (sys.argv[2], sys.argv[3]) if len(sys.argv) > 2 else ("cpu0", "ar")
comm = MPI.COMM_WORLD
exchanger = make_exchanger(strategy, comm)


def model():
    built = DigitsCNN(WorkerConfig(rank=comm.rank, size=comm.size, seed=0, device=device,
                                   model_options={"weight_decay": 1e-4}))
    built.compile_iter_fns("cdd")
    built.adjust_hyperp(0)
    return built


def pointer(x) -> int:
    return x.data.ptr if arrays.is_cupy(x) else x.__array_interface__["data"][0]


def host(x) -> np.ndarray:
    return np.array(arrays.to_host(x))


overlapped, plain = model(), model()
buckets = plan_buckets([p.numel() for p in overlapped.params], 4, bucket_bytes)
reducer = OverlappedAllreduce(exchanger, buckets)
overlapped.attach_reducer(reducer)
recorder = Recorder(None)
starts = []
start_allreduce_sum = exchanger.start_allreduce_sum


def recording_start(buf):  # the bucket's offset in the flat gradient, then the exchanger's own start
    starts.append((pointer(buf) - pointer(reducer.buffer)) // 4)
    return start_allreduce_sum(buf)


exchanger.start_allreduce_sum = recording_start
for count in range(6):
    starts.clear()
    overlapped.train_iter(count, recorder)
    assert starts == [b.start for b in buckets], f"buckets started during backward at {starts}"
    total = reducer.finish()
    assert reducer.overlapped == len(buckets)
    plain_total = exchanger.allreduce_sum(plain.train_iter(count, recorder))
    np.testing.assert_array_equal(host(total), host(plain_total))
    assert np.abs(host(plain_total)).max() > 0  # a real gradient, not zeros
    overlapped.apply_update(total)
    plain.apply_update(plain_total)
for p, q in zip(overlapped.params, plain.params):
    np.testing.assert_array_equal(p.detach().cpu().numpy(), q.detach().cpu().numpy())
if comm.rank == 0:
    print(f"overlapped exchange ok: {comm.size} rank(s), {device}, {strategy}, {len(buckets)} buckets of <= "
          f"{bucket_bytes} bytes started during backward in reverse parameter order, sums and parameters equal to "
          "the plain exchange's")
