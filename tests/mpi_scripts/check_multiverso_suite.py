"""Multiverso's own test-suite and tutorial scenarios, written as a Multiverso script would be
(the only change: ``multiverso`` -> ``theanompi.multiverso``). Run under 1, 2 or 4 ranks.

Scenarios, once on an async server (``mv.init()``) and once on a sync server given
as Multiverso's older flag list (``mv.init([b"", b"-sync=true"])``), in one process:

* array table: two un-acknowledged adds of ``range(1, size + 1)`` per round, barrier, exact values;
* matrix table: whole-table add of a flat ``range`` plus row adds (list of ranges, row ids
  positional), barrier, exact values of ``get()`` and ``get(row_ids)``;
* ``sharedvar.mv_shared(value=..., name=..., borrow=True)`` updated by a compiled function,
  ``sync_all_mv_shared_vars()``, barrier, sync again, exact values;
* ``LasagneParamManager(network)`` + ``sync_all_param()`` and the older
  ``MVNetParamManager(network, is_master_worker)`` + ``update_all_param()`` (here the
  last worker gives the start values);
* the per-worker GPU recipe: ``mv.worker_id()`` before pytensor/jax are imported.
"""

import os
import sys

import _abort_on_error  # noqa: F401
import numpy as np

import theanompi.multiverso as mv

mv.init()
# the GPU recipe of Multiverso's docs: pick the device from worker_id() before the compute library loads
assert not {"pytensor", "jax", "cupy"} & set(sys.modules), "theanompi.multiverso imported a compute library"
os.environ.setdefault("CUDA_VISIBLE_DEVICES", str(mv.worker_id()))
assert mv.server_id() == (0 if mv.is_master_worker() else -1)

from theanompi.backend.pytensor_config import configure_pytensor  # noqa: E402

configure_pytensor()
import pytensor  # noqa: E402

import theanompi.nn as L  # noqa: E402
from theanompi.multiverso.theano_ext import sharedvar  # noqa: E402
from theanompi.multiverso.theano_ext.lasagne_ext import param_manager  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 100  # Multiverso's test: 100


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(f"worker {mv.worker_id()}: {what}")


def array_scenario(size: int) -> None:
    tbh = mv.ArrayTableHandler(size)
    mv.barrier()
    expected_unit = np.arange(1, size + 1, dtype=np.float32) * 2 * mv.workers_num()
    for i in range(ROUNDS):
        tbh.add(range(1, size + 1))
        tbh.add(range(1, size + 1))
        mv.barrier()
        check(np.array_equal(tbh.get(), expected_unit * (i + 1)), f"array round {i}")
        mv.barrier()


def matrix_scenario() -> None:
    num_row, num_col = 11, 10
    size, n = num_row * num_col, mv.workers_num()
    tbh = mv.MatrixTableHandler(num_row, num_col)
    mv.barrier()
    row_ids = [0, 1, 5, 10]
    base = np.arange(size, dtype=np.float32).reshape(num_row, num_col)
    for count in range(1, 21):
        tbh.add(range(size))
        tbh.add([range(rid * num_col, (1 + rid) * num_col) for rid in row_ids], row_ids)
        mv.barrier()
        data = tbh.get()
        mv.barrier()
        expected = base * count * n
        expected[row_ids] *= 2
        check(np.array_equal(data, expected), f"matrix round {count}")
        data = tbh.get(row_ids)
        mv.barrier()
        check(np.array_equal(data, expected[row_ids]), f"matrix rows round {count}")


def sharedvar_scenario(row: int, col: int) -> None:
    W = sharedvar.mv_shared(value=np.zeros((row, col), dtype="float32"), name="W", borrow=True)
    # Multiverso's test adds 1..row*col; modulo 64 keeps every sum below 2**24, where float32 is exact
    delta = (np.arange(row * col, dtype="float32") % 64 + 1).reshape(row, col)
    train_model = pytensor.function([], updates=[(W, W + delta)])
    mv.barrier()
    for i in range(ROUNDS):
        train_model()
        train_model()
        sharedvar.sync_all_mv_shared_vars()
        mv.barrier()
        sharedvar.sync_all_mv_shared_vars()  # the newest values need a second sync
        check(np.array_equal(W.get_value(), delta * (i + 1) * 2 * mv.workers_num()), f"mv_shared round {i}")
        mv.barrier()


def param_manager_scenario() -> None:
    me, n = mv.worker_id(), mv.workers_num()
    L.init.set_rng(np.random.default_rng(me))  # every worker builds different start values
    net = L.DenseLayer(L.DenseLayer(L.InputLayer((None, 4)), 3), 2)
    mine = np.concatenate([v.ravel() for v in L.get_all_param_values(net)])
    manager = param_manager.LasagneParamManager(net)
    start = np.concatenate([v.ravel() for v in L.get_all_param_values(net)])
    everyone = mv_allgather(start)
    check(all(np.array_equal(s, everyone[0]) for s in everyone), "LasagneParamManager: different starts")
    if mv.is_master_worker():
        check(np.allclose(start, mine), "LasagneParamManager: the start is not the master's values")
    step = [np.full_like(v, me + 1) for v in L.get_all_param_values(net)]
    L.set_all_param_values(net, [v + s for v, s in zip(L.get_all_param_values(net), step)])
    manager.sync_all_param()
    mv.barrier()
    manager.sync_all_param()
    total = sum(range(1, n + 1))
    after = np.concatenate([v.ravel() for v in L.get_all_param_values(net)])
    check(np.allclose(after, start + total, atol=1e-5), "LasagneParamManager: sum of the workers' changes")
    mv.barrier()

    giver = n - 1  # Multiverso's older manager: the worker told it is master gives the start values
    old = param_manager.MVNetParamManager(net, mv.worker_id() == giver)
    values = np.concatenate([v.ravel() for v in L.get_all_param_values(net)])
    check(np.array_equal(values, mv_allgather(values)[giver]), "MVNetParamManager: start is not the giver's")
    old.update_all_param()
    mv.barrier()


def mv_allgather(vector):
    from mpi4py import MPI

    return MPI.COMM_WORLD.allgather(np.asarray(vector))


workers = mv.workers_num()
for init_args in ((), ([b"", b"-sync=true"],)):
    if init_args:
        mv.init(*init_args)
        check(mv.api.session().sync, "the -sync=true flag did not make a sync server")
    array_scenario(10000)
    matrix_scenario()
    sharedvar_scenario(200, 200)
    param_manager_scenario()
    mv.shutdown()
print(f"worker ok: Multiverso's suite scenarios on async and sync servers, {workers} workers", flush=True)
