"""A Lasagne ResNet on CIFAR-10 trained by several workers through Multiverso's parameter manager.

    mpiexec -n 4 python examples/multiverso/lasagne_resnet_cifar10.py -n 5 -e 82        # ResNet-32, the paper's
    mpiexec -n 2 python examples/multiverso/lasagne_resnet_cifar10.py -n 1 -e 3 --train-size 640   # a quick look

Written the way Multiverso's Lasagne example is (``import lasagne`` code, ``LasagneParamManager``,
``sync_all_param()`` after every batch, the master validates), with the Python 3 / PyTensor spellings:
``theanompi.multiverso`` for ``multiverso``, ``pytensor`` for ``theano``, ``PYTENSOR_FLAGS`` for
``THEANO_FLAGS``. ``import lasagne`` gives :mod:`theanompi.lasagne` (Lasagne cannot be installed beside
pytensor). The CIFAR-10 python batches (``cifar-10-python.tar.gz`` unpacked) are read from ``--data``
(default ``./cifar-10-batches-py``) with theanompi's restricted unpickler, which loads numpy arrays only.

The network is He et al.'s CIFAR ResNet of depth 6n+2: a 3x3 convolution, three stages of n residual
blocks (16, 32, 64 filters; identity shortcuts, subsampled and zero-padded where the width doubles),
global average pooling and a softmax layer; momentum SGD with L2 regularisation, random crops and flips.
"""

import argparse
import os
import time

parser = argparse.ArgumentParser(description="Train a CIFAR-10 ResNet with Lasagne and theanompi.multiverso")
parser.add_argument("-n", type=int, default=5, help="residual blocks per stage: depth 6n+2 (default 5: ResNet-32)")
parser.add_argument("-lr", type=float, default=0.1, help="initial learning rate (default 0.1)")
parser.add_argument("-s", "--sync", action="store_true", help="a synchronous parameter server")
parser.add_argument("-b", "--batch-size", type=int, default=128, help="images per worker and step (default 128)")
parser.add_argument("-e", "--epochs", type=int, default=82, help="epochs (default 82)")
parser.add_argument("--data", default="cifar-10-batches-py", help="the CIFAR-10 python batches' directory")
parser.add_argument("--train-size", type=int, default=0, help="train on the first images only (0: all 50,000)")
args = parser.parse_args()

import theanompi.multiverso as mv  # noqa: E402  (MULTIVERSO: was `import multiverso as mv`)

mv.init(sync=args.sync)
worker_id, workers_num = mv.worker_id(), mv.workers_num()
# before pytensor loads, as the original set THEANO_FLAGS (added to flags the user set, e.g. a compiledir)
os.environ["PYTENSOR_FLAGS"] = ",".join(filter(None, [os.environ.get("PYTENSOR_FLAGS"), "floatX=float32"]))

import lasagne  # noqa: E402  (theanompi.lasagne where Lasagne is not installed)
import numpy as np  # noqa: E402
import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from lasagne.layers import (  # noqa: E402
    Conv2DLayer,
    DenseLayer,
    ElemwiseSumLayer,
    ExpressionLayer,
    GlobalPoolLayer,
    InputLayer,
    NonlinearityLayer,
    PadLayer,
    batch_norm,
)
from lasagne.nonlinearities import rectify, softmax  # noqa: E402

from theanompi.models.data.cifar10 import load_cifar10  # noqa: E402
from theanompi.multiverso.theano_ext.lasagne_ext import param_manager  # noqa: E402


def load_data(data_dir, train_size):
    """Float images in [0, 1] minus the training images' mean image, int32 labels."""
    (x_train, y_train), (x_test, y_test) = load_cifar10(data_dir, train_size=train_size or None)
    x_train, x_test = (x.astype(pytensor.config.floatX) / np.float32(255) for x in (x_train, x_test))
    mean = x_train.mean(axis=0)
    return x_train - mean, y_train.astype("int32"), x_test - mean, y_test.astype("int32")


def conv_bn(layer, filters, stride=1, nonlinearity=rectify):
    return batch_norm(Conv2DLayer(layer, filters, 3, stride=stride, pad="same", nonlinearity=nonlinearity,
                                  W=lasagne.init.HeNormal(gain="relu")))


def residual_block(layer, increase_dim=False):
    filters = layer.output_shape[1] * (2 if increase_dim else 1)
    out = conv_bn(conv_bn(layer, filters, stride=2 if increase_dim else 1), filters, nonlinearity=None)
    shortcut = layer
    if increase_dim:  # option A: every other pixel, the new channels zero
        half = ExpressionLayer(layer, lambda x: x[:, :, ::2, ::2], lambda s: (s[0], s[1], s[2] // 2, s[3] // 2))
        shortcut = PadLayer(half, [filters // 4, 0, 0], batch_ndim=1)
    return NonlinearityLayer(ElemwiseSumLayer([out, shortcut]), nonlinearity=rectify)


def build_resnet(input_var, n):
    layer = conv_bn(InputLayer((None, 3, 32, 32), input_var=input_var), 16)
    for stage in range(3):
        for k in range(n):
            layer = residual_block(layer, increase_dim=stage > 0 and k == 0)
    return DenseLayer(GlobalPoolLayer(layer), 10, W=lasagne.init.HeNormal(), nonlinearity=softmax)


def minibatches(x, y, batch_size, rng=None):
    """Batches in order (validation) or shuffled, cropped from 4-pixel zero padding and flipped (training)."""
    order = rng.permutation(len(x)) if rng is not None else np.arange(len(x))
    for start in range(0, len(x) - batch_size + 1, batch_size):
        idx = order[start:start + batch_size]
        images = x[idx]
        if rng is not None:
            padded = np.pad(images, ((0, 0), (0, 0), (4, 4), (4, 4)))
            offsets = rng.integers(0, 9, (len(idx), 2))
            images = np.stack([padded[i, :, a:a + 32, b:b + 32] for i, (a, b) in enumerate(offsets)])
            flips = rng.random(len(idx)) < 0.5
            images[flips] = images[flips, :, :, ::-1]
        yield images, y[idx]


x_train, y_train, x_test, y_test = load_data(args.data, args.train_size)
share = slice(worker_id * len(x_train) // workers_num, (worker_id + 1) * len(x_train) // workers_num)
x_train, y_train = x_train[share], y_train[share]  # each worker trains on its own part

input_var, target_var = pt.tensor4("inputs"), pt.ivector("targets")
lasagne.random.set_rng(np.random.RandomState(1234))  # the same start everywhere (the master's values win anyway)
network = build_resnet(input_var, args.n)
if mv.is_master_worker():
    print(f"ResNet-{6 * args.n + 2}: {lasagne.layers.count_params(network, trainable=True)} parameters, "
          f"{workers_num} workers, floatX {pytensor.config.floatX}", flush=True)
manager = param_manager.LasagneParamManager(network)  # MULTIVERSO: the network's parameters on the server

prediction = lasagne.layers.get_output(network)
loss = lasagne.objectives.categorical_crossentropy(prediction, target_var).mean()
loss = loss + 0.0001 * lasagne.regularization.regularize_network_params(network, lasagne.regularization.l2)
params = lasagne.layers.get_all_params(network, trainable=True)
learning_rate = pytensor.shared(lasagne.utils.floatX(args.lr))
updates = lasagne.updates.momentum(loss, params, learning_rate=learning_rate, momentum=0.9)
train_fn = pytensor.function([input_var, target_var], loss, updates=updates)
test_prediction = lasagne.layers.get_output(network, deterministic=True)
test_loss = lasagne.objectives.categorical_crossentropy(test_prediction, target_var).mean()
test_acc = pt.mean(pt.eq(pt.argmax(test_prediction, axis=1), target_var), dtype=pytensor.config.floatX)
val_fn = pytensor.function([input_var, target_var], [test_loss, test_acc])

rng = np.random.default_rng(worker_id)
batch_size = min(args.batch_size, len(x_train))
for epoch in range(args.epochs):
    start, losses = time.time(), []
    for images, labels in minibatches(x_train, y_train, batch_size, rng):
        losses.append(float(train_fn(images, labels)))
        manager.sync_all_param()  # MULTIVERSO: push this worker's change, fetch the server's newest values
    mv.barrier()
    if mv.is_master_worker():
        results = [val_fn(images, labels) for images, labels in minibatches(x_test, y_test, min(500, len(x_test)))]
        print(f"epoch {epoch + 1} of {args.epochs} ({time.time() - start:.1f} s): training loss {np.mean(losses):.4f}, "
              f"validation loss {np.mean([r[0] for r in results]):.4f}, "
              f"validation accuracy {100 * np.mean([r[1] for r in results]):.2f} %", flush=True)
    if epoch + 1 in (41, 61):  # the paper's steps, in epochs
        learning_rate.set_value(lasagne.utils.floatX(learning_rate.get_value() * 0.1))
mv.barrier()
if mv.is_master_worker():
    manager.sync_all_param()
    accuracy = np.mean([val_fn(images, labels)[1] for images, labels in minibatches(x_test, y_test,
                                                                                      min(500, len(x_test)))])
    print(f"final validation accuracy {100 * accuracy:.2f}%")
mv.shutdown()  # MULTIVERSO: stop the parameter server
