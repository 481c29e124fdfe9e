"""ModelClasses written the way Theano-MPI users write them (dict config, shared file batches sliced
into sub-batches, theanompi.lib.opt, Theano-MPI's recorder names, reset_iter, adjust_hyperp after the
epoch), on pytensor. Used through MODELFILE=tests/assets/theanompi_idiom_models.py.

``DigitsMLP`` trains on scikit-learn's digits held as "file batches" of ``file_batch_size`` images
that the model shuffles (``common_seed=epoch``) and shards (``rank::size``) itself, ``n_subb`` = 2
sub-batches per file batch.
"""

import numpy as np
import pytensor
import pytensor.tensor as T

from theanompi.models.data.digits import load_digits_split

n_epochs = 4
learning_rate = 0.05
momentum = 0.9
weight_decay = 1e-4
file_batch_size = 64
batch_size = 32
lr_step = [3]


class DigitsFiles:
    """Digits cut into file batches; Theano-MPI's batch/shuffle/shard steps by hand."""

    def __init__(self, rank, size):
        (xt, yt), (xv, yv) = load_digits_split()
        self.rank, self.size = rank, size
        self.train = self._files(xt, yt)
        self.val = self._files(xv, yv)
        self.shuffle_train(common_seed=0)
        self.val_files = self.val[rank::size]
        self.n_batch_val = len(self.val_files)

    @staticmethod
    def _files(x, y):
        n = len(x) // file_batch_size
        return [(x[i * file_batch_size:(i + 1) * file_batch_size], y[i * file_batch_size:(i + 1) * file_batch_size])
                for i in range(n)]

    def shuffle_train(self, common_seed):
        order = np.random.RandomState(common_seed).permutation(len(self.train))
        usable = len(order) - len(order) % self.size  # every rank gets the same number of files
        self.train_files = [self.train[i] for i in order[:usable]][self.rank::self.size]
        self.n_batch_train = len(self.train_files)


class DigitsMLP:
    def __init__(self, config):
        self.verbose = config['verbose']
        self.rank = config['rank']
        self.size = config['size']
        self.run_dir = config['run_dir']
        self.name = 'DigitsMLP'
        self.data = DigitsFiles(self.rank, self.size)
        self.batch_size = batch_size
        self.file_batch_size = file_batch_size
        self.n_subb = file_batch_size // batch_size
        self.n_epochs = n_epochs
        self.epoch = 0
        self.mu = momentum
        self.eta = weight_decay
        self.use_momentum = True
        self.use_nesterov_momentum = False
        self.base_lr = np.float32(learning_rate)
        self.shared_lr = pytensor.shared(self.base_lr)
        self.shared_x = pytensor.shared(np.zeros((file_batch_size, 64), dtype='float32'), borrow=True)
        self.shared_y = pytensor.shared(np.zeros((file_batch_size,), dtype='int64'), borrow=True)
        self.subb_ind = T.iscalar('subb')
        part = slice(self.subb_ind * batch_size, (self.subb_ind + 1) * batch_size)
        self.shared_x_slice = self.shared_x[part]
        self.shared_y_slice = self.shared_y[part]
        self.build_model()
        self.grads = T.grad(self.cost, self.params)
        self.compiled_train_fn_list = []
        self.current_t = self.subb_t = 0
        self.current_v = self.subb_v = 0
        self.lr_seen = []  # shared_lr at every epoch start (tests read it)

    def build_model(self):
        rng = np.random.RandomState(1234)
        self.x = T.fmatrix('x')
        self.y = T.lvector('y')
        self.lr = T.scalar('lr', dtype='float32')
        W1 = pytensor.shared((rng.randn(64, 64) * 0.1).astype('float32'), name='W1')
        b1 = pytensor.shared(np.zeros(64, dtype='float32'), name='b1')
        W2 = pytensor.shared((rng.randn(64, 10) * 0.1).astype('float32'), name='W2')
        b2 = pytensor.shared(np.zeros(10, dtype='float32'), name='b2')
        hidden = T.tanh(T.dot(self.x, W1) + b1)
        p_y = T.special.softmax(T.dot(hidden, W2) + b2, axis=1)
        self.params = [W1, b1, W2, b2]
        self.weight_types = ['W', 'b', 'W', 'b']
        self.cost = -T.mean(T.log(p_y)[T.arange(self.y.shape[0]), self.y])
        self.error = T.mean(T.neq(T.argmax(p_y, axis=1), self.y))
        self.error_top_5 = T.mean(T.neq(T.argsort(p_y, axis=1)[:, -5:], self.y[:, None]).min(axis=1))

    def compile_train(self, *args):
        for arg_list in args:
            self.compiled_train_fn_list.append(pytensor.function(**arg_list))

    def compile_val(self):
        self.val_fn = pytensor.function([self.subb_ind], [self.cost, self.error, self.error_top_5],
                                        givens=[(self.x, self.shared_x_slice), (self.y, self.shared_y_slice)])

    def compile_iter_fns(self, *args, **kwargs):
        from theanompi.lib.opt import pre_model_iter_fn

        pre_model_iter_fn(self, k=self.size)

    def reset_iter(self, mode):
        if mode == 'train':
            self.current_t = self.subb_t = 0
        else:
            self.current_v = self.subb_v = 0

    def train_iter(self, count, recorder):
        if self.current_t == 0 and self.subb_t == 0:
            self.data.shuffle_train(common_seed=self.epoch)
            self.lr_seen.append(float(self.shared_lr.get_value()))
        if self.subb_t == 0:
            recorder.start()
            x, y = self.data.train_files[self.current_t]
            self.shared_x.set_value(x)
            self.shared_y.set_value(y.astype('int64'))
            recorder.end('wait')
        recorder.start()
        cost, error = self.train_iter_fn(self.subb_t)
        recorder.train_error(count, cost, error)
        recorder.end('calc')
        self.subb_t += 1
        if self.subb_t == self.n_subb:
            self.subb_t = 0
            self.current_t += 1

    def val_iter(self, count, recorder):
        if self.subb_v == 0:
            x, y = self.data.val_files[self.current_v]
            self.shared_x.set_value(x)
            self.shared_y.set_value(y.astype('int64'))
        cost, error, error_top5 = self.val_iter_fn(self.subb_v)
        recorder.val_error(count, cost, error, error_top5)
        self.subb_v += 1
        if self.subb_v == self.n_subb:
            self.subb_v = 0
            self.current_v += 1

    def adjust_hyperp(self, epoch):
        if epoch + 1 in lr_step:  # called after epoch `epoch`: decay for the next one
            self.shared_lr.set_value(np.float32(self.shared_lr.get_value() / 10.))

    def scale_lr(self, size):
        self.shared_lr.set_value(np.array(self.shared_lr.get_value() * size, dtype='float32'))

    def cleanup(self):
        import json

        if self.run_dir is not None:  # what the test reads: the learning rate of every epoch
            (self.run_dir / f'lr-rank{self.rank}.json').write_text(json.dumps(self.lr_seen))


class DigitsMLPPlainSGD(DigitsMLP):
    """Theano-MPI's BSP_SGD path (no momentum)."""

    def __init__(self, config):
        super().__init__(config)
        self.use_momentum = False


class DigitsMLPNoVels(DigitsMLP):
    """Compiles a local step by hand (no lib.opt, so no vels/vels2)."""

    def compile_iter_fns(self, *args, **kwargs):
        updates = [(p, p - self.shared_lr * g) for p, g in zip(self.params, self.grads)]
        step = pytensor.function([self.subb_ind], [self.cost, self.error], updates=updates,
                                 givens=[(self.x, self.shared_x_slice), (self.y, self.shared_y_slice)])
        self.train_iter_fn = step
        self.compile_val()
        self.val_iter_fn = self.val_fn

