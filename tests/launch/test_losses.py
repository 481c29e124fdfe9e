"""Whether a failed session lost a worker or a host (theanompi.launch.losses), from what the launcher sees."""

from __future__ import annotations

from types import SimpleNamespace

from theanompi.core.devices import parse_devices
from theanompi.launch.losses import killed_ranks, membership_loss
from theanompi.session.rank_status import write_status
from theanompi.session.remote import RemoteRanks
from theanompi.session.spec import RankSpec

KILLED = ("--------\nprterun noticed that process rank {rank} with PID 4242 on node vm exited on\n"
          "signal 9 (Killed).\n--------\n")


def fake_run(run_dir, devices="cpu0,cpu1,cpu2", code=137, failure="rank 1 (worker on cpu1) died", output="",
             silent=()):
    ranks = [RankSpec(d, "worker") for d in parse_devices(devices)]
    return SimpleNamespace(code=code, failure=failure, ranks=ranks, run_dir=run_dir, silent_hosts=list(silent),
                           remote=RemoteRanks(run_dir), stderr_tail=lambda: output)


def test_mpiexec_names_the_killed_ranks():
    assert killed_ranks(KILLED.format(rank=2) + KILLED.format(rank=0) + KILLED.format(rank=2)) == [2, 0]
    assert killed_ranks("prterun has exited due to process rank 1 with PID 0 on node vm calling \"abort\"") == []


def test_a_killed_worker_is_a_loss_of_its_device(tmp_path):
    loss = membership_loss(fake_run(tmp_path, output=KILLED.format(rank=1)))
    assert loss is not None and loss.ranks == [1] and loss.hosts == []
    assert [str(d) for d in loss.devices] == ["cpu1"] and loss.reason == "rank 1 (worker on cpu1) died"


def test_a_silent_host_loses_every_rank_there(tmp_path):
    run = fake_run(tmp_path, devices="cpu0;node2:cpu0,cpu1", silent=["node2"], failure="lost host node2: ...")
    loss = membership_loss(run)
    assert loss is not None and loss.ranks == [1, 2] and loss.hosts == ["node2"]


def test_an_error_of_a_rank_itself_interrupts_and_successes_are_no_loss(tmp_path):
    assert membership_loss(fake_run(tmp_path, code=0)) is None
    assert membership_loss(fake_run(tmp_path, failure="interrupted (Ctrl-C); every rank was stopped",
                                    output=KILLED.format(rank=1))) is None
    assert membership_loss(fake_run(tmp_path, failure="stalled: rank 1 ...")) is None  # nothing was killed
    write_status(tmp_path, 0, "failed", "rank 0 (worker on cpu0): MPI.Exception: MPI_ERR_PROC_FAILED")
    assert membership_loss(fake_run(tmp_path, output=KILLED.format(rank=1))) is not None  # it saw the peer go
    write_status(tmp_path, 2, "failed", "rank 2 (worker on cpu2): NonFiniteError: NaN or Inf in ...")
    assert membership_loss(fake_run(tmp_path, output=KILLED.format(rank=1))) is None  # would fail again
