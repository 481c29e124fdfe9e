"""A network's parameters synced with LasagneParamManager (Multiverso's Lasagne extension).

    mpiexec -n 2 python examples/multiverso/network_param_manager.py

The network is theanompi's MLP (any object with `.params`, a list of shared
variables, or a Lasagne-style layer works).
"""

from theanompi.backend.pytensor_config import configure_pytensor

configure_pytensor()


import theanompi.multiverso as mv  # noqa: E402
from theanompi.models.contract import WorkerConfig  # noqa: E402
from theanompi.models.mlp import MLP  # noqa: E402
from theanompi.multiverso.theano_ext.lasagne_ext import param_manager  # noqa: E402
from theanompi.session.recorder import Recorder  # noqa: E402

mv.init()
config = WorkerConfig(rank=mv.worker_id(), size=mv.workers_num(), seed=mv.worker_id(), device="cpu0",
                      model_options={"hidden": 128, "batch_size": 32})
model = MLP(config)  # every worker initialises differently (seed = worker id) ...
model.compile_iter_fns("local")
manager = param_manager.LasagneParamManager(model)  # ... but all start from the master's parameters
recorder = Recorder(None)
for epoch in range(8):
    model.adjust_hyperp(epoch)
    for count in range(model.data.n_batch_train):
        model.train_iter(count, recorder)
        manager.sync_all_param()  # add the local change, fetch the server's parameters
mv.barrier()
manager.sync_all_param()
if mv.is_master_worker():
    model.data = MLP(WorkerConfig(rank=0, size=1, seed=0, device="cpu0")).data  # the whole validation set
    for count in range(model.data.n_batch_val):
        model.val_iter(count, recorder)
    loss, errors, n = recorder.val_sums()
    print(f"final validation accuracy {100 * (1 - errors / n):.2f}%")
mv.shutdown()
