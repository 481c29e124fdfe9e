"""A ModelClass in the style of Theano-MPI's Lasagne zoo (vgg16.py): ``import lasagne`` unchanged
(theanompi.lasagne through the alias), Lasagne layers and objectives, Theano-MPI's contract, lib.opt."""

import lasagne
import numpy as np
import pytensor
import pytensor.tensor as T
from lasagne.layers import Conv2DLayer as ConvLayer
from lasagne.layers import DenseLayer, DropoutLayer, InputLayer, NonlinearityLayer
from lasagne.layers import MaxPool2DLayer as PoolLayer
from lasagne.nonlinearities import softmax

file_batch_size = 32
batch_size = 16


def build_small_vgg(input_shape):
    net = {}
    net['input'] = InputLayer(input_shape)
    net['conv1'] = ConvLayer(net['input'], 8, 3, pad=1, flip_filters=False)
    net['pool1'] = PoolLayer(net['conv1'], 2)
    net['conv2'] = ConvLayer(net['pool1'], 16, 3, pad=1, flip_filters=False)
    net['pool2'] = PoolLayer(net['conv2'], 2)
    net['fc'] = DenseLayer(net['pool2'], num_units=32)
    net['fc_dropout'] = DropoutLayer(net['fc'], p=0.5)
    net['out'] = DenseLayer(net['fc_dropout'], num_units=10, nonlinearity=None)
    net['prob'] = NonlinearityLayer(net['out'], softmax)
    return net


class SmallVGG:
    def __init__(self, config):
        self.verbose = config['verbose']
        self.rank = config['rank']
        self.size = config['size']
        self.name = 'SmallVGG'
        lasagne.random.set_rng(np.random.RandomState(1234))
        from theanompi.models.data import Cifar10_data

        self.data = Cifar10_data(verbose=False)
        self.batch_size, self.file_batch_size = batch_size, file_batch_size
        self.data.batch_data(file_batch_size)
        self.data.extend_data(rank=self.rank, size=self.size)
        self.data.shuffle_data(mode='train', common_seed=1234)
        self.data.shuffle_data(mode='val')
        self.data.shard_data(mode='train', rank=self.rank, size=self.size)
        self.data.shard_data(mode='val', rank=self.rank, size=self.size)
        self.n_epochs = 4
        self.epoch = 0
        self.mu = 0.9
        self.eta = 5e-4
        self.use_momentum = True
        self.use_nesterov_momentum = True
        self.shared_lr = pytensor.shared(np.float32(0.02))
        self.shared_x = pytensor.shared(np.zeros((file_batch_size, 3, 32, 32), dtype=pytensor.config.floatX),
                                        borrow=True)
        self.shared_y = pytensor.shared(np.zeros((file_batch_size,), dtype=int), borrow=True)
        self.subb_ind = T.iscalar('subb')
        part = slice(self.subb_ind * batch_size, (self.subb_ind + 1) * batch_size)
        self.shared_x_slice = self.shared_x[part]
        self.shared_y_slice = self.shared_y[part]
        self.build_model()
        self.params = lasagne.layers.get_all_params(self.output_layer, trainable=True)
        from theanompi.models.layers2 import count_params, extract_weight_types

        self.weight_types = extract_weight_types(self.params)
        count_params(self.params, self.verbose)
        self.grads = T.grad(self.cost, self.params)
        self.compiled_train_fn_list = []
        self.n_subb = file_batch_size // batch_size
        self.current_t = self.subb_t = 0
        self.current_v = self.subb_v = 0

    def build_model(self):
        self.x = T.ftensor4('x')
        self.y = T.lvector('y')
        self.lr = T.scalar('lr')
        net = build_small_vgg((None, 3, 32, 32))
        self.output_layer = net['prob']
        output = lasagne.layers.get_output(self.output_layer, self.x, deterministic=False)
        self.cost = lasagne.objectives.categorical_crossentropy(output, self.y).mean()
        self.error = 1 - lasagne.objectives.categorical_accuracy(output, self.y, top_k=1).mean()

    def compile_train(self, *args):
        for arg_list in args:
            self.compiled_train_fn_list.append(pytensor.function(**arg_list))

    def compile_val(self):
        output = lasagne.layers.get_output(self.output_layer, self.x, deterministic=True)
        cost = lasagne.objectives.categorical_crossentropy(output, self.y).mean()
        error = 1 - lasagne.objectives.categorical_accuracy(output, self.y, top_k=1).mean()
        error_top_5 = 1 - lasagne.objectives.categorical_accuracy(output, self.y, top_k=5).mean()
        self.val_fn = pytensor.function([self.subb_ind], [cost, error, error_top_5], updates=[],
                                        givens=[(self.x, self.shared_x_slice), (self.y, self.shared_y_slice)])

    def compile_iter_fns(self, sync_type):
        from theanompi.lib.opt import pre_model_iter_fn

        pre_model_iter_fn(self, self.size)

    def reset_iter(self, mode):
        if mode == 'train':
            self.current_t = self.subb_t = 0
        else:
            self.current_v = self.subb_v = 0

    def _load(self, images, labels, index):
        self.shared_x.set_value(images[index].astype('float32') / 255. - 0.5)
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
        cost, error, error_top5 = self.val_iter_fn(self.subb_v)
        recorder.val_error(count, cost, error, error_top5)
        self.subb_v += 1
        if self.subb_v == self.n_subb:
            self.subb_v, self.current_v = 0, self.current_v + 1

    def adjust_hyperp(self, epoch):
        pass

    def cleanup(self):
        pass
