"""Under mpiexec: BSP avg's outer step (BSP_OUTER_OPTIMIZER=nesterov, lr 0.7, momentum 0.9) after k local steps
equals a NumPy replay of DiLoCo's outer Nesterov step, twice (the second carries the momentum); every worker then
holds theta_outer. argv: k."""

import shutil
import sys
import tempfile

import _abort_on_error  # noqa: F401

from theanompi.backend.pytensor_config import configure_pytensor

configure_pytensor()
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from theanompi.core.session_options import BSPOptions  # noqa: E402
from theanompi.rules.bsp import BSPWorker  # noqa: E402
from theanompi.runtime.rank_context import RankContext  # noqa: E402
from theanompi.session.spec import SessionSpec  # noqa: E402

LR, MU = 0.7, 0.9
comm = MPI.COMM_WORLD
k = int(sys.argv[1])
run_dir = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
spec = SessionSpec(rule="BSP", devices=[f"cpu{r}" for r in range(comm.size)], modelfile="theanompi.models.mlp",
                   modelclass="MLP", cwd=".",
                   options=BSPOptions(sync_type="avg", avg_freq=k, outer_optimizer="nesterov", outer_lr=LR,
                                      outer_momentum=MU, seed=0, n_epochs=1, run_dir=run_dir),
                   model_options={"batch_size": 16, "hidden": 32})
worker = BSPWorker.create(RankContext(spec=spec, rank=comm.rank, role="worker", device=f"cpu{comm.rank}", comm=comm))
worker.start()  # run() would start it itself
worker.model.adjust_hyperp(0)
theta = worker.fused.read().astype("float64")  # theta_outer: the common start
assert worker.outer is not None and np.array_equal(worker.outer.params, worker.fused.read())
momentum = np.zeros_like(theta)
for round_ in range(2):
    for count in range(k - 1):  # k-1 local steps: no exchange yet
        worker.step_avg(round_ * k + count)
        worker.iteration += 1
    worker.model.train_iter(round_ * k + k - 1, worker.recorder)  # the k-th local step, before its exchange
    gathered = comm.allgather(worker.fused.read().copy())
    assert not np.allclose(gathered[0], gathered[-1]), "workers trained on different shards and must differ"
    worker.synchronize()
    worker.iteration += 1
    delta = np.mean([theta - local.astype("float64") for local in gathered], axis=0)  # mean pseudo-gradient
    momentum = MU * momentum + delta
    theta = theta - LR * (delta + MU * momentum)
    after = worker.fused.read()
    np.testing.assert_allclose(after, theta, rtol=1e-5, atol=1e-6, err_msg=f"outer step {round_ + 1}")
    np.testing.assert_allclose(worker.outer.momentum_buffer, momentum, rtol=1e-5, atol=1e-6)
    assert np.array_equal(worker.outer.params, after), "the workers continue from theta_outer"
    assert np.array_equal(comm.allgather(after.copy())[0], after), "all workers must hold the same theta_outer"
    plain = np.mean(np.stack(gathered).astype("float64"), axis=0)
    assert np.abs(after - plain).max() > 1e-4, "the outer step must differ from plain averaging"
comm.Barrier()  # every rank is done with the run directory
if comm.rank == 0:
    shutil.rmtree(run_dir)
    print(f"bsp outer step ok: 2 outer steps of {k} local steps equal the NumPy replay")
