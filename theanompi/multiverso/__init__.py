"""Multiverso-style parameter-server API: ``import theanompi.multiverso as mv``.

Scripts written for Multiverso's Python binding run after replacing ``multiverso`` by
``theanompi.multiverso`` in their imports: ``mv.init()``, ``mv.ArrayTableHandler``,
``mv.MatrixTableHandler``, ``mv.barrier()``, ``mv.workers_num()``, ``mv.worker_id()``,
``mv.server_id()``, ``mv.is_master_worker()``, ``mv.shutdown()``, and the extensions under
:mod:`theanompi.multiverso.theano_ext` (``sharedvar``, ``param_manager``,
``lasagne_ext.param_manager``, ``keras_ext.callbacks``). See :mod:`theanompi.multiverso.api`
for the blocking rules and the barrier guarantee, :mod:`theanompi.multiverso.guards` for how
failures end every worker.

Importing it also gives what a Multiverso script expects of its process: ``import lasagne`` works where
Lasagne is not installed (:mod:`theanompi.lasagne`, as inside a session), and pytensor's ``floatX`` stays
pytensor's own default (float64, Theano's, which Multiverso's examples and tests assume) unless the user set
one, where ``import theanompi`` would choose float32 (see
:func:`theanompi.backend.pytensor_config.leave_floatx_to_pytensor`; sessions and the layer library keep
float32).
"""

from theanompi import lasagne_alias
from theanompi.backend.pytensor_config import leave_floatx_to_pytensor
from theanompi.multiverso.api import barrier, init, is_master_worker, server_id, shutdown, worker_id, workers_num
from theanompi.multiverso.guards import install_pre_init_hook
from theanompi.multiverso.tables import ArrayTableHandler, MatrixTableHandler

install_pre_init_hook()  # under mpiexec: an exception before mv.init() ends every worker, not just this one
lasagne_alias.install()  # `import lasagne` as in a session (theanompi.lasagne where Lasagne is absent)
leave_floatx_to_pytensor()  # a Multiverso script keeps pytensor's floatX unless it sets one

__all__ = ["ArrayTableHandler", "MatrixTableHandler", "barrier", "init", "is_master_worker", "server_id", "shutdown",
           "worker_id", "workers_num"]
