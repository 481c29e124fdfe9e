"""Under mpiexec: BSP's cdd exchange of a PyTorch model's flat gradient, in place and without a copy.

``python check_torch_exchange.py DEVICE STRATEGY`` on any number of ranks (``cpu0 ar``: the host path, NumPy
views; ``cuda0 nccl32`` on one rank per GPU: the device path, CuPy views through DLPack and NCCL). Each step
does what BSPWorker.step_cdd does (train_iter -> FusedParams.stage -> exchanger.allreduce_sum ->
apply_update) and checks that

* the update vector is a view of the model's flat gradient buffer (DLPack: the same memory),
* staging hands that view to the exchanger as it is, and the exchange sums into it in place,
* apply_update reads the sum from that same memory (torch.from_dlpack), and
* the sum is the sum of every rank's gradient (gathered to the host beforehand for the check),

then that the parameters equal those of a model stepped locally with the mean gradient.
"""

import sys
from pathlib import Path

import _abort_on_error  # noqa: F401
import numpy as np
import torch
from mpi4py import MPI

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from torch_digits import DigitsCNN

from theanompi.backend import arrays
from theanompi.comm.exchange import make_exchanger
from theanompi.comm.fused_params import FusedParams
from theanompi.models.contract import WorkerConfig
from theanompi.session.recorder import Recorder

device, strategy = sys.argv[1], sys.argv[2]
comm = MPI.COMM_WORLD
exchanger = make_exchanger(strategy, comm)
model = DigitsCNN(WorkerConfig(rank=comm.rank, size=comm.size, seed=0, device=device,
                               model_options={"weight_decay": 1e-4}))
model.compile_iter_fns("cdd")
model.adjust_hyperp(0)
fused = FusedParams(model.params, where=exchanger.memory)
buffer_ptr = model.flat_grad.data_ptr()


def pointer(x) -> int:
    return x.data.ptr if arrays.is_cupy(x) else x.__array_interface__["data"][0]


def host(x) -> np.ndarray:
    return np.array(arrays.to_host(x))


reference = DigitsCNN(WorkerConfig(rank=0, size=comm.size, seed=0, device=device,  # size: the 1/N of apply_update
                                   model_options={"weight_decay": 1e-4}))
reference.compile_iter_fns("cdd")
reference.adjust_hyperp(0)
recorder = Recorder(None)
for count in range(4):
    vector = model.train_iter(count, recorder)
    assert pointer(vector) == buffer_ptr, "the update vector is not the model's flat gradient buffer"
    expected = np.sum(comm.allgather(host(vector)), axis=0)
    staged = fused.stage(vector)
    assert staged is vector, f"stage copied the update vector ({type(vector).__name__})"
    total = exchanger.allreduce_sum(staged)
    assert pointer(total) == buffer_ptr, "the exchange did not sum in place"
    np.testing.assert_allclose(host(total), expected, rtol=1e-5, atol=1e-6)
    assert torch.from_dlpack(total).data_ptr() == buffer_ptr  # what apply_update reads: the same memory
    model.apply_update(total)
    reference.apply_update(expected)  # the same sum, from a fresh host array
for p, q in zip(model.params, reference.params):
    np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-5, atol=1e-6)
kind = type(vector).__module__.split(".")[0]
if comm.rank == 0:
    print(f"torch exchange ok: {comm.size} rank(s), {device}, {strategy}, {kind} views of the flat gradient, "
          f"summed in place")
