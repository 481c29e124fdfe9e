"""Under mpiexec: BSP-avg's parameter average after k local steps equals the numpy mean of the workers' params."""

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

comm = MPI.COMM_WORLD
k = int(sys.argv[1])
run_dir = comm.bcast(tempfile.mkdtemp() if comm.rank == 0 else None)
spec = SessionSpec(rule="BSP", devices=[f"cpu{r}" for r in range(comm.size)], modelfile="theanompi.models.mlp",
                   modelclass="MLP", cwd=".",
                   options=BSPOptions(sync_type="avg", avg_freq=k, exch_strategy="ar", seed=0, n_epochs=1,
                                      run_dir=run_dir),
                   model_options={"batch_size": 16, "hidden": 32})
worker = BSPWorker.create(RankContext(spec=spec, rank=comm.rank, role="worker", device=f"cpu{comm.rank}", comm=comm))
worker.start()  # run() would start it itself
worker.model.adjust_hyperp(0)
for count in range(k - 1):  # k-1 local steps: no average yet
    worker.step_avg(count)
    worker.iteration += 1
# the k-th step: local step, then the average
worker.model.train_iter(k - 1, worker.recorder)
local = worker.fused.read().copy()
gathered = comm.allgather(local)
assert not np.allclose(gathered[0], gathered[-1]), "workers trained on different shards and must differ"
worker.average_params()
expected = np.mean(np.stack(gathered).astype("float64"), axis=0)
after = worker.fused.read()
np.testing.assert_allclose(after, expected, rtol=1e-6, atol=1e-7)
assert np.array_equal(comm.allgather(after.copy())[0], after), "all workers must hold the same average"
comm.Barrier()  # every rank is done with the run directory
if comm.rank == 0:
    shutil.rmtree(run_dir)
    print("bsp avg ok")
