"""Under mpiexec: GOSGD's protocol under random step times, p=1 (a push after every step), REPS sessions.

Every repetition builds a fresh GOSGDWorker (SEED=rep changes the sleeps and the pushes) and checks,
on every rank: it terminated, every worker did exactly n_epochs x n_batch_train steps, every message
sent was received (matrices), the weights sum to 1 and every worker holds the same final parameters.

    mpiexec -n 3 python tests/mpi_scripts/gosgd_stress.py REPS
"""

import json
import shutil
import sys
import tempfile
from pathlib import Path

from theanompi.backend.pytensor_config import configure_pytensor

configure_pytensor()
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402

from theanompi.launch.plan import SessionRequest, plan_session  # noqa: E402
from theanompi.rules.gosgd import GOSGD, GOSGDWorker  # noqa: E402
from theanompi.runtime.rank_context import RankContext  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
comm = MPI.COMM_WORLD
reps = int(sys.argv[1])
n_epochs = 2
for rep in range(reps):
    run_dir = comm.bcast(tempfile.mkdtemp(prefix="gosgd-stress-") if comm.rank == 0 else None)
    spec, _ = plan_session(SessionRequest.from_keywords(
        GOSGD, devices=",".join(f"cpu{r}" for r in range(comm.size)),
        modelfile=str(ROOT / "tests/assets/gosgd_models.py"), modelclass="JitteryMLP",
        model_options={"hidden": 32, "batch_size": 32}, cwd=str(ROOT),
        p=1.0, n_epochs=n_epochs, seed=rep, run_dir=run_dir, log_level="WARNING",
    ))
    ctx = RankContext(spec=spec, rank=comm.rank, role="worker", device=f"cpu{comm.rank}", comm=comm)
    worker = GOSGDWorker.create(ctx)
    worker.run()
    final = worker.fused.read().copy()
    gathered = comm.allgather(final)
    assert all(np.array_equal(gathered[0], g) for g in gathered), "workers hold different final params"
    s = worker.summary()
    n_batch = s["n_batch_train"]
    assert s["steps"] == [n_epochs * n for n in n_batch], (s["steps"], n_batch)
    sent, received = np.array(s["messages_sent"]), np.array(s["messages_received"])
    assert np.array_equal(sent, received.T), (sent, received)
    assert s["pushes"] == s["steps"], "p=1 pushes after every step"
    assert sum(s["pushes"]) == sum(s["merges"]) == int(sent.sum())
    assert abs(s["sum_weights"] - 1.0) < 1e-12 and abs(sum(s["weights"]) - 1.0) < 1e-12
    if comm.rank == 0:
        on_disk = json.loads((Path(run_dir) / "summary.json").read_text())
        assert on_disk["messages_sent"] == s["messages_sent"] and on_disk["rule"] == "GOSGD"
        print(f"rep {rep}: steps {s['steps']} pushes {s['pushes']} merges {s['merges']} "
              f"idle merges {s['idle_merges']}", flush=True)
    comm.Barrier()  # every rank is done with the run directory
    if comm.rank == 0:
        shutil.rmtree(run_dir)
if comm.rank == 0:
    print(f"gosgd stress ok {reps}")
