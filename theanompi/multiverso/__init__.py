"""Multiverso-style parameter-server API: ``import theanompi.multiverso as mv``.

Scripts written for Multiverso's Python binding run after replacing ``multiverso`` by
``theanompi.multiverso`` in their imports: ``mv.init()``, ``mv.ArrayTableHandler``,
``mv.MatrixTableHandler``, ``mv.barrier()``, ``mv.workers_num()``, ``mv.worker_id()``,
``mv.server_id()``, ``mv.is_master_worker()``, ``mv.shutdown()``, and the extensions under
:mod:`theanompi.multiverso.theano_ext` (``sharedvar``, ``param_manager``,
``lasagne_ext.param_manager``, ``keras_ext.callbacks``). See :mod:`theanompi.multiverso.api`
for the blocking rules and the barrier guarantee, :mod:`theanompi.multiverso.guards` for how
failures end every worker.
"""

from theanompi.multiverso.api import barrier, init, is_master_worker, server_id, shutdown, worker_id, workers_num
from theanompi.multiverso.guards import install_pre_init_hook
from theanompi.multiverso.tables import ArrayTableHandler, MatrixTableHandler

install_pre_init_hook()  # under mpiexec: an exception before mv.init() ends every worker, not just this one

__all__ = ["ArrayTableHandler", "MatrixTableHandler", "barrier", "init", "is_master_worker", "server_id", "shutdown",
           "worker_id", "workers_num"]
