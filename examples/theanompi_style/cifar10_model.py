"""A CIFAR-10 ModelClass written the way Theano-MPI users write them, run by theanompi unchanged.

Dict-style config, ``Cifar10_data`` (from ``MODEL_DATA_DIR``: the python batch files), c01b file
batches in a shared variable sliced into ``n_subb`` sub-batches, ``theanompi.models.layers2``,
``theanompi.lib.opt.pre_model_iter_fn``, Theano-MPI's recorder calls, ``reset_iter``. Under BSP it
trains with Theano-MPI's cdd (momenta summed into ``vels2``).

    tmlauncher -cfg=examples/theanompi_style/session.cfg --set MODEL_DATA_DIR=/data/cifar-10-batches-py

(``tests/sessions/test_theanompi_compat.py`` runs it on generated CIFAR-format files.)
"""

import numpy as np
import pytensor
import pytensor.tensor as T


class Cifar10_model:
    """A small CNN in Theano-MPI's CIFAR-10 idiom: Cifar10_data from MODEL_DATA_DIR, c01b file batches,
    layers2 (Subtract -> Crop -> Dimshuffle -> Conv -> Pool -> Flatten -> FC -> Dropout -> Softmax),
    lib.opt, Dropout/Crop switched off for validation."""

    file_batch_size = 32
    batch_size = 16

    def __init__(self, config):
        self.verbose = config['verbose']
        self.rank = config['rank']
        self.size = config['size']
        self.name = 'Cifar10_model'
        from theanompi.models.data import Cifar10_data

        self.data = Cifar10_data(verbose=False)
        self.channels = self.data.channels
        self.n_softmax_out = self.data.n_class
        self.file_batch_size, self.batch_size = Cifar10_model.file_batch_size, Cifar10_model.batch_size
        self.data.batch_data(self.file_batch_size)
        self.data.extend_data(rank=self.rank, size=self.size)
        self.data.shuffle_data(mode='train', common_seed=1234)
        self.data.shuffle_data(mode='val')
        self.data.shard_data(mode='train', rank=self.rank, size=self.size)
        self.data.shard_data(mode='val', rank=self.rank, size=self.size)
        self.n_epochs = 3
        self.epoch = 0
        self.mu = 0.9
        self.eta = 1e-4
        self.use_momentum = True
        self.use_nesterov_momentum = False
        self.shared_lr = pytensor.shared(np.float32(0.05))
        self.shared_x = pytensor.shared(np.zeros((3, self.data.width, self.data.height, self.file_batch_size),
                                                 dtype=pytensor.config.floatX), borrow=True)
        self.shared_y = pytensor.shared(np.zeros((self.file_batch_size,), dtype=int), borrow=True)
        self.subb_ind = T.iscalar('subb')
        part = slice(self.subb_ind * self.batch_size, (self.subb_ind + 1) * self.batch_size)
        self.shared_x_slice = self.shared_x[:, :, :, part]
        self.shared_y_slice = self.shared_y[part]
        self.build_model()
        from theanompi.models.layers2 import count_params, get_layers, get_params

        self.layers = get_layers(lastlayer=self.output_layer)
        self.params, self.weight_types = get_params(self.layers)
        count_params(self.params, self.verbose)
        self.grads = T.grad(self.cost, self.params)
        self.compiled_train_fn_list = []
        self.n_subb = self.file_batch_size // self.batch_size
        self.current_t = self.subb_t = 0
        self.current_v = self.subb_v = 0

    def build_model(self):
        from theanompi.models.layers2 import (
            FC,
            Constant,
            Conv,
            Crop,
            Dimshuffle,
            Dropout,
            Flatten,
            Normal,
            Pool,
            Softmax,
            Subtract,
        )

        self.x = T.ftensor4('x')
        self.y = T.lvector('y')
        self.lr = T.scalar('lr')
        b = self.batch_size
        subtract = Subtract(input=self.x, input_shape=(self.channels, self.data.width, self.data.height, b),
                            subtract_arr=self.data.rawdata[4] / 255., printinfo=False)
        # the images' class is a 3-row band: crop to the full size (random mirror only) so crops keep it
        crop = Crop(input=subtract, output_shape=(self.channels, 32, 32, b), flag_batch=True, printinfo=False)
        shuffle = Dimshuffle(input=crop, new_axis_order=(3, 0, 1, 2), printinfo=False)
        conv = Conv(input=shuffle, input_shape=(b, self.channels, 32, 32), convstride=1, padsize=0,
                    W=Normal((8, self.channels, 5, 5), std=0.05), b=Constant((8,), val=0), printinfo=False)
        pool = Pool(input=conv, poolsize=2, poolstride=2, poolpad=0, mode='max', printinfo=False)
        flatten = Flatten(input=pool, axis=2, printinfo=False)
        fc = FC(input=flatten, n_out=32, W=Normal((flatten.output_shape[1], 32), std=0.1),
                b=Constant((32,), val=0), printinfo=False)
        dropout = Dropout(input=fc, n_out=fc.output_shape[1], prob_drop=0.5, printinfo=False)
        softmax = Softmax(input=dropout, n_out=self.n_softmax_out,
                          W=Normal((dropout.output_shape[1], self.n_softmax_out), std=0.1),
                          b=Constant((self.n_softmax_out,), val=0), printinfo=False)
        self.output_layer = softmax
        self.cost = softmax.negative_log_likelihood(self.y)
        self.error = softmax.errors(self.y)
        self.error_top_5 = softmax.errors_top_x(self.y)

    def compile_train(self, *args):
        for arg_list in args:
            self.compiled_train_fn_list.append(pytensor.function(**arg_list))

    def compile_val(self):
        self.val_fn = pytensor.function([self.subb_ind], [self.cost, self.error, self.error_top_5], updates=[],
                                        givens=[(self.x, self.shared_x_slice), (self.y, self.shared_y_slice)])

    def compile_iter_fns(self, *args, **kwargs):
        from theanompi.lib.opt import pre_model_iter_fn

        pre_model_iter_fn(self, k=self.size)

    def reset_iter(self, mode):
        if mode == 'train':
            self.current_t = self.subb_t = 0
        else:
            self.current_v = self.subb_v = 0

    def _load(self, images, labels, index):
        self.shared_x.set_value(np.rollaxis(images[index], 0, 4).astype('float32') / 255.)
        self.shared_y.set_value(np.asarray(labels[index], dtype=int))

    def train_iter(self, count, recorder):
        if self.current_t == 0 and self.subb_t == 0:
            self.data.shuffle_data(mode='train', common_seed=self.epoch)
            self.data.shard_data(mode='train', rank=self.rank, size=self.size)
        if self.subb_t == 0:
            recorder.start()
            self._load(self.data.train_img_shard, self.data.train_labels_shard, self.current_t)
            recorder.end('wait')
        recorder.start()
        cost, error = self.train_iter_fn(self.subb_t)
        recorder.train_error(count, cost, error)
        recorder.end('calc')
        self.subb_t += 1
        if self.subb_t == self.n_subb:
            self.subb_t, self.current_t = 0, self.current_t + 1

    def val_iter(self, count, recorder):
        if self.subb_v == 0:
            self._load(self.data.val_img_shard, self.data.val_labels_shard, self.current_v)
        from theanompi.models.layers2 import Crop, Dropout

        Dropout.SetDropoutOff()
        Crop.SetRandCropOff()
        cost, error, error_top5 = self.val_iter_fn(self.subb_v)
        Dropout.SetDropoutOn()
        Crop.SetRandCropOn()
        recorder.val_error(count, cost, error, error_top5)
        self.subb_v += 1
        if self.subb_v == self.n_subb:
            self.subb_v, self.current_v = 0, self.current_v + 1

    def adjust_hyperp(self, epoch):
        pass

    def cleanup(self):
        pass
