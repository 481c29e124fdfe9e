"""A checkpoint resumed at another number of workers, per rule: what each worker starts from (the methods alone,
on stand-ins for a worker; sessions: tests/sessions/test_elastic.py)."""

from types import SimpleNamespace

import numpy as np
import pytest

from theanompi.rules.bsp import BSPWorker
from theanompi.rules.easgd.server import rescaled_alpha
from theanompi.rules.easgd.worker import EASGDWorker
from theanompi.rules.gosgd import GOSGDWorker
from theanompi.runtime.worker_loop import WorkerLoop

SHAPES = [(2, 3), (3,)]


def workers(n, seed=0):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype("float32") for s in SHAPES] for _ in range(n)]


def stand_in(cls, **fields):
    """An object of a worker class without its constructor (nothing built), holding ``fields``."""
    worker = cls.__new__(cls)
    worker.__dict__.update(fields)
    return worker


def mean(rows, i):
    return np.mean([np.asarray(row[i], dtype=np.float64) for row in rows], axis=0).astype("float32")


def test_bsp_workers_all_start_from_the_consensus_at_another_size_and_from_their_own_at_the_same():
    params, state = workers(3), workers(3, seed=1)
    payload = {"n_workers": 3, "worker_params": params, "worker_state": state, "worker_rule_state": [{}] * 3}
    got_params, got_state = BSPWorker.resumed_state(stand_in(BSPWorker, comm=SimpleNamespace(size=2)), payload, 2)
    for i in range(len(SHAPES)):
        np.testing.assert_array_equal(got_params[i], mean(params, i))
        np.testing.assert_array_equal(got_state[i], mean(state, i))
    same = stand_in(BSPWorker, comm=SimpleNamespace(size=3))
    assert BSPWorker.resumed_state(same, payload, slot=2) == (params[2], state[2])


def test_easgd_workers_that_join_start_from_the_centre_with_a_fresh_optimizer():
    params = workers(2)
    centre = np.arange(9, dtype="float32")
    payload = {"n_workers": 2, "centre": centre, "worker_params": params, "worker_state": [[1.0], [2.0]]}
    got, state = WorkerLoop.resumed_state(SimpleNamespace(), payload, slot=None)
    assert np.concatenate([g.ravel() for g in got]).tolist() == centre.tolist() and state == []
    assert EASGDWorker.resumed_state(stand_in(EASGDWorker), payload, slot=1) == (params[1], [2.0])


@pytest.mark.parametrize("saved, n, rescaled", [(3, 2, 0.75), (2, 3, 0.5), (2, 1, 1.0)])
def test_easgd_alpha_keeps_beta_capped_at_1(saved, n, rescaled):
    assert rescaled_alpha({"n_workers": saved, "beta": 1.5}, 0.5 * 3 / saved, n) == rescaled


def gossip(slot, weights, size):
    """A stand-in GOSGD worker whose comm sums the weights the workers would give."""
    others = sum(w for k, w in enumerate(weights) if k != slot)  # what the other workers bring to the sum
    comm = SimpleNamespace(allreduce=lambda weight: weight + others)
    return SimpleNamespace(size=size, rank=0, comm=comm)


def test_gosgd_weights_are_renormalised_to_sum_to_1_and_a_joiner_takes_1_over_n():
    payload = {"n_workers": 3, "worker_rule_state": [{"weight": 0.5}, {"weight": 0.3}, {"weight": 0.2}]}
    # worker 1 lost: the 2 left keep 0.5 and 0.2 of the 0.7 they hold together
    kept = [GOSGDWorker.resumed_weight(gossip(k, [0.5, 0.2], 2), payload, slot) for k, slot in enumerate([0, 2])]
    assert kept == pytest.approx([0.5 / 0.7, 0.2 / 0.7]) and sum(kept) == pytest.approx(1.0, abs=1e-15)
    # 3 workers and one joins with 1/4
    weights = [0.5, 0.3, 0.2, 0.25]
    grown = [GOSGDWorker.resumed_weight(gossip(k, weights, 4), payload, slot)
             for k, slot in enumerate([0, 1, 2, None])]
    assert grown == pytest.approx([w / 1.25 for w in weights]) and sum(grown) == pytest.approx(1.0, abs=1e-15)
    same = [GOSGDWorker.resumed_weight(gossip(k, [], 3), payload, k) for k in range(3)]
    assert same == [0.5, 0.3, 0.2]  # the same workers: their own weights, as saved
