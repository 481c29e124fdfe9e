"""A PyTorch model trained with theanompi.multiverso: master or equality initialisation.

    mpiexec -n 2 python examples/multiverso/pytorch_model.py [master|equality]

Tables take torch CPU tensors directly (DLPack); get() returns numpy.
"""

import sys

import numpy as np
import torch

import theanompi.multiverso as mv
from theanompi.models.data.digits import load_digits_split

strategy = sys.argv[1] if len(sys.argv) > 1 else "master"
mv.init()
torch.manual_seed(mv.worker_id())  # deliberately different initial models
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
params = torch.nn.utils.parameters_to_vector(model.parameters()).detach()

if strategy == "master":
    # only the master's init_value lands on the server; everyone fetches it
    table = mv.ArrayTableHandler(params.numel(), init_value=params)
    mv.barrier()
else:
    # equality: every worker contributes 1/N of its model; the server holds the mean
    table = mv.ArrayTableHandler(params.numel())
    table.add(params / mv.workers_num(), sync=True)
    mv.barrier()
start = torch.from_numpy(table.get())
torch.nn.utils.vector_to_parameters(start, model.parameters())
mv.barrier()

(x_train, y_train), (x_val, y_val) = load_digits_split()
x = torch.from_numpy(x_train[mv.worker_id()::mv.workers_num()])
y = torch.from_numpy(y_train[mv.worker_id()::mv.workers_num()]).long()
lr = 0.1
for _epoch in range(15):
    for i in range(0, len(x), 32):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[i:i + 32]), y[i:i + 32]).backward()
        grads = torch.nn.utils.parameters_to_vector(p.grad for p in model.parameters())
        table.add(-lr * grads)  # add the delta, then fetch the newest parameters
        torch.nn.utils.vector_to_parameters(torch.from_numpy(table.get()), model.parameters())
mv.barrier()
if mv.is_master_worker():
    with torch.no_grad():
        pred = model(torch.from_numpy(x_val)).argmax(dim=1).numpy()
    print(f"{strategy} initialisation: start identical on all workers; "
          f"final validation accuracy {100 * float(np.mean(pred == y_val)):.2f}%")
mv.shutdown()
