"""Logistic regression on digits with Multiverso-style shared variables.

    mpiexec -n 4 python examples/multiverso/logistic_regression.py
    python examples/multiverso/logistic_regression.py          # one process works too

The Multiverso version of a theano script: `multiverso` -> `theanompi.multiverso`,
`theano.shared` -> `mv_shared`, and `sync_all_mv_shared_vars()` after each batch.
"""

from theanompi.backend.pytensor_config import configure_pytensor

configure_pytensor()  # C backend + BLAS, before pytensor is imported

import numpy as np  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402

import theanompi.multiverso as mv  # noqa: E402  (MULTIVERSO: was `import multiverso as mv`)
from theanompi.models.data.digits import load_digits_split  # noqa: E402
from theanompi.multiverso.theano_ext import sharedvar  # noqa: E402  (MULTIVERSO: was multiverso.theano_ext)

mv.init()  # MULTIVERSO: start the parameter server
(x_train, y_train), (x_val, y_val) = load_digits_split()
# MULTIVERSO: each worker trains on its own part of the data
x_train, y_train = x_train[mv.worker_id()::mv.workers_num()], y_train[mv.worker_id()::mv.workers_num()]

# MULTIVERSO: theano.shared -> mv_shared (the master's initial value is used everywhere)
W = sharedvar.mv_shared(value=np.zeros((64, 10), dtype="float32"), name="W", borrow=True)
b = sharedvar.mv_shared(value=np.zeros(10, dtype="float32"), name="b", borrow=True)
x, y = pt.matrix("x"), pt.ivector("y")
p_y = pt.special.softmax(x @ W + b, axis=1)
onehot = pt.eq(y[:, None], pt.arange(10)[None, :])
cost = -pt.mean(pt.sum(onehot * pt.log(p_y), axis=1))
gW, gb = pytensor.grad(cost, [W, b])
train = pytensor.function([x, y], cost, updates=[(W, W - 0.5 * gW), (b, b - 0.5 * gb)])
predict = pytensor.function([x], pt.argmax(p_y, axis=1))

batch = 20
for epoch in range(10):
    for start in range(0, len(x_train), batch):
        train(x_train[start:start + batch], y_train[start:start + batch])
        sharedvar.sync_all_mv_shared_vars()  # MULTIVERSO: push the change, fetch the server's values
    if mv.is_master_worker():  # MULTIVERSO: validate on the master only
        accuracy = float(np.mean(predict(x_val) == y_val))
        print(f"epoch {epoch + 1}: validation accuracy {100 * accuracy:.2f}%", flush=True)
mv.barrier()
if mv.is_master_worker():
    sharedvar.sync_all_mv_shared_vars()
    print(f"final validation accuracy {100 * float(np.mean(predict(x_val) == y_val)):.2f}%")
mv.shutdown()  # MULTIVERSO: stop the parameter server
