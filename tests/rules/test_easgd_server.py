"""EASGD's server without ranks: built by ``create`` from the start it takes with the workers (or a checkpoint's), and
single exchanges answered against fakes, checked against NumPy's elastic formula. (Sessions under a real mpiexec:
tests/sessions/test_easgd.py; its construction only storing state: tests/rules/test_rule_constructors.py.)"""

from types import SimpleNamespace

import numpy as np
import pytensor
import pytest

from theanompi.core.errors import ContractError
from theanompi.core.session_options import EASGDOptions
from theanompi.rules.easgd import server as server_module
from theanompi.rules.easgd.protocol import TAG_DELTA, TAG_PARAMS, TAG_REPLY, TAG_REPORT, TAG_STATE
from theanompi.rules.easgd.server import EASGDServer
from theanompi.runtime.rank_context import RankContext
from theanompi.session.spec import SessionSpec

SHAPES = [(2, 3), (3,)]  # the fake model's parameters: 9 values
START = np.linspace(-1.0, 1.0, 9).astype("float32")  # worker 0's initial parameters, taken by every rank


class FakeMPIError(Exception):
    """Stands for mpi4py's ``MPI.Exception``."""


FAKE_MPI = SimpleNamespace(Exception=FakeMPIError, Request=SimpleNamespace(Waitall=lambda requests: None))


class FakeExchangeComm:
    """The exchange communicator as the server (session rank 0) sees it, workers on ranks 1..N.

    Its collectives answer as the workers would at their start (same parameter layout, worker 0's parameters
    ``START``, their ``shard_batches``) and are listed in ``collectives``; a worker's messages are queued with
    :meth:`arrive` before the server receives them; what the server sends is kept, copied, in ``sent``."""

    rank = 0

    def __init__(self, shard_batches: list[int]):
        self.shard_batches = shard_batches
        self.size = 1 + len(shard_batches)
        self.collectives: list[object] = []
        self.inbox: dict[tuple[int, int], list[object]] = {}
        self.sent: list[tuple[int, int, np.ndarray]] = []
        self.scattered: list[object] = []

    def allgather(self, facts):
        self.collectives.append("allgather")
        return [facts] * self.size

    def Bcast(self, buf, root):
        self.collectives.append(("Bcast", root))
        buf[:] = START

    def gather(self, value, root):
        self.collectives.append(("gather", root))
        return [value, *self.shard_batches]

    def scatter(self, values, root):
        self.collectives.append(("scatter", root))
        self.scattered = list(values)
        return values[self.rank]

    def arrive(self, source, tag, message):
        self.inbox.setdefault((source, tag), []).append(message)

    def Iprobe(self, source, tag):
        return bool(self.inbox.get((source, tag)))

    def Recv(self, buf, source, tag):
        buf[:] = self.inbox[(source, tag)].pop(0)

    def recv(self, source, tag):
        return self.inbox[(source, tag)].pop(0)

    def Isend(self, buf, dest, tag):
        self.sent.append((dest, tag, np.array(buf, copy=True)))
        return SimpleNamespace(dest=dest, tag=tag)


class FakeSessionComm:
    """The session's communicator: ``Split`` gives the server's own (validation) communicator, ``Dup`` the
    exchange's."""

    def __init__(self, exchange: FakeExchangeComm):
        self.exchange = exchange
        self.role_comm = SimpleNamespace(rank=0, size=1)

    def Split(self, color, key):
        return self.role_comm

    def Dup(self):
        return self.exchange


def fake_build_model(ctx, worker_rank, n_workers, sync_type):
    """A model whose parameters are zeros (the server takes worker 0's) and that has no validation batches."""
    assert (worker_rank, n_workers) == (0, 1)  # the server validates alone, as worker 0 of a 1-worker session
    params = [pytensor.shared(np.zeros(shape, "float32"), name=f"p{i}") for i, shape in enumerate(SHAPES)]
    return SimpleNamespace(params=params, data=SimpleNamespace(n_batch_val=0))


def create_server(tmp_path, monkeypatch, shard_batches, **options):
    """``EASGDServer.create`` on the server rank of a session with ``len(shard_batches)`` workers, against fakes."""
    monkeypatch.setattr(server_module, "build_model", fake_build_model)
    options = EASGDOptions(run_dir=str(tmp_path / "run"), progress_every=0, **options)
    ranks = [{"role": "server", "device": "cpu0"}] + [{"role": "worker", "device": f"cpu{k + 1}"}
                                                       for k in range(len(shard_batches))]
    spec = SessionSpec(rule="EASGD", devices=[r["device"] for r in ranks], modelfile="fake", modelclass="Fake",
                       options=options, ranks=ranks)
    exchange = FakeExchangeComm(shard_batches)
    session_comm = FakeSessionComm(exchange)
    ctx = RankContext(spec=spec, rank=0, role="server", device="cpu0", comm=session_comm)
    return EASGDServer.create(ctx, mpi=FAKE_MPI), exchange, session_comm


def test_create_builds_every_part_from_the_start_taken_with_the_workers(tmp_path, monkeypatch):
    server, exchange, session_comm = create_server(tmp_path, monkeypatch, [3, 5], alpha=0.3, tau=2, n_epochs=2)
    # the start, in the order the workers take it; the first grants are the session's start (run), not the build's
    assert exchange.collectives == ["allgather", ("Bcast", 1), ("gather", 0)]
    np.testing.assert_array_equal(server.centre, START)
    assert server.centre is not server.fused.buffer  # the centre is the server's own copy
    assert server.validation_comm is session_comm.role_comm and server.exchange_comm is exchange
    assert (server.server_rank, server.worker_ranks, server.worker_of_rank) == (0, [1, 2], {1: 0, 2: 1})
    assert server.shard_batches == [3, 5] and server.global_epoch == 8 and server.n_epochs == 2
    assert (server.ledger.target, server.ledger.granted, server.ledger.reported) == (16, [0, 0], 0)
    assert server.alpha.dtype == np.float32 and server.alpha == np.float32(0.3)
    assert server.buffers.incoming.shape == (9,) and [d.dtype for d in server.buffers.deltas] == ["float32"] * 2
    assert server.epochs_done == 0 and server.epoch_progress is None and server.snapshots.epoch is None
    assert (tmp_path / "run").is_dir() and not list((tmp_path / "run").iterdir())  # the records' place, no record

    server.hand_out_first_grants()
    assert exchange.collectives[-1] == ("scatter", 0) and exchange.scattered == [None, 2, 2]
    assert server.ledger.granted == [2, 2] and server.ledger.active == 2


def answer_one_exchange(server, exchange, worker_rank, steps, w):
    """Worker ``worker_rank`` reports ``steps`` and sends ``w``; the server answers it. Returns the centre before."""
    centre_before = server.centre.copy()
    exchange.arrive(worker_rank, TAG_REPORT, np.array([steps, 1.5, 0.25, 2 * 16, 0.0, 0.0, 4096.0]))
    exchange.arrive(worker_rank, TAG_PARAMS, w)
    server.serve_one()
    return centre_before


@pytest.mark.parametrize("alpha", [0.3, 1.0])
def test_one_serve_step_moves_the_centre_by_alpha_times_w_minus_c_and_replies_with_it(tmp_path, monkeypatch, alpha):
    server, exchange, _ = create_server(tmp_path, monkeypatch, [3, 5], alpha=alpha, tau=2, n_epochs=2)
    server.hand_out_first_grants()
    w = (START + np.random.default_rng(7).normal(size=START.size)).astype("float32")
    c = answer_one_exchange(server, exchange, worker_rank=2, steps=2, w=w)  # worker 1 asks; worker 0 has nothing
    reference = alpha * (w.astype(np.float64) - c.astype(np.float64))  # EASGD: d = alpha (w - c); c <- c + d
    np.testing.assert_allclose(server.centre, c + reference, rtol=0, atol=1e-6)
    (reply_to, reply_tag, reply), (delta_to, delta_tag, delta) = exchange.sent
    assert (reply_to, reply_tag, reply.tolist()) == (2, TAG_REPLY, [2, 0])  # the next 2 steps; no state wanted
    assert (delta_to, delta_tag) == (2, TAG_DELTA)
    np.testing.assert_allclose(delta, reference, rtol=0, atol=1e-6)
    assert server.ledger.reported == 2 and server.ledger.granted == [2, 2]
    assert server.tallies.exchanges == [0, 1] and server.recorder.train_sums() == [1.5, 0.25, 32.0]
    assert server.turns.next == 0  # worker 0 is asked first at the next turn


def test_a_worker_told_to_stop_leaves_its_state_as_its_snapshot(tmp_path, monkeypatch):
    server, exchange, _ = create_server(tmp_path, monkeypatch, [2, 2], alpha=0.5, tau=2, n_epochs=1)
    server.hand_out_first_grants()  # 4 steps in all: both grants hold them
    w = np.full(START.size, 3.0, "float32")
    exchange.arrive(1, TAG_STATE, {"state": [np.ones(2)], "steps": 2})  # sent right after the reply that says stop
    c = answer_one_exchange(server, exchange, worker_rank=1, steps=2, w=w)
    reply = exchange.sent[0][2]
    assert reply.tolist() == [0, 1] and server.ledger.active == 1  # stop, and send the state
    snapshot = server.snapshots.last[0]
    np.testing.assert_allclose(snapshot.params, w - 0.5 * (w - c), rtol=0, atol=1e-6)
    assert snapshot.steps == 2 and len(snapshot.state) == 1 and server.snapshots.last[1] is None


def save_easgd_checkpoint(directory, centre, iteration, epoch, n_workers=2, **extra):
    from theanompi.session.checkpoint import save_checkpoint

    params = [[np.zeros(shape, "float32") for shape in SHAPES]] * n_workers
    return save_checkpoint(directory, {"rule": "EASGD", "epoch": epoch, "iteration": iteration,
                                       "n_workers": n_workers, "seed": 0, "centre": centre, "worker_params": params,
                                       "worker_state": [[]] * n_workers,
                                       "worker_iterations": [iteration // n_workers] * n_workers, **extra})


def test_a_resumed_server_starts_from_the_checkpoints_centre_and_steps(tmp_path, monkeypatch):
    centre = np.arange(9, dtype="float32")
    path = save_easgd_checkpoint(tmp_path / "ckpts", centre, iteration=10, epoch=0)
    server, exchange, _ = create_server(tmp_path, monkeypatch, [3, 5], tau=2, n_epochs=3, resume=str(path))
    assert exchange.collectives == ["allgather", ("gather", 0)]  # every rank has its own start: no broadcast
    np.testing.assert_array_equal(server.centre, centre)
    assert (server.ledger.reported, server.ledger.target, server.epochs_done) == (10, 24, 1)
    assert server.recorder.iteration == 10


@pytest.mark.parametrize("saved, now, alpha", [(3, 2, 0.75), (2, 3, 0.5)])
def test_a_server_resumed_by_another_number_of_workers_keeps_the_centre_and_beta(tmp_path, monkeypatch, saved, now,
                                                                                 alpha):
    """A checkpoint of ``saved`` workers (beta = 1.5) resumed by ``now``: the centre bit for bit, alpha = beta / now."""
    centre = np.random.default_rng(3).standard_normal(9).astype("float32")
    path = save_easgd_checkpoint(tmp_path / "ckpts", centre, iteration=12, epoch=0, n_workers=saved, beta=1.5)
    server, _, _ = create_server(tmp_path, monkeypatch, [3] * now, alpha=1.5 / saved, tau=2, n_epochs=3,
                                 resume=str(path))
    assert server.centre.tobytes() == centre.tobytes()
    assert server.alpha == np.float32(alpha) and server.ledger.reported == 12


def test_a_checkpoints_centre_of_another_size_is_refused_naming_both_sizes(tmp_path, monkeypatch):
    path = save_easgd_checkpoint(tmp_path / "ckpts", np.zeros(5, "float32"), iteration=10, epoch=0)
    with pytest.raises(ContractError, match=r"RESUME=.*: the checkpoint's centre has 5 values, the model 9$"):
        create_server(tmp_path, monkeypatch, [3, 5], resume=str(path))


def test_the_server_counts_its_replies_and_keeps_what_each_worker_reported_it_sent(tmp_path, monkeypatch):
    server, exchange, _ = create_server(tmp_path, monkeypatch, [3, 5], alpha=0.5, tau=2, n_epochs=2)
    server.hand_out_first_grants()
    assert server.traffic.total == 0  # worker 0 roots the start's broadcast; grants are bookkeeping
    answer_one_exchange(server, exchange, worker_rank=2, steps=2, w=START.copy())  # its report says 4096 bytes
    reply_bytes = 2 * 8 + START.size * 4  # the reply (grant, send_state as int64) and d
    assert server.traffic.total == reply_bytes
    assert server.tallies.bytes_sent == [0, 4096]
    assert server.bytes_sent_by_rank() == [reply_bytes, 0, 4096]  # by session rank: server 0, workers 1 and 2
