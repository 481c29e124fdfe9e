"""Theano-MPI's DataClass API on real ranks under mpiexec: every rank agrees on the split and gets a disjoint
shard (the loaders in one process: tests/models/data/test_data_theanompi_api.py)."""

import subprocess
import sys

from conftest import ASSETS

sys.path.insert(0, str(ASSETS))
from data_api_files import write_cifar, write_mnist_npz

RANK_SCRIPT = """
import sys
from mpi4py import MPI
from theanompi.models.contract import WorkerConfig
from theanompi.models.current_config import set_current
from theanompi.models.data import Cifar10_data
from theanompi.models.data.mnist import MNIST_data

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
set_current(WorkerConfig(rank=rank, size=size, seed=7, device=f"cpu{rank}", model_options={"data_dir": sys.argv[1]}))
d = Cifar10_data(verbose=False)  # what Theano-MPI's Cifar10_model constructor does
d.batch_data(4); d.extend_data(rank, size)
d.shuffle_data("train", common_seed=1234); d.shuffle_data("val")
d.shard_data("train", rank, size); d.shard_data("val", rank, size)
mine = {"split": d.rawdata[3].tobytes(), "n": d.n_batch_train, "files": sorted(b.tobytes() for b in d.train_img),
        "val": [b.tobytes() for b in d.val_img_shard], "epochs": []}
for epoch in range(3):
    d.set_epoch(epoch)  # the session, then the model's own calls
    d.shuffle_data("train", common_seed=epoch); d.shard_data("train", rank, size)
    mine["epochs"].append([b.tobytes() for b in d.train_img_shard])
m = MNIST_data(); m.batch_data(5)
mine["mnist"] = [row.tobytes() for _ in range(m.n_batch_train) for row in next(m.batches_train)[0]]
mine["mnist_n"] = m.n_batch_train
everyone = comm.gather(mine, root=0)
if rank == 0:
    first = everyone[0]
    assert all(r["split"] == first["split"] and r["n"] == first["n"] for r in everyone), "split or counts differ"
    for e in range(3):
        flat = [b for r in everyone for b in r["epochs"][e]]
        assert set(flat) == set(first["files"]) and len(flat) == first["n"] * size, f"epoch {e}"
        assert len(flat) - len(set(flat)) == first["n"] * size - len(first["files"]), f"overlap in epoch {e}"
    val = [b for r in everyone for b in r["val"]]
    assert len(val) == len(set(val)) == len(d.val_img), "validation shards"
    rows = [b for r in everyone for b in r["mnist"]]
    assert len(set(rows)) == 30 and len(rows) == first["mnist_n"] * 5 * size, "mnist pass"
    print("shards OK", first["n"], first["mnist_n"])
"""


def test_real_ranks_agree_on_split_and_get_disjoint_shards(tmp_path):
    from theanompi.launch.mpiexec import find_mpiexec, mpiexec_env

    write_cifar(tmp_path / "data")
    write_mnist_npz(tmp_path / "data", n_train=30, n_val=9)
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    argv = [find_mpiexec(), "--oversubscribe", "-n", "3", sys.executable, str(script), str(tmp_path / "data")]
    proc = subprocess.run(argv, env=mpiexec_env(), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "shards OK 3 2" in proc.stdout
