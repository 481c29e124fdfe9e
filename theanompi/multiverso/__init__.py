"""Multiverso-style parameter-server API: ``import theanompi.multiverso as mv``.

Scripts written for Multiverso's Python binding run after one changed import:
``mv.init()``, ``mv.ArrayTableHandler``, ``mv.MatrixTableHandler``, ``mv.barrier()``,
``mv.workers_num()``, ``mv.worker_id()``, ``mv.is_master_worker()``, ``mv.shutdown()``;
``theanompi.multiverso.sharedvar.mv_shared`` and
``theanompi.multiverso.param_manager.MVNetParamManager`` replace the theano and
lasagne extensions. See :mod:`theanompi.multiverso.api` for the blocking rules.
"""

from theanompi.multiverso.api import barrier, init, is_master_worker, server_id, shutdown, worker_id, workers_num
from theanompi.multiverso.guards import install_pre_init_hook
from theanompi.multiverso.tables import ArrayTableHandler, MatrixTableHandler

install_pre_init_hook()  # under mpiexec: an exception before mv.init() ends every worker, not just this one

__all__ = ["ArrayTableHandler", "MatrixTableHandler", "barrier", "init", "is_master_worker", "server_id", "shutdown",
           "worker_id", "workers_num"]
