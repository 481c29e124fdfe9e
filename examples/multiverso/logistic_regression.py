"""Logistic regression on digits with Multiverso-style shared variables, saved with pickle at the end.

    mpiexec -n 4 python examples/multiverso/logistic_regression.py
    python examples/multiverso/logistic_regression.py          # one process works too

The Multiverso version of a theano script: `multiverso` -> `theanompi.multiverso`,
`theano.shared` -> `mv_shared`, and `sync_all_mv_shared_vars()` after each batch. As in
Multiverso's example, the master pickles the trained model (its `mv_shared` variables pickle as
plain shared variables) and loads it back to predict. floatX is pytensor's own default here
(float64), as Theano's was: `import theanompi.multiverso` does not choose float32 for this script.
"""

import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt

import theanompi.multiverso as mv  # MULTIVERSO: was `import multiverso as mv`
from theanompi.models.data.digits import load_digits_split
from theanompi.multiverso.theano_ext import sharedvar  # MULTIVERSO: was multiverso.theano_ext


class LogisticRegression:
    """softmax(x W + b), its parameters in Multiverso's shared variables."""

    def __init__(self, x, n_in, n_out):
        # MULTIVERSO: theano.shared -> mv_shared (the master's initial value is used everywhere)
        self.W = sharedvar.mv_shared(value=np.zeros((n_in, n_out), dtype=pytensor.config.floatX), name="W",
                                     borrow=True)
        self.b = sharedvar.mv_shared(value=np.zeros(n_out, dtype=pytensor.config.floatX), name="b", borrow=True)
        self.x = x
        self.p_y = pt.special.softmax(x @ self.W + self.b, axis=1)  # Theano: T.nnet.softmax
        self.y_pred = pt.argmax(self.p_y, axis=1)

    def negative_log_likelihood(self, y):
        return -pt.mean(pt.log(self.p_y)[pt.arange(y.shape[0]), y])


mv.init()  # MULTIVERSO: start the parameter server
(x_train, y_train), (x_val, y_val) = load_digits_split(dtype=pytensor.config.floatX)
# MULTIVERSO: each worker trains on its own part of the data
x_train, y_train = x_train[mv.worker_id()::mv.workers_num()], y_train[mv.worker_id()::mv.workers_num()]

x, y = pt.matrix("x"), pt.ivector("y")
classifier = LogisticRegression(x, n_in=64, n_out=10)
cost = classifier.negative_log_likelihood(y)
gW, gb = pytensor.grad(cost, [classifier.W, classifier.b])
train = pytensor.function([x, y], cost, updates=[(classifier.W, classifier.W - 0.5 * gW),
                                                 (classifier.b, classifier.b - 0.5 * gb)])
predict = pytensor.function([x], classifier.y_pred)

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
    with tempfile.TemporaryDirectory() as tmp:  # Multiverso's example saves model.pkl; here a scratch directory
        path = Path(tmp) / "model.pkl"
        with open(path, "wb") as f:
            pickle.dump(classifier, f)
        with open(path, "rb") as f:
            loaded = pickle.load(f)
    predict_loaded = pytensor.function([loaded.x], loaded.y_pred)
    accuracy = float(np.mean(predict_loaded(x_val) == y_val))
    print(f"floatX {pytensor.config.floatX}; the pickled model predicts like the trained one: "
          f"{bool(np.array_equal(predict_loaded(x_val), predict(x_val)))}")
    print(f"final validation accuracy {100 * accuracy:.2f}%")
mv.shutdown()  # MULTIVERSO: stop the parameter server
