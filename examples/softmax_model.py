"""A complete ModelClass written from scratch (no theanompi base class): softmax regression on digits.

Launch it with ``tmlauncher -cfg=examples/softmax.cfg`` or from Python::

    from theanompi import BSP
    rule = BSP()
    rule.init(devices=["cpu0", "cpu1"], modelfile="examples/softmax_model.py", modelclass="SoftmaxRegression")
    rule.wait()
"""

import numpy as np
import pytensor
import pytensor.tensor as pt

from theanompi.models.data.base import ShardedArrayData
from theanompi.models.data.digits import load_digits_split


class SoftmaxRegression:
    n_epochs = 10  # used when N_EPOCHS is not given

    def __init__(self, config):
        # config: rank, size, seed, device, sync_type, options, model_options, run_dir
        self.config = config
        batch_size = int(config.model_options.get("batch_size", 32))
        (xt, yt), (xv, yv) = load_digits_split()
        # DataClass: needs n_batch_train and n_batch_val; this one shards by rank with a common shuffle
        self.data = ShardedArrayData(xt, yt, xv, yv, batch_size, config.rank, config.size, config.seed)
        self.W = pytensor.shared(np.zeros((64, 10), "float32"), name="W")
        self.b = pytensor.shared(np.zeros(10, "float32"), name="b")
        self.params = [self.W, self.b]  # trainable shared variables, all float32 (one fused buffer)
        self.lr = pytensor.shared(np.float32(0.5), name="lr")  # shared: adjustable without recompiling

    def compile_iter_fns(self, sync_type):
        self.sync_type = sync_type
        x, y = pt.matrix("x"), pt.ivector("y")
        logits = x @ self.W + self.b
        onehot = pt.eq(y[:, None], pt.arange(10)[None, :]).astype("float32")
        loss = -pt.mean(pt.sum(onehot * pt.special.log_softmax(logits, axis=1), axis=1))
        error = pt.mean(pt.neq(pt.argmax(logits, axis=1), y))
        grads = pytensor.grad(loss, self.params)
        if sync_type == "cdd":
            # phase 1: the update vector (gradient) as one flat float32 array; params untouched
            flat = pt.concatenate([g.ravel() for g in grads])
            self.grad_fn = pytensor.function([x, y], [flat, loss, error])
            # phase 2: apply the SUM of all workers' vectors, divided by the number of workers
            total = pt.vector("total", dtype="float32")
            gW = total[:640].reshape((64, 10)) / self.config.size
            gb = total[640:] / self.config.size
            self.update_fn = pytensor.function([total], [], updates=[(self.W, self.W - self.lr * gW),
                                                                     (self.b, self.b - self.lr * gb)])
        else:  # 'avg', 'local' (one worker) or other rules: one function does the whole local step
            updates = [(p, p - self.lr * g) for p, g in zip(self.params, grads)]
            self.train_fn = pytensor.function([x, y], [loss, error], updates=updates)
        self.val_fn = pytensor.function([x, y], [loss, error])

    def adjust_hyperp(self, epoch):
        self.data.set_epoch(epoch)  # the common per-epoch shuffle
        self.lr.set_value(np.float32(0.5 if epoch < 5 else 0.1))

    def train_iter(self, count, recorder):
        with recorder.timer("wait"):
            xb, yb = self.data.train_batch(count)
        if self.sync_type == "cdd":
            vector, loss, error = self.grad_fn(xb, yb)
            recorder.record_train(loss, error, len(yb))
            return vector
        loss, error = self.train_fn(xb, yb)
        recorder.record_train(loss, error, len(yb))

    def apply_update(self, vector_sum):
        self.update_fn(vector_sum)

    def val_iter(self, count, recorder):
        xb, yb = self.data.val_batch(count)
        loss, error = self.val_fn(xb, yb)
        recorder.record_val(loss, error, len(yb))

    def cleanup(self):
        pass
