"""Under mpiexec (rank 0 = server, ranks 1.. = workers): several EASGD sessions ("rounds") in one job.

    mpiexec -n 4 python tests/mpi_scripts/easgd_stress.py MODELCLASS:N_EPOCHS:TAU [MODELCLASS:N_EPOCHS:TAU ...]

Each argument is one round: a whole EASGD session (fresh communicators, run directory, and
SEED = round number + 1) with tests/assets/easgd_models.py's MODELCLASS. Rank 0 then checks
the records: the steps reported to the server are exactly N_EPOCHS global epochs, every
worker's own count of steps and exchanges matches the server's, the centre was validated
once per global epoch.
"""

import json
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from theanompi.backend.pytensor_config import configure_pytensor

configure_pytensor()
from mpi4py import MPI  # noqa: E402

from theanompi.core.devices import parse_devices  # noqa: E402
from theanompi.core.session_options import EASGDOptions  # noqa: E402
from theanompi.rules.easgd import EASGD  # noqa: E402
from theanompi.runtime.rank_context import RankContext  # noqa: E402
from theanompi.session.spec import SessionSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
comm = MPI.COMM_WORLD


def _abort(exc_type, exc, tb):  # a failed check on one rank must not leave the others waiting
    traceback.print_exception(exc_type, exc, tb)
    sys.stderr.flush()
    comm.Abort(1)


sys.excepthook = _abort
n_workers = comm.size - 1
devices = [f"cpu{k}" for k in range(comm.size)]  # the first is the server's (as the launcher reads DEVICES)
ranks = [{"role": r.role, "device": str(r.device)}
         for r in EASGD.launch_ranks(parse_devices(devices), EASGDOptions())]

for round_, arg in enumerate(sys.argv[1:]):
    modelclass, n_epochs, tau = arg.split(":")
    n_epochs, tau = int(n_epochs), int(tau)
    run_dir = Path(comm.bcast(tempfile.mkdtemp(prefix="easgd-stress-") if comm.rank == 0 else None))
    options = EASGDOptions(n_epochs=n_epochs, tau=tau, seed=round_ + 1, run_dir=str(run_dir))
    spec = SessionSpec(rule="EASGD", devices=devices,
                       modelfile=str(ROOT / "tests" / "assets" / "easgd_models.py"), modelclass=modelclass,
                       options=options, model_options={"batch_size": 16, "hidden": 32}, ranks=ranks, cwd=str(ROOT))
    me = ranks[comm.rank]
    EASGD.run_rank(RankContext(spec=spec, rank=comm.rank, role=me["role"], device=me["device"], comm=comm))
    comm.Barrier()
    if comm.rank == 0:
        summary = json.loads((run_dir / "summary.json").read_text())
        workers = [json.loads((run_dir / "workers" / f"worker-{k}" / "summary.json").read_text())
                   for k in range(n_workers)]
        expected = n_epochs * sum(w["n_batch_train"] for w in workers)
        assert summary["iterations"] == expected, (summary["iterations"], expected)
        assert sum(w["iterations"] for w in workers) == expected, workers
        assert summary["exchanges"] == [w["exchanges"] for w in workers], (summary["exchanges"], workers)
        assert [p["iterations"] for p in summary["per_worker"]] == [w["iterations"] for w in workers], summary
        if tau == 1:
            assert all(w["exchanges"] == w["iterations"] for w in workers), workers
        assert summary["epochs"] == n_epochs
        assert len((run_dir / "epochs.jsonl").read_text().splitlines()) == n_epochs
        print(f"round {round_} ({arg}): {expected} steps, exchanges {summary['exchanges']}, "
              f"{summary['wall_s']:.2f} s", flush=True)
        shutil.rmtree(run_dir)
if comm.rank == 0:
    print("easgd stress ok", flush=True)
